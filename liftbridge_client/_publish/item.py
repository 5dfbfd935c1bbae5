"""The queued publish (`Item`), the `Route` it leaves the client by, and the `Slots` a
route's one-step publish takes from the publisher. Pure types: the routes themselves are
in `_publish.routes`.
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
    (`_publish.routes` says what each method does)."""

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
