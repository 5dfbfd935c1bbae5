"""The publish future, whose done callbacks run in batches. No IO here.

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
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from liftbridge_client._correlation import Correlator

__all__ = ["CallbackBatch", "PublishFuture", "settle_result"]

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

    __slots__ = ("_loop", "_ready", "_scheduled")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        # (future, one callback or a list of them, the one callback's context)
        self._ready: list[tuple[asyncio.Future[Any], _Callback | _Callbacks, Any]] = []
        self._scheduled = False

    def add(
        self, fut: asyncio.Future[Any], callbacks: _Callback | _Callbacks, context: Any
    ) -> None:
        self._ready.append((fut, callbacks, context))
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self._run)

    def _run(self) -> None:
        self._scheduled = False
        ready, self._ready = self._ready, []
        served = 0
        try:
            for fut, callbacks, context in ready:
                served += 1
                if type(callbacks) is list:
                    for fn, fn_context in callbacks:
                        self._call(fut, fn, fn_context)
                else:
                    self._call(fut, callbacks, context)  # type: ignore[arg-type]
        finally:
            if served < len(ready):
                # SystemExit or KeyboardInterrupt left the loop: the futures not served
                # yet keep their turn (the one interrupted lost only the callbacks run).
                self._ready[:0] = ready[served:]
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
    inbox must name to settle it.)
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
