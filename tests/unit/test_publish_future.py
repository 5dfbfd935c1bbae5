"""PublishFuture's batched done callbacks keep asyncio's promises.

The differential test runs the same operations on plain asyncio futures and on
publish futures from a Correlator and compares what the callbacks saw, in order.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable
from typing import Any

import pytest
from budget import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from liftbridge_client import errors
from liftbridge_client._publish.acks import AckFuture, Correlator, PublishFuture

LONG = 60.0
VAR: contextvars.ContextVar[str] = contextvars.ContextVar("VAR", default="unset")


def register(c: Correlator, cid: str, timeout: float = LONG) -> AckFuture:
    c.try_acquire()
    return c.register(cid, timeout)


def outcome(fut: asyncio.Future[Any]) -> str:
    if fut.cancelled():
        return "cancelled"
    exc = fut.exception()
    return f"error:{exc}" if exc is not None else f"ok:{fut.result()}"


async def settle_loop() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


async def test_callbacks_run_from_the_loop_in_the_order_added() -> None:
    c = Correlator(8)
    fut = register(c, "a")
    seen: list[str] = []
    fut.add_done_callback(lambda f: seen.append("one:" + outcome(f)))
    fut.add_done_callback(lambda f: seen.append("two:" + outcome(f)))
    fut.add_done_callback(lambda f: seen.append("three"))
    c.resolve("a", None)
    assert seen == []  # never inside set_result
    await settle_loop()
    assert seen == ["one:ok:None", "two:ok:None", "three"]


async def test_futures_settled_in_one_iteration_run_in_settle_order() -> None:
    c = Correlator(8)
    futs = [register(c, str(i)) for i in range(5)]
    seen: list[str] = []
    for fut in futs:
        fut.add_done_callback(lambda f: seen.append(f.correlation_id))
    for cid in ("3", "0", "4"):
        c.resolve(cid, None)
    c.fail("1", errors.PublishError("no"))
    futs[2].cancel()
    await settle_loop()
    assert seen == ["3", "0", "4", "1", "2"]
    assert c.held == 0


async def test_each_callback_runs_in_the_context_it_was_added_in() -> None:
    c = Correlator(8)
    fut = register(c, "a")
    seen: list[str] = []
    VAR.set("first")
    fut.add_done_callback(lambda f: seen.append(VAR.get()))
    VAR.set("second")
    fut.add_done_callback(lambda f: seen.append(VAR.get()))
    explicit = contextvars.copy_context()
    explicit.run(VAR.set, "explicit")
    fut.add_done_callback(lambda f: seen.append(VAR.get()), context=explicit)
    VAR.set("when settled")
    c.resolve("a", None)
    await settle_loop()
    assert seen == ["first", "second", "explicit"]


async def test_a_failing_callback_is_reported_and_the_others_run() -> None:
    loop = asyncio.get_running_loop()
    reported: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, ctx: reported.append(ctx))
    try:
        c = Correlator(8)
        a, b = register(c, "a"), register(c, "b")
        seen: list[str] = []

        def boom(f: asyncio.Future[Any]) -> None:
            raise ValueError("boom")

        a.add_done_callback(boom)
        a.add_done_callback(lambda f: seen.append("a"))
        b.add_done_callback(lambda f: seen.append("b"))
        c.resolve("a", None)
        c.resolve("b", None)
        await settle_loop()
        assert seen == ["a", "b"]
        assert len(reported) == 1
        assert isinstance(reported[0]["exception"], ValueError)
        assert reported[0]["future"] is a
        assert "boom" in reported[0]["message"]
    finally:
        loop.set_exception_handler(None)


async def test_keyboard_interrupt_leaves_the_loop_and_the_rest_still_run() -> None:
    c = Correlator(8)
    a, b = register(c, "a"), register(c, "b")
    seen: list[str] = []

    def interrupt(f: asyncio.Future[Any]) -> None:
        seen.append("interrupt")
        raise KeyboardInterrupt

    a.add_done_callback(interrupt)
    b.add_done_callback(lambda f: seen.append("b"))
    c.resolve("a", None)
    c.resolve("b", None)
    batch = c._batch
    with pytest.raises(KeyboardInterrupt):
        batch._run()  # what the loop's handle would call
    assert seen == ["interrupt"]
    batch._run()  # the next run serves b (the handle was scheduled again)
    assert seen == ["interrupt", "b"]
    await settle_loop()
    assert seen == ["interrupt", "b"]  # nothing runs twice


async def test_remove_done_callback_counts_and_keeps_the_order() -> None:
    c = Correlator(8)
    fut = register(c, "a")
    seen: list[str] = []

    def make(tag: str) -> Callable[[asyncio.Future[Any]], None]:
        return lambda f: seen.append(tag)

    one, two, three = make("one"), make("two"), make("three")
    for fn in (one, two, one, three):
        fut.add_done_callback(fn)
    assert fut.remove_done_callback(one) == 2
    assert fut.remove_done_callback(one) == 0
    fut.add_done_callback(one)
    c.resolve("a", None)
    await settle_loop()
    assert seen == ["two", "three", "one"]
    assert fut.remove_done_callback(two) == 0  # after it settled: nothing is left


async def test_a_callback_added_after_it_settled_runs_once_from_the_loop() -> None:
    c = Correlator(8)
    fut = register(c, "a")
    c.resolve("a", None)
    seen: list[str] = []
    fut.add_done_callback(lambda f: seen.append(outcome(f)))
    assert seen == []
    await settle_loop()
    assert seen == ["ok:None"]


async def test_tasks_gather_and_wait_for_work_with_it() -> None:
    c = Correlator(8)
    a, b, slow = register(c, "a"), register(c, "b"), register(c, "slow")

    async def waiter(fut: AckFuture) -> object:
        return await fut

    task = asyncio.create_task(waiter(a))
    gathered = asyncio.ensure_future(asyncio.gather(a, b))
    await asyncio.sleep(0)
    c.resolve("a", None)
    c.fail("b", errors.PublishError("refused"))
    assert await task is None
    with pytest.raises(errors.PublishError, match="refused"):
        await gathered
    # A timeout cancels the future: the publish leaves the registry (withdrawn).
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(slow, 0.01)
    assert slow.cancelled()
    assert "slow" not in c
    assert c.held == 0


async def test_a_task_awaiting_it_is_woken_by_an_ack_timeout_and_by_close() -> None:
    c = Correlator(8)
    timed, closed = register(c, "t", timeout=0.01), register(c, "c")
    with pytest.raises(errors.AckTimeoutError):
        await asyncio.wait_for(asyncio.ensure_future(timed), 5)
    task = asyncio.ensure_future(closed)
    await asyncio.sleep(0)
    c.close(errors.ConnectionClosedError("closed"))
    with pytest.raises(errors.ConnectionClosedError):
        await asyncio.wait_for(task, 5)


async def test_made_outside_a_correlator_it_is_a_plain_future() -> None:
    fut: PublishFuture[int] = PublishFuture()
    seen: list[int] = []
    fut.add_done_callback(lambda f: seen.append(f.result()))
    assert fut.remove_done_callback(print) == 0
    fut.set_result(3)
    await settle_loop()
    assert seen == [3]
    other: PublishFuture[int] = PublishFuture()
    other.add_done_callback(lambda f: seen.append(-1))
    assert other.cancel()
    await settle_loop()
    assert seen == [3, -1]


# ---------------------------------------------------------------- differential


_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(0, 3), st.integers(0, 2)),
        st.tuples(st.just("remove"), st.integers(0, 3), st.integers(0, 2)),
        st.tuples(st.just("settle"), st.integers(0, 3), st.sampled_from(["ok", "err", "cancel"])),
        st.tuples(st.just("step"), st.just(0), st.just(0)),
    ),
    max_size=40,
)


async def _play(
    ops: list[tuple[str, int, Any]], futs: list[asyncio.Future[Any]], settle: Any
) -> list[str]:
    seen: list[str] = []
    callbacks = {
        (f, t): (lambda fut, f=f, t=t: seen.append(f"{f}.{t}:{outcome(fut)}"))
        for f in range(len(futs))
        for t in range(3)
    }
    removed: list[int] = []
    for op, index, arg in ops:
        fut = futs[index]
        if op == "add":
            fut.add_done_callback(callbacks[(index, arg)])
        elif op == "remove":
            removed.append(fut.remove_done_callback(callbacks[(index, arg)]))
        elif op == "settle" and not fut.done():
            settle(index, arg)
        elif op == "step":
            await asyncio.sleep(0)
    await settle_loop()
    for fut in futs:
        if fut.done() and not fut.cancelled():
            fut.exception()  # retrieved: no "never retrieved" log at collection
    return [*seen, f"removed:{removed}"]


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=_OPS)
def test_callbacks_behave_as_asyncio_futures(ops: list[tuple[str, int, Any]]) -> None:
    async def plain() -> list[str]:
        loop = asyncio.get_running_loop()
        futs: list[asyncio.Future[Any]] = [loop.create_future() for _ in range(4)]

        def settle(index: int, how: str) -> None:
            if how == "ok":
                futs[index].set_result(index)
            elif how == "err":
                futs[index].set_exception(errors.PublishError(f"e{index}"))
            else:
                futs[index].cancel()

        return await _play(ops, futs, settle)

    async def publish() -> list[str]:
        c = Correlator(8)
        futs: list[asyncio.Future[Any]] = [register(c, str(i)) for i in range(4)]

        def settle(index: int, how: str) -> None:
            if how == "ok":
                c.resolve(str(index), index)  # type: ignore[arg-type]
            elif how == "err":
                c.fail(str(index), errors.PublishError(f"e{index}"))
            else:
                futs[index].cancel()

        return await _play(ops, futs, settle)

    assert asyncio.run(publish()) == asyncio.run(plain())
