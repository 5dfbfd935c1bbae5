"""The correlator: every entry leaves exactly once, the window bounds in-flight work."""

from __future__ import annotations

import asyncio
import gc

import pytest

from liftbridge_client import errors
from liftbridge_client._publish.acks import AckFuture, Correlator
from liftbridge_client.models import Ack, AckPolicy

LONG = 60.0  # an ack wait that never fires during a test


def ack(cid: str, offset: int = 0) -> Ack:
    return Ack(
        stream="s",
        partition_subject="s",
        msg_subject="s",
        offset=offset,
        ack_inbox="_INBOX.x",
        correlation_id=cid,
        ack_policy=AckPolicy.LEADER,
        reception_timestamp_ns=1,
        commit_timestamp_ns=2,
    )


def register(c: Correlator, cid: str, timeout: float = LONG) -> AckFuture:
    c.try_acquire()
    return c.register(cid, timeout)


def assert_empty(c: Correlator) -> None:
    assert len(c) == 0
    assert c.held == 0
    assert not c.pending()


# ---------------------------------------------------------------- each way out, exactly once


async def test_ack_path() -> None:
    c = Correlator(4)
    fut = register(c, "a")
    assert "a" in c
    assert len(c) == 1
    assert c.held == 1
    assert c.resolve("a", ack("a", 7))
    assert_empty(c)
    assert (await fut) == ack("a", 7)
    # A second answer for the same id finds nothing: counted, not applied.
    assert not c.resolve("a", ack("a", 8))
    assert not c.fail("a", errors.PublishError("late"))
    assert c.unknown_acks == 2
    assert (await fut) == ack("a", 7)


async def test_error_answer_path() -> None:
    c = Correlator(4)
    fut = register(c, "a")
    err = errors.IncorrectOffsetError("wrong offset")
    assert c.fail("a", err)
    assert_empty(c)
    with pytest.raises(errors.IncorrectOffsetError) as info:
        await fut
    assert info.value is err


async def test_none_result_path() -> None:
    c = Correlator(4)
    fut = register(c, "a")
    assert c.resolve("a", None)
    assert (await fut) is None
    assert_empty(c)


async def test_timeout_path() -> None:
    c = Correlator(4)
    fut = register(c, "a", timeout=0.02)
    with pytest.raises(errors.AckTimeoutError, match=r"'a' within 0\.02s"):
        await fut
    assert_empty(c)
    assert isinstance(fut.exception(), TimeoutError)  # also the builtin
    # The ack arriving after the timeout is an unknown ack, and changes nothing.
    assert not c.resolve("a", ack("a"))
    assert c.unknown_acks == 1
    assert not c._timers  # the timer of that ack wait is gone with its last entry


async def test_timeouts_expire_in_order_and_only_when_due() -> None:
    c = Correlator(10)
    early = register(c, "early", timeout=0.02)
    late = register(c, "late", timeout=0.3)
    first = register(c, "first", timeout=0.05)
    second = register(c, "second", timeout=0.05)
    c.resolve("first", ack("first"))  # settled before its deadline: skipped by the timer
    await asyncio.sleep(0.1)
    assert isinstance(early.exception(), errors.AckTimeoutError)
    assert isinstance(second.exception(), errors.AckTimeoutError)
    assert (await first) is not None
    assert not late.done()
    assert list(c.pending()) == [late]
    c.resolve("late", None)
    assert_empty(c)


async def test_caller_cancel_path() -> None:
    c = Correlator(4)
    fut = register(c, "a")
    assert fut.cancel()
    assert_empty(c)  # synchronously, inside cancel()
    assert not fut.cancel()  # already cancelled: nothing happens twice
    assert not c.resolve("a", ack("a"))
    assert c.unknown_acks == 1
    assert c.held == 0


async def test_cancelling_the_awaiting_task_releases_the_entry() -> None:
    c = Correlator(4)
    fut = register(c, "a")

    async def wait() -> Ack | None:
        return await fut

    task = asyncio.create_task(wait())
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert fut.cancelled()
    assert_empty(c)


async def test_wait_for_timeout_releases_the_entry() -> None:
    c = Correlator(4)
    fut = register(c, "a")
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(fut, 0.01)
    assert_empty(c)


async def test_close_path() -> None:
    c = Correlator(4)
    futs = [register(c, f"id{i}") for i in range(3)]
    cause = OSError("socket gone")
    exc = errors.ConnectionClosedError("closed")
    exc.__cause__ = cause
    assert c.close(exc) == 3
    assert_empty(c)
    assert c.closed
    for fut in futs:
        with pytest.raises(errors.ConnectionClosedError) as info:
            await fut
        assert info.value.__cause__ is cause
    assert not c.resolve("id0", ack("id0"))
    with pytest.raises(errors.ConnectionClosedError):
        c.try_acquire()
    with pytest.raises(errors.ConnectionClosedError):
        await c.acquire()
    assert c.close(exc) == 0  # idempotent


async def test_close_marks_failures_retrieved(caplog: pytest.LogCaptureFixture) -> None:
    c = Correlator(4)
    register(c, "dropped")  # nobody keeps the future
    c.close(errors.ConnectionClosedError("closed"))
    gc.collect()
    await asyncio.sleep(0)
    assert "never retrieved" not in caplog.text


async def test_fail_all_chains_the_cause() -> None:
    c = Correlator(8)
    futs = [register(c, str(i)) for i in range(5)]
    cause = RuntimeError("connection lost")
    exc = errors.ConnectionClosedError("lost")
    exc.__cause__ = cause
    assert c.fail_all(exc) == 5
    assert_empty(c)
    for fut in futs:
        with pytest.raises(errors.ConnectionClosedError) as info:
            await fut
        assert info.value.__cause__ is cause
    # fail_all does not close: new work is accepted.
    fut = register(c, "new")
    c.resolve("new", None)
    assert (await fut) is None


async def test_fail_owned_fails_only_the_owners_entries() -> None:
    c = Correlator(8)
    mine, other, nobody = object(), object(), None
    a, b, d = register(c, "a"), register(c, "b"), register(c, "d")
    a.owner, b.owner, d.owner = mine, other, nobody
    assert c.fail_owned(mine, errors.ConnectionClosedError("stream broke")) == 1
    assert isinstance(a.exception(), errors.ConnectionClosedError)
    assert not b.done()
    assert not d.done()
    assert len(c) == 2
    assert c.held == 2


async def test_duplicate_pending_id_is_refused() -> None:
    c = Correlator(4)
    register(c, "a")
    c.try_acquire()
    with pytest.raises(errors.InvalidInputError, match="already pending"):
        c.register("a", LONG)
    c.release()
    assert c.held == 1
    # Once "a" has left, the id may be used again, and the old deadline does not touch it.
    c.resolve("a", None)
    fut = register(c, "a", timeout=LONG)
    await asyncio.sleep(0)
    assert not fut.done()


async def test_reused_id_is_not_expired_by_the_old_deadline() -> None:
    c = Correlator(4)
    old = register(c, "a", timeout=0.02)
    c.resolve("a", None)
    new = register(c, "a", timeout=0.02 + 0.2)  # another timer, later
    await old
    await asyncio.sleep(0.05)  # the old deadline has passed
    assert not new.done()
    new.cancel()
    assert_empty(c)


async def test_register_needs_a_slot() -> None:
    c = Correlator(2)
    with pytest.raises(RuntimeError, match="acquire"):
        c.register("a", LONG)
    with pytest.raises(RuntimeError, match="release"):
        c.release()


async def test_capacity_must_be_positive() -> None:
    with pytest.raises(errors.InvalidInputError):
        Correlator(0)


# ---------------------------------------------------------------- the window


async def test_try_acquire_full_window() -> None:
    c = Correlator(2)
    register(c, "a")
    register(c, "b")
    with pytest.raises(errors.InflightLimitError, match=r"limit .* is 2"):
        c.try_acquire()
    assert c.held == 2
    c.resolve("a", None)
    register(c, "c")  # room again
    assert c.held == 2


async def test_acquire_waits_for_room_first_come_first_served() -> None:
    c = Correlator(1)
    register(c, "a")
    order: list[str] = []

    async def take(name: str) -> None:
        await c.acquire()
        order.append(name)
        c.register(name, LONG)

    first = asyncio.create_task(take("first"))
    await asyncio.sleep(0)
    second = asyncio.create_task(take("second"))
    await asyncio.sleep(0)
    assert order == []
    # Someone is waiting: try_acquire must not jump the queue even if a slot frees up.
    with pytest.raises(errors.InflightLimitError):
        c.try_acquire()
    c.resolve("a", None)
    await first
    assert order == ["first"]
    assert not second.done()
    c.resolve("first", None)
    await second
    assert order == ["first", "second"]
    assert c.held == 1


async def test_cancelled_acquire_waiter_gives_nothing_away() -> None:
    c = Correlator(1)
    register(c, "a")
    waiter = asyncio.create_task(c.acquire())
    await asyncio.sleep(0)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert not c._waiters
    c.resolve("a", None)
    assert c.held == 0


async def test_acquire_cancelled_just_after_being_handed_a_slot_returns_it() -> None:
    c = Correlator(1)
    register(c, "a")
    waiter = asyncio.create_task(c.acquire())
    await asyncio.sleep(0)
    c.resolve("a", None)  # the slot passes to the waiter...
    waiter.cancel()  # ...which is cancelled before it runs
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert c.held == 0
    c.try_acquire()


async def test_close_wakes_acquire_waiters() -> None:
    c = Correlator(1)
    register(c, "a")
    waiter = asyncio.create_task(c.acquire())
    await asyncio.sleep(0)
    c.close(errors.ConnectionClosedError("closed"))
    with pytest.raises(errors.ConnectionClosedError):
        await waiter
    assert c.held == 0
    c.release()  # a late release after close is harmless


async def test_close_after_a_slot_was_handed_to_a_waiter() -> None:
    c = Correlator(1)
    register(c, "a")
    waiter = asyncio.create_task(c.acquire())
    await asyncio.sleep(0)
    c.resolve("a", None)  # the slot passes to the waiter, which has not run yet
    c.close(errors.ConnectionClosedError("closed"))
    with pytest.raises(errors.ConnectionClosedError):
        await waiter
    assert c.held == 0


async def test_wait_empty() -> None:
    c = Correlator(4)
    await asyncio.wait_for(c.wait_empty(), 1)  # nothing pending: returns at once
    register(c, "a")
    register(c, "b")
    waiter = asyncio.create_task(c.wait_empty())
    await asyncio.sleep(0)
    c.resolve("a", None)
    await asyncio.sleep(0)
    assert not waiter.done()
    register(c, "b2").cancel()
    await asyncio.sleep(0)
    assert not waiter.done()
    c.fail("b", errors.PublishError("no"))
    await asyncio.wait_for(waiter, 1)
    assert c.held == 0


async def test_wait_empty_cancelled_cleans_up() -> None:
    c = Correlator(4)
    register(c, "a")
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(c.wait_empty(), 0.01)
    assert not c._empty_waiters


async def test_close_releases_wait_empty() -> None:
    c = Correlator(4)
    register(c, "a")
    waiter = asyncio.create_task(c.wait_empty())
    await asyncio.sleep(0)
    c.close(errors.ConnectionClosedError("closed"))
    await asyncio.wait_for(waiter, 1)


async def test_many_entries_settle_and_free_every_slot() -> None:
    c = Correlator(1000)
    futs = [register(c, str(i), timeout=0.05 if i % 3 == 0 else LONG) for i in range(1000)]
    for i in range(1, 1000, 3):
        c.resolve(str(i), ack(str(i), i))
    for i in range(2, 1000, 3):
        futs[i].cancel()
    await asyncio.sleep(0.1)
    assert_empty(c)
    outcomes = {"ack": 0, "timeout": 0, "cancelled": 0}
    for fut in futs:
        if fut.cancelled():
            outcomes["cancelled"] += 1
        elif isinstance(fut.exception(), errors.AckTimeoutError):
            outcomes["timeout"] += 1
        else:
            outcomes["ack"] += 1
    assert outcomes == {"ack": 333, "timeout": 334, "cancelled": 333}
    assert c.unknown_acks == 0
