"""close(), drain and connection loss against real servers: bounded, nothing left behind.

The policy these tests pin (docs/concepts.md, "Closing and connection loss"):

- ``close()`` / a normal ``async with`` exit drains: pending publishes get up to
  ``drain_timeout`` to be acked; the rest fail with ConnectionClosedError chained to a
  LiftbridgeTimeoutError.
- ``close(drain=False)`` / an exception exit fails pending publishes at once, chained to
  the cause.
- Stopping connections and tasks takes at most ``close_timeout`` whatever the servers do
  (a frozen server included), and no task of the client's or of nats-py's survives.
- nats-py closing the connection for good fails NATS publishes at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from liftbridge_client import Ack, Client, ClientOptions, PublishFuture, errors
from liftbridge_client.options import Transport
from liftbridge_client.testing import (
    Deployment,
    SingleNode,
    StreamName,
    StreamNames,
    tasks_left,
    wait_until,
)


async def _freeze(pid: int) -> None:
    """SIGSTOP ``pid`` and wait until every thread of it has stopped. The signal reaches a
    thread running on the other core a moment later: a publish written before then can
    still be stored and acked (it happened to the first publish after the kill)."""
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + 5.0
    while not _all_threads_stopped(pid):
        assert time.monotonic() < deadline, f"process {pid} did not stop within 5 s"
        await asyncio.sleep(0.001)


def _all_threads_stopped(pid: int) -> bool:
    # /proc/<pid>/task/<tid>/stat: "tid (comm) state ...", comm may hold spaces or ")".
    return all(
        stat.read_text().rsplit(")", 1)[1].split()[0] in ("T", "t")
        for stat in Path(f"/proc/{pid}/task").glob("*/stat")
    )


async def new_stream(client: Client, names: StreamNames) -> StreamName:
    stream = names()
    await client.create_stream(stream.subject, stream.name)
    return stream


async def _no_task_left(before: set[asyncio.Task[object]]) -> None:
    assert await tasks_left(before) == set()


@pytest.fixture
async def nats_client(liftbridge_server: Deployment) -> AsyncIterator[Client]:
    client = Client(liftbridge_server.addresses, nats_servers=[liftbridge_server.nats_url])
    await client.connect()
    yield client
    await client.close(drain=False)


async def test_close_drains_pending_publishes_by_default(
    liftbridge_server: Deployment, stream_names: StreamNames
) -> None:
    before = asyncio.all_tasks()
    client = Client(liftbridge_server.addresses, nats_servers=[liftbridge_server.nats_url])
    await client.connect()
    stream = await new_stream(client, stream_names)
    futs = [
        client.publish_nowait(stream.name, b"%d" % i, transport=t)
        for i in range(400)
        for t in (Transport.NATS, Transport.GRPC)
    ]
    await client.close()
    assert all(f.done() and f.exception() is None for f in futs)
    offsets = sorted(f.result().offset for f in futs)
    assert offsets == list(range(800))
    await _no_task_left(before)


async def test_async_with_normal_exit_drains(
    liftbridge_server: Deployment, stream_names: StreamNames
) -> None:
    async with Client(
        liftbridge_server.addresses, nats_servers=[liftbridge_server.nats_url]
    ) as client:
        stream = await new_stream(client, stream_names)
        futs = [client.publish_nowait(stream.name, b"x") for _ in range(300)]
    assert all(f.done() and f.exception() is None for f in futs)


async def test_drain_is_bounded_by_drain_timeout(
    liftbridge_server: Deployment, stream_names: StreamNames
) -> None:
    before = asyncio.all_tasks()
    options = ClientOptions(ack_wait=60, drain_timeout=0.5)
    client = Client(
        liftbridge_server.addresses, nats_servers=[liftbridge_server.nats_url], options=options
    )
    await client.connect()
    stream = await new_stream(client, stream_names)
    await client.pause_stream(stream.name)  # over NATS a paused partition never acks
    futs = [client.publish_nowait(stream.name, b"%d" % i) for i in range(100)]
    started = time.monotonic()
    await client.close()
    elapsed = time.monotonic() - started
    assert 0.45 <= elapsed < 0.5 + options.close_timeout + 0.5, elapsed
    for fut in futs:
        exc = fut.exception()
        assert isinstance(exc, errors.ConnectionClosedError)
        assert isinstance(exc.__cause__, errors.LiftbridgeTimeoutError)
        assert "drain timeout" in str(exc.__cause__)
    await _no_task_left(before)


async def test_publishes_during_a_drain_are_refused(
    liftbridge_server: Deployment, stream_names: StreamNames
) -> None:
    options = ClientOptions(ack_wait=60, drain_timeout=1.0)
    client = Client(
        liftbridge_server.addresses, nats_servers=[liftbridge_server.nats_url], options=options
    )
    await client.connect()
    stream = await new_stream(client, stream_names)
    await client.pause_stream(stream.name)
    client.publish_nowait(stream.name, b"pending").add_done_callback(lambda f: f.exception())
    closing = asyncio.create_task(client.close())
    await asyncio.sleep(0.05)
    assert not closing.done()
    with pytest.raises(errors.ConnectionClosedError, match="closing"):
        client.publish_nowait(stream.name, b"late")
    with pytest.raises(errors.ConnectionClosedError, match="closing"):
        await client.publish(stream.name, b"late", transport=Transport.GRPC)
    await closing


async def test_exception_exit_fails_pending_at_once_chained_to_the_cause(
    liftbridge_server: Deployment, stream_names: StreamNames
) -> None:
    options = ClientOptions(ack_wait=60, drain_timeout=30)
    futs: list[PublishFuture[Ack]] = []
    started = 0.0

    async def fail_with_pending() -> None:
        nonlocal started
        async with Client(
            liftbridge_server.addresses, nats_servers=[liftbridge_server.nats_url], options=options
        ) as client:
            stream = await new_stream(client, stream_names)
            await client.pause_stream(stream.name)
            futs.extend(client.publish_nowait(stream.name, b"x") for _ in range(50))
            started = time.monotonic()
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        await fail_with_pending()
    assert time.monotonic() - started < 1.5  # no drain
    for fut in futs:
        exc = fut.exception()
        assert isinstance(exc, errors.ConnectionClosedError)
        assert isinstance(exc.__cause__, RuntimeError)


async def test_close_without_drain_with_10k_pending(
    liftbridge_server: Deployment, stream_names: StreamNames
) -> None:
    before = asyncio.all_tasks()
    options = ClientOptions(ack_wait=60, max_inflight=10_000)
    client = Client(
        liftbridge_server.addresses, nats_servers=[liftbridge_server.nats_url], options=options
    )
    await client.connect()
    stream = await new_stream(client, stream_names)
    await client.pause_stream(stream.name)
    futs = [client.publish_nowait(stream.name, b"%d" % i) for i in range(10_000)]
    started = time.monotonic()
    await client.close(drain=False)
    assert time.monotonic() - started < 1.5
    assert all(isinstance(f.exception(), errors.ConnectionClosedError) for f in futs)
    await _no_task_left(before)


async def _publish_big_then_close(client: Client, stream: str) -> float:
    # 3000 x 16 KB without waiting: over nats-py's 2 MB pending limit, so its publish
    # forces a flush (and swallows the CancelledError of a close landing meanwhile).
    futs = [client.publish_nowait(stream, os.urandom(16 * 1024)) for _ in range(3000)]
    await asyncio.sleep(0.02)
    started = time.monotonic()
    await client.close(drain=False)
    elapsed = time.monotonic() - started
    assert all(f.done() for f in futs)
    return elapsed


async def test_close_during_a_forced_nats_flush_returns(
    liftbridge_server: Deployment, stream_names: StreamNames
) -> None:
    before = asyncio.all_tasks()
    options = ClientOptions(max_inflight=5000)
    client = Client(
        liftbridge_server.addresses, nats_servers=[liftbridge_server.nats_url], options=options
    )
    await client.connect()
    stream = await new_stream(client, stream_names)
    elapsed = await _publish_big_then_close(client, stream.name)
    assert elapsed < options.close_timeout + 0.5, elapsed
    await _no_task_left(before)


async def test_close_with_a_frozen_server_returns(
    own_node: SingleNode, stream_names: StreamNames
) -> None:
    before = asyncio.all_tasks()
    options = ClientOptions(max_inflight=5000, connect_timeout=10)
    client = Client(own_node.addresses, nats_servers=[own_node.nats_url], options=options)
    await client.connect()
    stream = await new_stream(client, stream_names)
    pid = own_node.node.process.pid
    assert pid is not None
    await _freeze(pid)  # NATS is embedded: it freezes too
    try:
        elapsed = await _publish_big_then_close(client, stream.name)
        assert elapsed < options.close_timeout + 0.5, elapsed
        await _no_task_left(before)
    finally:
        os.kill(pid, signal.SIGCONT)


async def test_the_steps_close_timeout_cuts_are_one_warning(
    liftbridge_server: Deployment, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.WARNING, logger="liftbridge_client.client")
    options = ClientOptions(close_timeout=0.3)
    client = Client(liftbridge_server.addresses, options=options)
    await client.connect()

    async def hangs(*_args: object, **_kwargs: object) -> None:
        await asyncio.sleep(30)

    # Two steps that never end by themselves (a server that stopped answering).
    monkeypatch.setattr(client._metadata, "stop", hangs)
    monkeypatch.setattr(client._pool, "close", hangs)
    started = time.monotonic()
    await client.close()
    assert time.monotonic() - started < options.close_timeout + 0.5
    warned = [r.getMessage() for r in caplog.records if r.name == "liftbridge_client.client"]
    assert warned == [
        "close: close_timeout (0.3 s) ran out; cut short: stopping the metadata refresher, "
        "closing the gRPC channels, stopping background tasks"  # the last had no time left
    ]


async def test_clean_close_logs_no_warning(
    liftbridge_server: Deployment, stream_names: StreamNames, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="liftbridge_client")
    async with Client(
        liftbridge_server.addresses, nats_servers=[liftbridge_server.nats_url]
    ) as client:
        stream = await new_stream(client, stream_names)
        await client.publish(stream.name, b"x")
        await client.publish(stream.name, b"y", transport=Transport.GRPC)
    noisy = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert not noisy, [r.getMessage() for r in noisy]


async def test_nats_closing_for_good_fails_nats_publishes_at_once(
    liftbridge_server: Deployment, stream_names: StreamNames
) -> None:
    options = ClientOptions(ack_wait=60)
    async with Client(
        liftbridge_server.addresses, nats_servers=[liftbridge_server.nats_url], options=options
    ) as client:
        stream = await new_stream(client, stream_names)
        await client.pause_stream(stream.name)  # no acks: they stay pending
        futs = [client.publish_nowait(stream.name, b"x") for _ in range(20)]
        publisher = client._require_open()
        await wait_until(lambda: not publisher._queue, what="every publish written")
        assert client._nats is not None
        await client._nats.close()  # what nats-py does when it gives up reconnecting
        results = await asyncio.wait_for(asyncio.gather(*futs, return_exceptions=True), 2)
        assert all(isinstance(r, errors.ConnectionClosedError) for r in results), results
        with pytest.raises(errors.ConnectionClosedError, match="NATS connection is closed"):
            client.publish_nowait(stream.name, b"after")
        # gRPC publishing is unaffected (the paused partition resumes on a gRPC publish).
        ack = await client.publish(stream.name, b"grpc", transport=Transport.GRPC)
        assert ack is not None


async def test_a_failing_teardown_step_does_not_skip_the_others(
    liftbridge_server: Deployment, stream_names: StreamNames, caplog: pytest.LogCaptureFixture
) -> None:
    before = asyncio.all_tasks()
    client = Client(liftbridge_server.addresses, nats_servers=[liftbridge_server.nats_url])
    await client.connect()
    stream = await new_stream(client, stream_names)
    await client.pause_stream(stream.name)
    futs = [client.publish_nowait(stream.name, b"x") for _ in range(10)]

    async def broken_stop(timeout: float = 1.0) -> None:
        raise RuntimeError("refresher exploded")

    client._metadata.stop = broken_stop  # type: ignore[method-assign]
    await client.close(drain=False)  # does not raise: closing goes on past the failure
    assert all(isinstance(f.exception(), errors.ConnectionClosedError) for f in futs)
    assert client._nats is not None
    assert client._nats.is_closed
    assert client._pool._closed
    assert any("refresher exploded" in r.getMessage() for r in caplog.records)
    # The refresher itself is stopped with the task group.
    await _no_task_left(before)


# ---- close() and connect() racing each other, or themselves ---------------------------


async def _pending_nats_publishes(client: Client, names: StreamNames) -> list[PublishFuture[Ack]]:
    stream = await new_stream(client, names)
    await client.pause_stream(stream.name)  # no acks: they stay pending (NATS publishes)
    return [client.publish_nowait(stream.name, b"x") for _ in range(20)]


def _all_closed(futs: list[PublishFuture[Ack]]) -> bool:
    return all(f.done() and isinstance(f.exception(), errors.ConnectionClosedError) for f in futs)


async def test_close_cancelled_mid_drain_still_tears_down(
    liftbridge_server: Deployment, stream_names: StreamNames
) -> None:
    before = asyncio.all_tasks()
    options = ClientOptions(drain_timeout=30)
    client = Client(
        liftbridge_server.addresses, nats_servers=[liftbridge_server.nats_url], options=options
    )
    await client.connect()
    futs = await _pending_nats_publishes(client, stream_names)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(client.close(), 0.3)  # cancelled while it drains
    assert _all_closed(futs)
    await client.close()  # a later close() finds the client closed
    with pytest.raises(errors.ConnectionClosedError):
        client.publish_nowait("any", b"x")
    await _no_task_left(before)


async def test_async_with_cancelled_in_its_drain_still_tears_down(
    liftbridge_server: Deployment, stream_names: StreamNames
) -> None:
    before = asyncio.all_tasks()
    options = ClientOptions(drain_timeout=30)
    futs: list[PublishFuture[Ack]] = []

    async def app() -> None:
        async with Client(
            liftbridge_server.addresses, nats_servers=[liftbridge_server.nats_url], options=options
        ) as client:
            futs.extend(await _pending_nats_publishes(client, stream_names))

    task = asyncio.create_task(app())
    await wait_until(lambda: len(futs) > 0, what="publishes pending")
    await asyncio.sleep(0.2)  # in __aexit__'s drain
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert _all_closed(futs)
    await _no_task_left(before)


async def test_every_close_returns_once_the_client_is_closed(
    liftbridge_server: Deployment, stream_names: StreamNames
) -> None:
    options = ClientOptions(drain_timeout=0.5)
    client = Client(
        liftbridge_server.addresses, nats_servers=[liftbridge_server.nats_url], options=options
    )
    await client.connect()
    futs = await _pending_nats_publishes(client, stream_names)
    first = asyncio.create_task(client.close())
    await asyncio.sleep(0.1)
    await client.close()  # the second waits for the first's drain and teardown
    assert _all_closed(futs)
    assert client._nats is not None
    assert client._nats.is_closed
    assert client._pool._closed
    await first


@pytest.mark.parametrize("delay", [0.0, 0.005, 0.02, 0.05])
async def test_close_during_connect_stops_it(liftbridge_server: Deployment, delay: float) -> None:
    before = asyncio.all_tasks()
    client = Client(liftbridge_server.addresses, nats_servers=[liftbridge_server.nats_url])
    connecting = asyncio.create_task(client.connect())
    await asyncio.sleep(delay)
    await client.close()
    with contextlib.suppress(errors.ConnectionClosedError):
        await connecting  # it may have finished first; it never raises anything else
    with pytest.raises(errors.ConnectionClosedError):
        await client.connect()
    await _no_task_left(before)  # no NATS connection (its reader) or supervisor left


async def test_concurrent_connects_share_one_attempt(
    liftbridge_server: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    from liftbridge_client._transport import nats as nats_transport

    real = nats_transport.connect_nats
    calls: list[object] = []

    async def counted(args: dict[str, object], timeout: float) -> object:
        calls.append(args)
        return await real(args, timeout)

    monkeypatch.setattr(nats_transport, "connect_nats", counted)
    before = asyncio.all_tasks()
    client = Client(liftbridge_server.addresses, nats_servers=[liftbridge_server.nats_url])
    await asyncio.gather(client.connect(), client.connect(), client.connect())
    assert len(calls) == 1
    await client.close()
    await _no_task_left(before)


async def test_flush_ends_when_the_client_closes(
    own_node: SingleNode, stream_names: StreamNames
) -> None:
    options = ClientOptions(ack_wait=60, connect_timeout=10)
    client = Client(own_node.addresses, nats_servers=[own_node.nats_url], options=options)
    await client.connect()
    stream = await new_stream(client, stream_names)
    await client.publish(stream.name, b"warm")
    pid = own_node.node.process.pid
    assert pid is not None
    await _freeze(pid)  # NATS is embedded: the flush's round trip gets no answer
    try:
        futs = [client.publish_nowait(stream.name, b"x") for _ in range(20)]
        flushing = asyncio.create_task(client.flush())
        await asyncio.sleep(0.3)
        await client.close(drain=False)
        with pytest.raises(errors.ConnectionClosedError):
            await asyncio.wait_for(flushing, 1.0)
        assert _all_closed(futs)
    finally:
        os.kill(pid, signal.SIGCONT)


async def test_close_cancelled_mid_drain_over_grpc_still_tears_down(
    own_node: SingleNode, stream_names: StreamNames
) -> None:
    before = asyncio.all_tasks()
    options = ClientOptions(transport=Transport.GRPC, drain_timeout=30, connect_timeout=10)
    client = Client(own_node.addresses, options=options)
    await client.connect()
    stream = await new_stream(client, stream_names)
    await client.publish(stream.name, b"warm")
    pid = own_node.node.process.pid
    assert pid is not None
    await _freeze(pid)
    try:
        futs = [client.publish_nowait(stream.name, b"x") for _ in range(20)]
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(client.close(), 0.3)
        assert _all_closed(futs)
        await client.close()
        await _no_task_left(before)
    finally:
        os.kill(pid, signal.SIGCONT)
