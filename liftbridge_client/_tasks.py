"""The client's background tasks, supervised by one anyio task group.

Every task the client runs on its own (the publisher's sender, the metadata
refresher, each PublishAsync stream's reader and writer) is started here, inside
one task group hosted by a runner task. Closing cancels the group's scope and
waits, with a deadline, for the runner to finish: the group only exits once every
child has.

Why anyio rather than bare ``asyncio.create_task``: its cancel scopes are
level-triggered. asyncio delivers a cancellation once; nats-py 2.16.0 swallows a
CancelledError inside ``publish`` during a forced flush, and a task that swallowed
its only cancellation runs on (and ``close()`` waited for it forever). Inside a
cancelled anyio scope every further ``await`` is cancelled again, so the task
ends at its next suspension point. The client is asyncio-only (grpc.aio and
nats-py need asyncio); anyio runs on its asyncio backend here.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.abc

__all__ = ["TaskHandle", "TaskSupervisor"]

_sniffio: Any  # not a dependency; anyio consults it when some other package installed it
try:
    _sniffio = importlib.import_module("sniffio")
except ImportError:  # pragma: no cover - depends on the environment
    _sniffio = None

log = logging.getLogger(__name__)


class TaskHandle:
    """One supervised task: cancel it on its own, or wait for it to finish."""

    __slots__ = ("_done", "_scope", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        self._scope = anyio.CancelScope()
        self._done = asyncio.Event()

    def __repr__(self) -> str:
        return f"<TaskHandle {self.name} {'done' if self.done else 'running'}>"

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def cancel(self) -> None:
        """Cancel the task (level-triggered: every later await in it is cancelled too)."""
        self._scope.cancel()

    async def wait(self, timeout: float | None = None) -> bool:
        """Wait until the task has finished; False if ``timeout`` passed first."""
        if self._done.is_set():
            return True
        with anyio.move_on_after(timeout):
            await self._done.wait()
        return self._done.is_set()

    async def stop(self, timeout: float | None = None) -> bool:
        """Cancel and wait (bounded). False if the task is still running after ``timeout``."""
        self.cancel()
        return await self.wait(timeout)


class TaskSupervisor:
    """A task group living in its own runner task, for tasks started from sync code."""

    def __init__(self, name: str = "liftbridge-client") -> None:
        self._name = name
        self._group: anyio.abc.TaskGroup | None = None
        self._runner: asyncio.Task[None] | None = None
        self._stopped = asyncio.Event()
        self._handles: set[TaskHandle] = set()
        self._closed = False

    def __repr__(self) -> str:
        return f"<TaskSupervisor {self._name} tasks={len(self._handles)}>"

    @property
    def running(self) -> int:
        """Tasks started and not finished yet."""
        return len(self._handles)

    async def start(self) -> None:
        """Start the runner and wait until its task group accepts tasks."""
        if self._runner is not None:
            return
        ready = asyncio.Event()
        self._runner = asyncio.create_task(self._run(ready), name=f"{self._name}-supervisor")
        await ready.wait()

    async def _run(self, ready: asyncio.Event) -> None:
        try:
            async with anyio.create_task_group() as group:
                self._group = group
                ready.set()
                await self._stopped.wait()
                group.cancel_scope.cancel()
        finally:
            self._group = None

    def spawn(self, fn: Callable[..., Awaitable[Any]], *args: Any, name: str) -> TaskHandle:
        """Start ``fn(*args)`` under supervision. Its exceptions are logged, never spread.

        A task's failure must not cancel its siblings (the group would, on an
        exception): each task settles its own work before it ends, so here the
        error is only logged.
        """
        if _sniffio is not None and asyncio.current_task() is None:
            # Called from an event-loop callback (an ack timer): with sniffio installed,
            # anyio asks it which library runs, and outside a task it cannot tell.
            token = _sniffio.current_async_library_cvar.set("asyncio")
            try:
                return self._spawn(fn, args, name)
            finally:
                _sniffio.current_async_library_cvar.reset(token)
        return self._spawn(fn, args, name)

    def _spawn(
        self, fn: Callable[..., Awaitable[Any]], args: tuple[Any, ...], name: str
    ) -> TaskHandle:
        group = self._group
        if group is None or self._closed:
            raise RuntimeError(f"{self!r} is not running")
        handle = TaskHandle(name)
        self._handles.add(handle)
        group.start_soon(self._guarded, handle, fn, args, name=name)
        return handle

    async def _guarded(
        self, handle: TaskHandle, fn: Callable[..., Awaitable[Any]], args: tuple[Any, ...]
    ) -> None:
        try:
            with handle._scope:
                await fn(*args)
        except Exception:
            log.exception("background task %s failed", handle.name)
        except asyncio.CancelledError:
            # grpc.aio raises CancelledError out of a call cancelled from elsewhere (the
            # client closing a stream does that). Nobody cancelled this task then; spreading
            # it would end the whole group (every sibling), so only this task ends. A real
            # cancellation (the group closing) has task.cancelling() set and goes on.
            task = asyncio.current_task()
            if task is None or task.cancelling():
                raise
            log.debug("background task %s ended by a stray CancelledError", handle.name)
        finally:
            handle._done.set()
            self._handles.discard(handle)

    async def aclose(self, timeout: float) -> bool:
        """Cancel every task and wait for all of them, at most ``timeout`` seconds.

        True when everything finished in time. Idempotent.
        """
        self._closed = True
        runner = self._runner
        if runner is None:
            return True
        self._stopped.set()
        if runner.done():
            return True
        done, _ = await asyncio.wait({runner}, timeout=timeout)
        if not done:
            log.error(
                "%d background tasks did not stop within %.1fs: %s",
                len(self._handles),
                timeout,
                sorted(h.name for h in self._handles),
            )
            return False
        return True
