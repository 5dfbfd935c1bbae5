"""What a publish is on its way out (`Item`), the way out it takes (`Route`), and what
the ways out share with the publisher (`Slots`). No IO here.

`_publish.publisher.Publisher` checks a publish, registers it and puts it on the queue
in `Slots`, or hands it to a route at once; each route (`_publish.nats.NatsRoute`,
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

A route never calls the publisher: what it needs of it (a correlation id, the ack wait,
a queue entry for the sender, the sender woken) is in `Slots`, which the publisher owns
and the routes are given.
"""

from __future__ import annotations

import asyncio
import itertools
import secrets
from collections import deque
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
    ack_wait: float | None = None  # seconds; None: ClientOptions.ack_wait

    @property
    def ready(self) -> bool:
        return self.payload is not None or self.request is not None


class Slots:
    """What the routes share with the publisher: correlation ids, the ack wait, the
    window's full flag, and the sender's queue with its waker.

    The publisher owns one and its sender task drains ``queue``; a route takes ids from
    it and puts on it what only the sender can write.
    """

    __slots__ = (
        "ack_wait",
        "cid_counter",
        "cid_prefix",
        "closed",
        "queue",
        "waker",
        "window_was_full",
    )

    def __init__(self, ack_wait: float) -> None:
        self.cid_prefix = secrets.token_hex(8) + "-"  # ids are cid_prefix + next(cid_counter)
        self.cid_counter: Iterator[int] = itertools.count(1)
        self.ack_wait = ack_wait  # seconds, ClientOptions.ack_wait
        self.window_was_full = False  # a one-step publish found no free slot
        self.queue: deque[Item] = deque()  # registered publishes for the sender, in order
        self.waker: asyncio.Future[None] | None = None  # what the idle sender awaits
        self.closed = False  # the publisher is closed: nothing goes back on the queue

    def skip_past(self, correlation_id: str) -> None:
        """A caller's own id of the automatic form (copied from an ack, say): automatic ids
        go on after it, so none equals it and fails as "already pending" though the caller
        never gave it. Costs the explicit-id path a startswith; automatic ids nothing."""
        if not correlation_id.startswith(self.cid_prefix):
            return
        suffix = correlation_id[len(self.cid_prefix) :]
        # 19 digits or more: the counter never gets there (and int() could be slow).
        if suffix.isascii() and suffix.isdigit() and len(suffix) < 19:
            following = next(self.cid_counter)
            self.cid_counter = itertools.count(max(following, int(suffix) + 1))

    def window_full(self) -> None:
        """A one-step publish found no free slot in the window (the general path waits)."""
        self.window_was_full = True

    def wake_sender(self) -> None:
        waker = self.waker
        if waker is not None and not waker.done():
            waker.set_result(None)

    def put(self, item: Item) -> None:
        """Put a registered publish at the tail of the sender's queue and wake it."""
        self.queue.append(item)
        self.wake_sender()

    def requeue(self, items: list[Item]) -> None:
        """Put publishes back at the head of the queue, in order, and wake the sender."""
        if self.closed:
            return
        self.queue.extendleft(reversed(items))
        self.wake_sender()


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
