"""What a publish is on its way out (`Item`), the way out it takes (`Route`), and what
the ways out share with the publisher (`Slots`). No IO here.

`_publish.publisher.Publisher` checks a publish, registers it and puts it on its queue,
or hands it to a route at once; each route (`_publish.nats.NatsRoute`,
`_publish.leaders.LeaderRoute`) implements `Route`:

- ``prepare(item, info)`` builds the wire form (the envelope, or the PublishRequest);
- ``submit(item, fut)`` hands a prepared publish over at once, in call order, when the
  route can take it without waiting (False: the sender does it);
- ``send(item, fut)`` is the sender's way, which may wait (a full NATS buffer, a stream to
  open, a leader to find);
- ``direct(...)`` is the one-step publish of the common case (plain bytes, at most a key
  and a small dict of plain headers, the stream's metadata cached): ``send_plain`` of the
  publisher calls it, and it returns None whenever the general path must run instead.
  Its bytes and outcomes are those of ``prepare`` + ``submit``
  (tests/unit/test_publish_routes.py checks it);
- ``usable`` and ``close``.

What a route takes from the publisher (a correlation id, the ack wait, a queue entry for
the sender, the sender woken) is `Slots`, which the publisher implements.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Protocol

from liftbridge_client._proto import api_pb2
from liftbridge_client._publish.acks import AckFuture
from liftbridge_client.models import AckPolicy, StreamInfo
from liftbridge_client.partitioning import Partitioner

__all__ = ["Item", "Route", "Slots"]


@dataclass(slots=True, eq=False)
class Item:
    """One publish between the call and the wire."""

    stream: str
    value: bytes
    key: bytes | None
    headers: Mapping[str, bytes] | None
    partition: int | None  # explicit, or chosen by _complete
    partitioner: Partitioner | None
    ack_policy: AckPolicy
    expected_offset: int
    correlation_id: str
    route: Route  # where it leaves the client
    subject: str = ""  # NATS: the partition's subject
    payload: bytes | None = None  # NATS: the enveloped message
    request: api_pb2.PublishRequest | None = None  # gRPC
    future: AckFuture | None = None

    @property
    def ready(self) -> bool:
        return self.payload is not None or self.request is not None


class Slots(Protocol):
    """What the routes share with the publisher: correlation ids, the ack wait, the
    window's full flag and the sender's queue."""

    cid_prefix: str  # correlation ids are cid_prefix + next(cid_counter)
    cid_counter: Iterator[int]
    ack_wait: float  # seconds, ClientOptions.ack_wait

    def window_full(self) -> None:
        """A one-step publish found no free slot in the window (the general path waits)."""
        ...

    def wake_sender(self) -> None: ...

    def queue(self, item: Item) -> None:
        """Put a registered publish at the tail of the sender's queue and wake it."""
        ...

    def requeue(self, items: list[Item]) -> None:
        """Put publishes back at the head of the queue, in order, and wake the sender."""
        ...


class Route(Protocol):
    """One way out for publishes: NATS, or the partition leaders' PublishAsync streams
    (the module docstring says what each method does)."""

    @property
    def usable(self) -> bool: ...

    def prepare(self, item: Item, info: StreamInfo) -> None: ...

    def direct(
        self,
        stream: str,
        value: bytes,
        info: StreamInfo,
        partition: int,
        ack_policy: AckPolicy,
        held: bool,
        key: bytes | None = None,
        headers: Mapping[str, bytes] | None = None,
    ) -> AckFuture | None: ...

    def submit(self, item: Item, fut: AckFuture) -> bool: ...

    async def send(self, item: Item, fut: AckFuture) -> None: ...

    async def close(self, exc: BaseException, deadline: float) -> None: ...
