"""The client's task supervisor: one task's end never takes its siblings with it."""

from __future__ import annotations

import asyncio

import pytest

from liftbridge_client._util.tasks import TaskSupervisor


async def _forever(started: asyncio.Event) -> None:
    started.set()
    await asyncio.Event().wait()


async def _siblings_survive(failing: object) -> None:
    supervisor = TaskSupervisor()
    await supervisor.start()
    started = asyncio.Event()
    sibling = supervisor.spawn(_forever, started, name="sibling")
    await started.wait()
    bad = supervisor.spawn(failing, name="bad")  # type: ignore[arg-type]
    assert await bad.wait(2.0)
    assert not sibling.done  # the group still runs it
    again = supervisor.spawn(_forever, asyncio.Event(), name="again")  # and takes new tasks
    assert await supervisor.aclose(2.0)
    assert sibling.done
    assert again.done


async def test_an_exception_ends_only_its_own_task(caplog: pytest.LogCaptureFixture) -> None:
    async def boom() -> None:
        raise RuntimeError("boom")

    await _siblings_survive(boom)
    assert any("bad failed" in r.getMessage() for r in caplog.records)


async def test_a_stray_cancelled_error_ends_only_its_own_task(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level("DEBUG", logger="liftbridge_client._util.tasks")

    # grpc.aio raises CancelledError from a call cancelled by another task.
    async def stray() -> None:
        await asyncio.sleep(0)
        raise asyncio.CancelledError

    await _siblings_survive(stray)
    assert any("stray CancelledError" in r.getMessage() for r in caplog.records)


async def test_stop_cancels_one_task_and_aclose_the_rest() -> None:
    supervisor = TaskSupervisor()
    await supervisor.start()
    one = supervisor.spawn(_forever, asyncio.Event(), name="one")
    two = supervisor.spawn(_forever, asyncio.Event(), name="two")
    assert await one.stop(2.0)
    assert not two.done
    assert await supervisor.aclose(2.0)
    assert two.done
    assert supervisor.running == 0
    with pytest.raises(RuntimeError, match="not running"):
        supervisor.spawn(_forever, asyncio.Event(), name="late")
