"""The client's task supervisor: one task's end never takes its siblings with it."""

from __future__ import annotations

import asyncio

import pytest

from liftbridge_client._tasks import TaskSupervisor


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
    caplog.set_level("DEBUG", logger="liftbridge_client._tasks")

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


class _Sniffio:
    """What anyio asks of sniffio (installed by other packages, not by us): the library
    set in a context variable, else the one running the current task, else an error."""

    class AsyncLibraryNotFoundError(RuntimeError):
        pass

    def __init__(self) -> None:
        import contextvars

        self.current_async_library_cvar: contextvars.ContextVar[str | None] = (
            contextvars.ContextVar("current_async_library_cvar", default=None)
        )

    def current_async_library(self) -> str:
        name = self.current_async_library_cvar.get()
        if name is not None:
            return name
        if asyncio.current_task() is not None:
            return "asyncio"
        raise self.AsyncLibraryNotFoundError("unknown async library, or not in async context")


async def test_spawn_from_an_event_loop_callback_with_sniffio_installed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An ack timer spawns the timeout check from a loop callback, outside any task: with
    sniffio installed anyio could not tell the library there (NoEventLoopError), and NATS
    ack timeouts lost their typed reason."""
    import anyio._core._eventloop as anyio_eventloop

    from liftbridge_client import _tasks as tasks

    fake = _Sniffio()
    monkeypatch.setattr(anyio_eventloop, "sniffio", fake)
    monkeypatch.setattr(tasks, "_sniffio", fake)
    supervisor = TaskSupervisor()
    await supervisor.start()
    ran = asyncio.Event()

    async def work() -> None:
        ran.set()

    outcome: list[object] = []

    def callback() -> None:
        try:
            outcome.append(supervisor.spawn(work, name="from-a-callback"))
        except BaseException as exc:
            outcome.append(exc)

    asyncio.get_running_loop().call_soon(callback)
    async with asyncio.timeout(5):
        await ran.wait()
    assert not isinstance(outcome[0], BaseException), outcome
    assert fake.current_async_library_cvar.get() is None  # reset after the spawn
    assert await supervisor.aclose(1.0)
