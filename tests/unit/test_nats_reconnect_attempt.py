"""A reconnect attempt that fails after CONNECT leaves nothing of its own behind.

nats-py starts its read, ping and flush tasks on a new socket as soon as the server
accepted CONNECT, then flushes. When that flush times out it tries the next server and,
on its own, leaves the attempt's tasks running and its socket open: the stale read task
then reads the next connection's socket beside that connection's own read task.
`end_failed_attempt` (run first in the error callback `connect_nats` gives nats-py) ends
them. A scripted NATS server here: its first connection serves, the second accepts
CONNECT and never answers the flush after it, the third serves again.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import nats.aio.client
import pytest

from liftbridge_client._transport.nats import connect_nats, end_failed_attempt

INFO = b'INFO {"server_id":"scripted","version":"2.10.0","max_payload":1048576}\r\n'


@dataclass
class Scripted:
    """Connection 1 mute after CONNECT's PONG (then ``tail``, the start of a message that
    never ends, when given); the others answer every PING."""

    address: str = ""
    writers: list[asyncio.StreamWriter] = field(default_factory=list)
    subscribed: list[asyncio.Event] = field(default_factory=list)
    closed_by_client: list[asyncio.Event] = field(default_factory=list)
    third: asyncio.Event = field(default_factory=asyncio.Event)  # connection 2 opened
    tail: bytes = b""

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(INFO)
        first = b""
        with contextlib.suppress(ConnectionError):
            first = await reader.readline()
        if not first.startswith(b"CONNECT"):  # connect_nats's probe: not a connection
            writer.close()
            return
        index = len(self.writers)
        self.writers.append(writer)
        self.subscribed.append(asyncio.Event())
        self.closed_by_client.append(asyncio.Event())
        if index == 2:
            self.third.set()
        pings = 0
        with contextlib.suppress(ConnectionError):
            while line := await reader.readline():
                if line.startswith(b"PING"):
                    pings += 1
                    if index != 1 or pings == 1:  # connection 1: only CONNECT's PING
                        writer.write(b"PONG\r\n" + (self.tail if index == 1 else b""))
                elif line.startswith(b"SUB "):
                    self.subscribed[index].set()
            self.closed_by_client[index].set()
        writer.close()


@pytest.fixture
async def scripted() -> AsyncIterator[Scripted]:
    script = Scripted()
    server = await asyncio.start_server(script.handle, "127.0.0.1", 0)
    script.address = f"nats://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    async with server:
        yield script
        for writer in script.writers:
            writer.close()


def _read_loops() -> list[asyncio.Task[object]]:
    return [
        t
        for t in asyncio.all_tasks()
        if not t.done() and getattr(t.get_coro(), "__qualname__", "").endswith("_read_loop")
    ]


async def _connect(
    scripted: Scripted, cleanup: bool
) -> tuple[nats.aio.client.Client, asyncio.Event, list[Exception]]:
    reconnected = asyncio.Event()
    reported: list[Exception] = []

    async def on_error(exc: Exception) -> None:
        reported.append(exc)

    async def on_reconnected() -> None:
        reconnected.set()

    args: dict[str, Any] = {
        "servers": [scripted.address],
        "allow_reconnect": True,
        "max_reconnect_attempts": -1,
        "reconnect_time_wait": 0.05,
        "error_cb": on_error,
        "reconnected_cb": on_reconnected,
    }
    if cleanup:
        nc = await connect_nats(args, 5.0)
    else:  # nats-py as it is, for the test that shows what the cleanup is for
        nc = await nats.connect(**args)
    # nats-py's flush after a reconnect waits 10 s by default: 0.3 s here.
    nc.flush = functools.partial(nc.flush, timeout=0.3)  # type: ignore[method-assign,arg-type]
    return nc, reconnected, reported


_MESSAGES = 60


async def _reconnect_through_the_mute_one(
    scripted: Scripted, all_in: asyncio.Event
) -> tuple[nats.aio.client.Client, list[bytes], list[Exception]]:
    nc, reconnected, reported = await _connect(scripted, cleanup=True)
    got: list[bytes] = []

    async def on_msg(msg: nats.aio.msg.Msg) -> None:
        got.append(msg.data)
        if len(got) == _MESSAGES:
            all_in.set()

    await nc.subscribe("topic", cb=on_msg)
    async with asyncio.timeout(5):
        await scripted.subscribed[0].wait()
        scripted.writers[0].transport.abort()  # connection 1 of the script comes next
        await reconnected.wait()  # on connection 2, after connection 1's flush timed out
        await scripted.subscribed[2].wait()
    return nc, got, reported


@pytest.mark.parametrize(
    "tail",
    [b"", b"MSG topic 1 40\r\nhalf-", b"MSG topic 1 4", b"-ERR \r\n"],
    ids=[
        "silent",
        "a message cut in its payload",
        "a message cut in its line",
        "a line nats-py's reader dies of",  # its parser raises on it, and keeps it
    ],
)
async def test_a_failed_attempt_leaves_no_reader_and_no_socket(
    scripted: Scripted, tail: bytes
) -> None:
    # With a cut message the attempt's parser stops inside it: the next connection's
    # bytes must not be read as its rest (nor its PONGs swallowed).
    scripted.tail = tail
    all_in = asyncio.Event()
    nc, got, reported = await _reconnect_through_the_mute_one(scripted, all_in)
    try:
        assert any(isinstance(e, nats.errors.FlushTimeoutError) for e in reported), reported
        assert len(scripted.writers) == 3
        assert sum(isinstance(e, nats.errors.FlushTimeoutError) for e in reported) == 1
        async with asyncio.timeout(2):
            await scripted.closed_by_client[1].wait()  # the attempt's socket was closed
        assert _read_loops() == [nc._reading_task]
        # Connection 2's bytes reach the one reader, whole and in order.
        payloads = [b"m%03d-" % i + b"x" * i for i in range(_MESSAGES)]
        scripted.writers[2].write(
            b"".join(b"MSG topic 1 %d\r\n%s\r\n" % (len(p), p) for p in payloads)
        )
        async with asyncio.timeout(5):
            await all_in.wait()
        assert got == payloads
        assert nc.is_connected
    finally:
        await nc.close()


# The attempt's socket is left open and dropped unclosed: part of what this test pins.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
async def test_without_the_cleanup_nats_py_never_reconnects(scripted: Scripted) -> None:
    # What nats-py alone does (2.10 to 2.16): the attempt's read task, left running, reads
    # the next socket while the reconnect task waits there for INFO, and the reconnect
    # task dies of asyncio's "already waiting" error: the client stays RECONNECTING for
    # good. If a nats-py release fixes this, this test fails and the cleanup can go.
    nc, reconnected, _ = await _connect(scripted, cleanup=False)
    try:
        await nc.subscribe("topic")
        async with asyncio.timeout(5):
            await scripted.subscribed[0].wait()
            scripted.writers[0].transport.abort()
            await scripted.third.wait()
        attempts = nc._reconnection_task
        assert attempts is not None
        async with asyncio.timeout(5):
            await asyncio.wait({attempts})
        error = attempts.exception()
        assert isinstance(error, RuntimeError)
        assert "another coroutine is already waiting" in str(error)
        await asyncio.sleep(0.3)
        assert not reconnected.is_set()
        assert not nc.is_connected
    finally:
        await nc.close()


async def test_outside_the_reconnect_task_nothing_is_stopped(scripted: Scripted) -> None:
    nc, _, _ = await _connect(scripted, cleanup=True)
    try:
        reading = nc._reading_task
        end_failed_attempt(nc)  # the error callback called from elsewhere (a read error)
        await asyncio.sleep(0)
        assert reading is not None
        assert not reading.done()
        assert nc.is_connected
        await nc.flush()
    finally:
        await nc.close()
