"""A NATS connection stranded on the wrong side of a split: when to go around it.

A NATS publish reaches a partition only if the NATS server the client is connected to
can route to the one the partition's leader listens on. When a cluster splits, nats-py
keeps its connection to a server on the minority side (the connection is healthy), and
the partitions the majority now leads never hear from it: every NATS publish times out
until the split heals, while gRPC publishes reach the new leaders at once.

`Strand` decides, from the ack timeouts the metadata check could not explain by the
partition itself (not paused, read-only or gone: its leader moved, or it looks healthy),
when the publisher detours: NATS publishes go over the leaders' PublishAsync streams for
a while, and when a leader the client already knew still hears nothing, the NATS
connection is asked to move to another server of the cluster. When
the detour ends NATS is tried again; a strand found again soon after doubles the next
detour (up to `MAX_DETOUR`), so a split that lasts costs one ``ack_wait`` of timeouts per
detour rather than every publish. `Strand` is pure (the caller passes the time);
`Detour` carries its decisions out with what the publisher gives it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

import nats.aio.client

from liftbridge_client._tasks import TaskHandle
from liftbridge_client._transport.nats import move_nats

__all__ = ["MAX_DETOUR", "MIN_DETOUR", "Detour", "Strand"]

log = logging.getLogger(__name__)

MIN_DETOUR = 5.0  # seconds: the first detour is at least this long (and 2 x ack_wait)
MAX_DETOUR = 60.0  # seconds: the longest detour while the strand lasts


class Strand:
    """Detour state for one publisher's NATS route."""

    __slots__ = ("_base", "_detour", "_ends_at", "ack_wait", "detours")

    def __init__(self, ack_wait: float) -> None:
        self.ack_wait = ack_wait
        self._base = max(MIN_DETOUR, 2 * ack_wait)
        self._detour = 0.0  # the current (or last) detour's length; 0: none yet
        self._ends_at: float | None = None  # when the current or last detour ends
        self.detours = 0  # detours started (stats, tests)

    def silent(self, now: float) -> float | None:
        """Ack timeouts with a healthy-looking partition: the detour to start (seconds),
        or None while one is on (timeouts of publishes sent before it began)."""
        ends = self._ends_at
        if ends is not None and now < ends:
            return None
        if ends is not None and now < ends + 2 * self._detour:
            # Stranded again soon after NATS was tried again: the split lasts.
            self._detour = min(MAX_DETOUR, 2 * self._detour)
        else:
            self._detour = self._base
        self._ends_at = now + self._detour
        self.detours += 1
        return self._detour

    def detoured(self, now: float) -> bool:
        """Whether NATS publishes should go around NATS now."""
        return self._ends_at is not None and now < self._ends_at


class Detour:
    """Starts and ends a publisher's detours: ``route(True)`` sends NATS publishes over
    the leaders' streams, ``route(False)`` over NATS again; ``nc`` is asked to move."""

    def __init__(
        self,
        strand: Strand,
        loop: asyncio.AbstractEventLoop,
        route: Callable[[bool], None],
        nc: nats.aio.client.Client,
        spawn: Callable[..., TaskHandle],
    ) -> None:
        self.strand = strand
        self._loop = loop
        self._route = route
        self._nc = nc
        self._spawn = spawn
        self._timer: asyncio.TimerHandle | None = None
        self._moved = False  # the NATS connection was asked to move in this detour
        self._moving = False  # ... and has not reconnected since
        self._down = False  # nats-py lost the connection and is reconnecting
        self._quiet_until = 0.0  # timeouts until then belong to the last outage
        self._closed = False

    def stranded(self, silent: bool) -> None:
        """NATS publishes timed out while their partitions look led and writable;
        ``silent``: some with the very leader the client knew (not only moved ones)."""
        now = self._loop.time()
        if self._closed or self._down or now < self._quiet_until:
            return  # a NATS outage explains the silence (and nats-py said so)
        detour = self.strand.silent(now)
        if detour is not None:
            log.warning(
                "NATS publishes get no acks while their partitions look healthy (this "
                "client's NATS server may be cut off from their leaders): publishing over "
                "gRPC for %.0f s",
                detour,
            )
            self._route(True)
            self._timer = self._loop.call_later(detour, self._over)
            self._moved = False
        if silent and not self._moved and self.strand.detoured(self._loop.time()):
            # A leader that did not move and still hears nothing: the NATS path itself.
            # (A moved leader alone is an ordinary failover: a move would cost the acks
            # in flight to every other partition.)
            self._moved = self._moving = True
            log.warning("moving the NATS connection to another server of its pool")
            with contextlib.suppress(RuntimeError):  # the client's tasks are stopping
                self._spawn(self._move, name="lb-nats-move")

    async def _move(self) -> None:
        if not await move_nats(self._nc):
            self._moving = False

    def outage(self, down: bool) -> bool:
        """nats-py lost the connection (``down``) or has it back; True when that is the
        move this detour asked for (not an outage to warn about)."""
        moving = self._moving
        self._down = down
        if not down:
            self._moving = False
            # Publishes sent around the outage may still time out: not a strand.
            self._quiet_until = self._loop.time() + 2 * self.strand.ack_wait
        return moving

    def _over(self) -> None:
        # No other detour starts while one is on, so its end needs no second look at the
        # clock (asyncio may run a timer a clock tick early).
        self._timer = None
        log.info("NATS publishes go over NATS again")
        self._route(False)

    def close(self) -> None:
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
