"""Correlation ids to pending ack futures, and the in-flight window. No IO here.

`Correlator` is the publish hot path's bookkeeping. Per message it costs one
future (an `AckFuture`, which is also the registry entry) and a deque append;
there is no task per message and no timer handle per message: timers are kept
per distinct timeout value (`_Deadlines`), which turned a heap push of about
3 us (asyncio compares timer handles in Python) into an append.

Every entry leaves the registry exactly once, and the one exit (``_pop``) is
what frees its window slot and disarms its deadline (the deadline entry is
then skipped and dropped lazily). The ways out:

- an answer: `resolve` (an ack) or `fail` (a typed error from the server or a
  failed send);
- the ack timeout: `AckTimeoutError` once ``timeout`` seconds have passed;
- the caller cancelling the future (directly, or by cancelling a task awaiting
  it): the entry goes at once, synchronously, inside ``cancel()``;
- `fail_all` / `fail_owned` / `close`: connection loss or client close.

An answer for an id that is no longer (or never was) pending is ignored and
counted in `unknown_acks`: a late ack after a timeout, a duplicate, or another
client's ack on a shared inbox.

The window: at most ``capacity`` slots are held at a time. A slot is taken with
`try_acquire` (fails at once with `InflightLimitError`) or `acquire` (waits, first
come first served), then handed to `register`, and comes back when the entry
leaves. `wait_empty` waits until every slot is back.

The publish future, whose done callbacks run in batches. No IO here.

A pipelining publisher has thousands of futures in flight, each with a done
callback (its own, or the wake-up of a task awaiting it). asyncio schedules
every callback of every settled future as one ``loop.call_soon`` handle, built
in Python: about 1.5 us per settled publish, as much as reading its ack. A
`PublishFuture` keeps its callbacks itself instead, and when it settles hands
them to its `CallbackBatch`, which runs the callbacks of every future settled
meanwhile from one handle. What asyncio promises still holds: callbacks run
from the event loop, never inside ``set_result`` or ``cancel``; each in the
context it was added with; in the order they were added, future by future in
the order the futures settled (a callback added to a settled future: when it
was added); an exception from one goes to the loop's exception handler and the
others still run. The one difference, which asyncio does not promise either
way: callbacks of publishes settled later in the same loop iteration may run
before other callbacks the loop was given meanwhile.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from liftbridge_client.errors import (
    AckTimeoutError,
    ConnectionClosedError,
    InflightLimitError,
    InvalidInputError,
)

if TYPE_CHECKING:
    from liftbridge_client.models import Ack

log = logging.getLogger(__name__)

__all__ = ["AckFuture", "CallbackBatch", "Correlator", "PublishFuture", "settle_result"]

_T = TypeVar("_T")
_Callback = Callable[[Any], object]
_Callbacks = list[tuple[_Callback, contextvars.Context]]
# What a future holds until it settles: nothing, one callback (with its context in
# ``_ctx``: most futures have one, and a tuple or list for it costs as much again), or a
# list of (callback, context); `_SETTLED` once it settled.
_Held = _Callback | _Callbacks | None
_copy_context = contextvars.copy_context


class _SettledMark:
    __slots__ = ()

    def __repr__(self) -> str:
        return "<settled>"


_SETTLED: Any = _SettledMark()


class CallbackBatch:
    """Runs the done callbacks of the futures settled since it last ran, from one handle."""

    __slots__ = ("_callbacks", "_contexts", "_futures", "_loop", "_scheduled")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        # Item i of each: a future, one callback or a list of them, the one callback's
        # context. Three lists rather than one of tuples: a tuple per settled publish was
        # one more object for CPython's cyclic GC to count (a collection every few
        # hundred acks).
        self._futures: list[asyncio.Future[Any]] = []
        self._callbacks: list[_Callback | _Callbacks] = []
        self._contexts: list[Any] = []
        self._scheduled = False

    def add(
        self, fut: asyncio.Future[Any], callbacks: _Callback | _Callbacks, context: Any
    ) -> None:
        self._futures.append(fut)
        self._callbacks.append(callbacks)
        self._contexts.append(context)
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self._run)

    def _run(self) -> None:
        self._scheduled = False
        futures, callbacks, contexts = self._futures, self._callbacks, self._contexts
        self._futures, self._callbacks, self._contexts = [], [], []
        served = 0
        try:
            for fut, held, context in zip(futures, callbacks, contexts, strict=True):
                served += 1
                if type(held) is list:
                    for fn, fn_context in held:
                        self._call(fut, fn, fn_context)
                else:
                    self._call(fut, held, context)  # type: ignore[arg-type]
        finally:
            if served < len(futures):
                # SystemExit or KeyboardInterrupt left the loop: the futures not served
                # yet keep their turn (the one interrupted lost only the callbacks run).
                self._futures[:0] = futures[served:]
                self._callbacks[:0] = callbacks[served:]
                self._contexts[:0] = contexts[served:]
                if not self._scheduled:
                    self._scheduled = True
                    self._loop.call_soon(self._run)

    def _call(self, fut: asyncio.Future[Any], fn: _Callback, context: contextvars.Context) -> None:
        try:
            context.run(fn, fut)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:  # as asyncio's Handle: report it, go on
            self._loop.call_exception_handler(
                {"message": f"Exception in callback {fn!r}", "exception": exc, "future": fut}
            )


class PublishFuture(asyncio.Future[_T], Generic[_T]):
    """The future of one publish: its ``correlation_id``, and the `Ack` once acked.

    ``Client.send`` and ``Client.publish_nowait`` return it. It resolves to the `Ack`
    (to None with ack policy NONE, once written) or fails with a `LiftbridgeError`.
    Cancelling it withdraws the publish if it was not written yet. Its done callbacks
    run as asyncio's do, batched with those of the other publishes settled at the
    same time. (Internally it is its own registry entry; ``owner`` tags the
    connection it went out on, so that connection's loss fails exactly its messages:
    `Correlator.fail_owned`; ``expect`` is the (stream, subject) an ack on the NATS
    inbox must name to settle it; ``stream`` the stream a PublishAsync request went to,
    for the words of an error answer that names only the partition.)
    """

    __slots__ = (
        "_batch",
        "_cb",
        "_correlator",
        "_ctx",
        "_deadline",
        "correlation_id",
        "expect",
        "owner",
        "stream",
    )

    # No __init__ of its own: `Correlator.register` creates it with asyncio's (in C)
    # and sets the slots, which costs half as much per publish as a Python __init__.
    # Made any other way (no ``_cb`` slot set), it is a plain asyncio future.
    _batch: CallbackBatch
    _cb: _Held  # the callbacks, kept until it settles (see _Held)
    _ctx: contextvars.Context  # the context of a single callback
    _correlator: Correlator | None  # None once it left the registry
    _deadline: float  # event-loop time its ack wait ends
    correlation_id: str
    owner: object
    expect: tuple[str, str] | None
    stream: str | None

    def __repr__(self) -> str:
        return f"<PublishFuture {self.correlation_id!r} {self._state.lower()}>"

    def add_done_callback(
        self, fn: _Callback, *, context: contextvars.Context | None = None
    ) -> None:
        try:
            held = self._cb
        except AttributeError:  # not made by a Correlator
            super().add_done_callback(fn, context=context)
            return
        if context is None:
            context = _copy_context()
        if held is None:
            self._cb = fn
            self._ctx = context
        elif held is _SETTLED:
            # Run from the batch as asyncio would schedule it now: after the callbacks
            # of the publishes settled before, before those of the ones settled after.
            self._batch.add(self, fn, context)
        elif type(held) is list:
            held.append((fn, context))
        else:
            self._cb = [(held, self._ctx), (fn, context)]  # type: ignore[list-item]

    def remove_done_callback(self, fn: _Callback) -> int:
        removed = super().remove_done_callback(fn)
        held = getattr(self, "_cb", None)
        if held is None or held is _SETTLED:
            return removed
        callbacks: _Callbacks = held if isinstance(held, list) else [(held, self._ctx)]
        kept = [entry for entry in callbacks if entry[0] != fn]
        removed += len(callbacks) - len(kept)
        if not kept:
            self._cb = None
        elif len(kept) == 1:
            self._cb, self._ctx = kept[0]
        else:
            self._cb = kept
        return removed

    def set_result(self, result: _T) -> None:
        super().set_result(result)
        self._settled()

    def set_exception(self, exception: type | BaseException) -> None:
        super().set_exception(exception)
        self._settled()

    def cancel(self, msg: Any | None = None) -> bool:
        if not super().cancel(msg):
            return False
        self._settled()
        correlator = getattr(self, "_correlator", None)
        if correlator is not None:
            correlator._pop(self.correlation_id)  # the caller gave up: leave now
        return True

    def _settled(self) -> None:
        # settle_result() below repeats this (one call less per ack): change both.
        try:
            held = self._cb
        except AttributeError:  # not made by a Correlator: asyncio scheduled them
            return
        self._cb = _SETTLED
        if held is not None and held is not _SETTLED:
            self._batch.add(self, held, self._ctx)


_future_set_result = asyncio.Future.set_result


def settle_result(fut: PublishFuture[Any], result: object) -> None:
    """``fut.set_result(result)`` for a future made by a Correlator, one call shorter
    (the ack hot path)."""
    _future_set_result(fut, result)
    held = fut._cb
    fut._cb = _SETTLED
    if held is not None:
        fut._batch.add(fut, held, fut._ctx)


# The registry's view: resolved with an Ack, or None for ack policy NONE.
AckFuture = PublishFuture["Ack | None"]

# A due deadline may be served this much early (the loop's clock granularity).
_EARLY = 0.001


def _clock_of(loop: asyncio.AbstractEventLoop) -> Callable[[], float]:
    """``loop.time``, or the function it returns, when that is plain asyncio's: a
    registered publish reads the clock once, and the method adds a Python call (a tenth
    of a microsecond of about fifteen). Other loops (uvloop) keep clocks of their own."""
    method = loop.time
    if getattr(method, "__func__", None) is asyncio.BaseEventLoop.time:
        return time.monotonic
    return method


class _Deadlines:
    """Deadlines of the entries registered with one timeout value, in order, and one timer.

    One ``call_at`` handle per distinct timeout replaces one per message: entries
    registered with equal timeouts expire in registration order, so a deque is
    enough and registering is an append. Settled entries are dropped lazily,
    from the head (on register and when the timer fires). Acks mostly come in
    order, so the deque stays about as long as the in-flight window; an entry
    that is never answered holds the settled ones behind it (a few dozen bytes
    each) until its own deadline passes.
    """

    __slots__ = ("handle", "queue")

    def __init__(self) -> None:
        self.queue: deque[AckFuture] = deque()
        self.handle: asyncio.TimerHandle | None = None


class Correlator:
    """Pending publishes by correlation id, with a bounded in-flight window."""

    def __init__(self, capacity: int, *, loop: asyncio.AbstractEventLoop | None = None) -> None:
        if capacity < 1:
            raise InvalidInputError(f"capacity must be >= 1, got {capacity}")
        self._capacity = capacity
        self._loop = loop = loop or asyncio.get_running_loop()
        self._clock = _clock_of(loop)
        self._entries: dict[str, AckFuture] = {}
        self._held = 0  # slots taken: registered entries + acquired, not yet registered
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._empty_waiters: list[asyncio.Future[None]] = []
        self._closed: BaseException | None = None
        self._timers: dict[float, _Deadlines] = {}
        self._batch = CallbackBatch(self._loop)
        self.unknown_acks = 0
        # Given each publish whose ack wait ran out, with its AckTimeoutError; True: it
        # settles the future itself (later, with the cause: _publish.publisher.TimeoutCheck).
        self.on_timeout: Callable[[AckFuture, AckTimeoutError], bool] | None = None

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, correlation_id: object) -> bool:
        return correlation_id in self._entries

    def __repr__(self) -> str:
        return (
            f"<Correlator pending={len(self._entries)} held={self._held}/{self._capacity} "
            f"unknown_acks={self.unknown_acks}{' closed' if self._closed else ''}>"
        )

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def held(self) -> int:
        """Slots in use (registered entries plus acquired, unregistered slots)."""
        return self._held

    @property
    def closed(self) -> bool:
        return self._closed is not None

    # ------------------------------------------------------------ the window

    def try_acquire(self) -> None:
        """Take a slot now, or raise `InflightLimitError` (also when others are waiting)."""
        self._check_open()
        if not self.take():
            raise InflightLimitError(
                f"{self._held} publishes in flight, the limit (max_inflight) is {self._capacity}"
            )

    def take(self) -> bool:
        """`try_acquire` without the errors: True when a slot was taken."""
        if self._held < self._capacity and not self._waiters and self._closed is None:
            self._held += 1
            return True
        return False

    async def acquire(self) -> None:
        """Take a slot, waiting (first come, first served) until one is free."""
        self._check_open()
        if self._held < self._capacity and not self._waiters:
            self._held += 1
            return
        waiter: asyncio.Future[None] = self._loop.create_future()
        self._waiters.append(waiter)
        try:
            await waiter  # a freed slot is handed over by _free_slot, held unchanged
            self._check_open()  # closed after the hand-over (close reset the count)
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                self._free_slot()  # handed a slot just as we were cancelled: give it back
            raise
        finally:
            if (not waiter.done() or waiter.cancelled()) and waiter in self._waiters:
                self._waiters.remove(waiter)

    def release(self) -> None:
        """Give back a slot that was acquired but never registered."""
        if self._closed is not None:
            return  # close() took every slot back
        if self._held <= len(self._entries):
            raise RuntimeError("release() without an unregistered acquired slot")
        self._free_slot()

    def _free_slot(self) -> None:
        waiters = self._waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)  # the slot passes straight to the waiter
                return
        self._held -= 1
        if self._held == 0 and self._empty_waiters:
            empty, self._empty_waiters = self._empty_waiters, []
            for fut in empty:
                if not fut.done():
                    fut.set_result(None)

    async def wait_empty(self) -> None:
        """Wait until no publish is pending (every slot is back)."""
        if self._held == 0:
            return
        fut: asyncio.Future[None] = self._loop.create_future()
        self._empty_waiters.append(fut)
        try:
            await fut
        finally:
            if not fut.done():
                fut.cancel()
            if fut in self._empty_waiters:
                self._empty_waiters.remove(fut)

    def _check_open(self) -> None:
        if self._closed is not None:
            raise ConnectionClosedError("the publisher is closed") from self._closed

    # ------------------------------------------------------------ the registry

    def register(self, correlation_id: str, timeout: float) -> AckFuture:
        """Register a pending publish on an acquired slot; it fails after ``timeout`` s."""
        if self._closed is not None:
            self._check_open()
        entries = self._entries
        if self._held <= len(entries):
            raise RuntimeError("register() needs a slot from acquire() or try_acquire()")
        if correlation_id in entries:
            raise InvalidInputError(f"correlation id {correlation_id!r} is already pending")
        loop = self._loop
        fut: AckFuture = PublishFuture(loop=loop)
        fut._correlator = self
        fut._batch = self._batch
        fut._cb = None
        fut.correlation_id = correlation_id
        fut.owner = None
        fut.expect = None
        fut.stream = None
        fut._deadline = deadline = self._clock() + timeout
        entries[correlation_id] = fut
        timer = self._timers.get(timeout)
        if timer is None:
            timer = self._timers[timeout] = _Deadlines()
        queue = timer.queue
        while queue and queue[0]._correlator is None:
            queue.popleft()  # already settled (acks mostly come in order): keep it short
        queue.append(fut)
        if timer.handle is None:
            timer.handle = loop.call_at(deadline, self._expire_due, timeout)
        return fut

    @property
    def entries(self) -> Mapping[str, AckFuture]:
        """The pending publishes by correlation id: the registry itself, to look up in
        (the C ack scan does), never to change. The same object for the correlator's
        life."""
        return self._entries

    def get(self, correlation_id: str) -> AckFuture | None:
        """The pending future of ``correlation_id``, if any (it stays registered)."""
        return self._entries.get(correlation_id)

    def pending(self) -> list[AckFuture]:
        """A snapshot of the pending futures, oldest first."""
        return list(self._entries.values())

    def _pop(self, correlation_id: str) -> AckFuture | None:
        """The single exit of the registry: cancel the timer, free the slot."""
        fut = self._entries.pop(correlation_id, None)
        if fut is None:
            return None
        fut._correlator = None  # its deadline entry is dropped lazily
        if self._waiters or self._held == 1:
            self._free_slot()  # a waiter takes the slot, or the window is empty now
        else:
            self._held -= 1
        return fut

    def resolve(self, correlation_id: str, ack: Ack | None) -> bool:
        """An ack arrived. False (and counted) when nothing was waiting for it."""
        fut = self._pop(correlation_id)
        if fut is None:
            self.unknown_acks += 1
            log.debug("ack for unknown correlation id %r ignored", correlation_id)
            return False
        if not fut.done():
            settle_result(fut, ack)
        return True

    def settle(self, fut: AckFuture, ack: Ack | None) -> None:
        """`resolve` of an entry the caller found in `entries` (the C ack scan did)."""
        self._pop(fut.correlation_id)
        if not fut.done():
            settle_result(fut, ack)

    def fail(self, correlation_id: str, exc: BaseException) -> bool:
        """An error answer arrived. False (and counted) when nothing was waiting for it."""
        fut = self._pop(correlation_id)
        if fut is None:
            self.unknown_acks += 1
            log.debug("error for unknown correlation id %r ignored: %s", correlation_id, exc)
            return False
        if not fut.done():
            fut.set_exception(exc)
        return True

    def _expire_due(self, timeout: float) -> None:
        """The timer of one ack-wait value: fail what is due, re-arm for the next one."""
        timer = self._timers.get(timeout)
        if timer is None:  # pragma: no cover - close() cancels every handle
            return
        timer.handle = None
        queue = timer.queue
        now = self._loop.time() + _EARLY
        while queue:
            fut = queue[0]
            if fut._correlator is None:
                queue.popleft()  # settled some other way
                continue
            if fut._deadline > now:
                break
            queue.popleft()
            self._pop(fut.correlation_id)
            if not fut.done():
                exc = AckTimeoutError(
                    f"no ack for correlation id {fut.correlation_id!r} within {timeout}s"
                )
                hook = self.on_timeout
                if hook is None or not hook(fut, exc):
                    fut.set_exception(exc)
        if queue:
            timer.handle = self._loop.call_at(queue[0]._deadline, self._expire_due, timeout)
        else:
            del self._timers[timeout]

    def fail_owned(self, owner: object, exc: BaseException) -> int:
        """Fail every pending publish tagged with ``owner``; return how many."""
        ids = [cid for cid, fut in self._entries.items() if fut.owner is owner]
        for cid in ids:
            fut = self._pop(cid)
            if fut is not None and not fut.done():
                fut.set_exception(exc)
        return len(ids)

    def fail_all(self, exc: BaseException) -> int:
        """Fail every pending publish with ``exc`` (one instance, shared); return how many.

        Give ``exc`` its cause (``__cause__``) before calling: `Future.result`
        re-raises it with the traceback it was stored with, chain included.
        """
        ids = list(self._entries)
        for cid in ids:
            fut = self._pop(cid)
            if fut is not None and not fut.done():
                fut.set_exception(exc)
        return len(ids)

    def close(self, exc: BaseException) -> int:
        """Fail everything pending and every `acquire` waiting; refuse new work.

        The futures failed here are marked as retrieved: whoever awaits one still
        gets ``exc``, but a future nobody kept does not log "exception was never
        retrieved" (the caller asked for the close; the publisher logs a count).
        """
        if self._closed is None:
            self._closed = exc
        # Waiters first, so that slots freed below are not handed to them.
        waiters, self._waiters = self._waiters, deque()
        for waiter in waiters:
            if not waiter.done():
                waiter.set_exception(exc)
        pending = self.pending()
        count = self.fail_all(exc)
        for fut in pending:
            if not fut.cancelled():
                fut.exception()  # mark retrieved
        for timer in self._timers.values():
            if timer.handle is not None:
                timer.handle.cancel()
        self._timers.clear()
        # Slots acquired but never registered die with the window.
        self._held = 0
        empty, self._empty_waiters = self._empty_waiters, []
        for waiter in empty:
            if not waiter.done():
                waiter.set_result(None)
        return count
