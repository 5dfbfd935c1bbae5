"""An event loop and a connected client, for one Spark task or driver-side reader.

Spark runs the data source's methods in plain Python worker processes with no running
event loop. Each task (and the driver-side stream reader, for the query's life) gets its
own `Client`, created on first use - never in ``__init__``, which Spark runs in
short-lived processes and pickles - and closed in `close()`.

The event loop is one per process, made on first use and never closed: Spark runs the
tasks of a worker process one after another in the same process, and grpc.aio binds its
completion-queue poller to the first loop it met, so a process that closed a loop and
opened another gets "Event loop is closed" errors from gRPC's poller thread.

Read tasks share their client too (`borrow` / `give_back`): the next read task of the same
worker process (the next partition, the next micro-batch) reuses the connection instead of
connecting again. A client is reused only after a task that ended cleanly and within
`REUSE_IDLE` seconds (the loop does not run between tasks, so nothing answers the server's
keepalives meanwhile); otherwise it is closed and the next task connects anew.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import time
from collections.abc import Coroutine, Iterator, Sequence
from typing import Any, TypeVar

from liftbridge_client import errors
from liftbridge_client.client import Client
from liftbridge_client.options import ClientOptions

__all__ = ["REUSE_IDLE", "TaskRuntime", "borrow", "frozen_heap", "give_back", "run"]

log = logging.getLogger(__name__)

T = TypeVar("T")

_runner: asyncio.Runner | None = None


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion on this process's loop."""
    global _runner  # noqa: PLW0603 - one loop per process, see the module docstring
    if _runner is None:
        _runner = asyncio.Runner()
    return _runner.run(coro)


@contextlib.contextmanager
def frozen_heap() -> Iterator[None]:
    """A task's CPU spent on CPython's cyclic GC, cut by a third or more for a write.

    A write task keeps thousands of publishes in flight, and a read makes objects for
    every message, so collections keep coming, and each full one walked the whole heap
    the worker had before the task (pyspark, pyarrow, protobuf, this package: tens of
    thousands of objects that live as long as the process). ``gc.freeze`` leaves those
    out of collections while the task runs; they go back when it ends. Nothing is done
    when something else froze the heap already (a forking server does, to keep pages
    shared): its freeze is not ours to undo.
    """
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


class TaskRuntime:
    """`run` coroutines on the process's loop with a lazily connected `client`."""

    def __init__(
        self,
        brokers: Sequence[str],
        nats_servers: Sequence[str] = (),
        options: ClientOptions | None = None,
        *,
        connect_note: str = "",
    ) -> None:
        """``connect_note``: said after a failed connect's message (which option bounds it)."""
        self._brokers = list(brokers)
        self._connect_note = connect_note
        self._nats = list(nats_servers)
        self._options = options or ClientOptions()
        self._client: Client | None = None

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return run(coro)

    @property
    def client(self) -> Client:
        """The connected client (connects on first use)."""
        if self._client is None:
            client = Client(self._brokers, nats_servers=self._nats or None, options=self._options)
            try:
                run(client.connect())  # a failed connect has closed what it opened
            except (errors.NoBrokerAvailableError, errors.LiftbridgeTimeoutError) as exc:
                if not self._connect_note:
                    raise
                raise type(exc)(f"{exc} ({self._connect_note})") from exc
            self._client = client
        return self._client

    def close(self, *, drain: bool = True) -> None:
        """Close the client; idempotent, and never raises (logs instead)."""
        client, self._client = self._client, None
        if client is None:
            return
        try:
            run(client.close(drain=drain))
        except Exception:
            log.warning("closing the Liftbridge client failed", exc_info=True)


REUSE_IDLE = 20.0

# One idle runtime per connection settings: a worker process runs one task at a time.
_idle: dict[tuple[object, ...], tuple[TaskRuntime, float]] = {}


def borrow(
    key: tuple[object, ...],
    brokers: Sequence[str],
    nats_servers: Sequence[str],
    options: ClientOptions,
) -> TaskRuntime:
    """A runtime for ``key``: the one a task of this process gave back, or a new one."""
    entry = _idle.pop(key, None)
    if entry is not None:
        runtime, since = entry
        if time.monotonic() - since <= REUSE_IDLE:
            return runtime
        runtime.close(drain=False)
    return TaskRuntime(brokers, nats_servers, options)


def give_back(key: tuple[object, ...], runtime: TaskRuntime, *, ok: bool) -> None:
    """Keep ``runtime`` for the next task if its task ended cleanly, else close it."""
    if not ok:
        runtime.close(drain=False)
        return
    previous = _idle.pop(key, None)
    if previous is not None and previous[0] is not runtime:
        previous[0].close(drain=False)
    _idle[key] = (runtime, time.monotonic())
