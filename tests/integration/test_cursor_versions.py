"""A rewound cursor once the server has forgotten it: what each version answers.

A server answers FetchCursor from an in-memory cache (512 cursors, LRU) filled by
SetCursor. On a miss (after a restart, after the cursors partition changed leader, or once
512 other cursors pushed it out) it reads the ``__cursors`` partition. v1.9.0 (and v1.7.1)
keep the highest offset found there for the key; master keeps the newest record. So a
cursor set to 10 and then rewound to 5 (or cleared with -1) reads 10 on v1.9.0 after a
miss, and 5 (or -1) on master. And after a graceful restart a v1.9.0 node reports the
``__cursors`` high watermark as -1 until the next record arrives: every FetchCursor then
answers -1, and the server caches that. The client's ``fetch_cursor`` answers what was set
last on both (``_cluster.cursor_log``): it restores a hidden watermark before asking, and
on a server that does not read backwards itself (v1.9.0) it checks a non-negative answer
against the newest record in the log.

Each test starts its own single node (it restarts it or fills its cache), of each version;
v1.7.1 answers as v1.9.0.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import grpc
import grpc.aio
import pytest
from faults.restart_scenarios import checkpoint_path

from liftbridge_client import Client, ClientOptions, RetryPolicy
from liftbridge_client._proto import api_pb2, api_pb2_grpc
from liftbridge_client.testing import SingleNode

pytestmark = pytest.mark.integration

OPTIONS = ClientOptions(
    rpc_timeout=5.0, retry=RetryPolicy(attempts=8, initial_backoff=0.1, max_backoff=1.0)
)
CACHE_SIZE = 512  # the server's cursor cache (server/cursors.go, v1.9.0 and master)

VERSIONS = [
    pytest.param("v1.7.1", id="v1.7.1", marks=pytest.mark.liftbridge_version("v1.7.1")),
    pytest.param("v1.9.0", id="v1.9.0", marks=pytest.mark.liftbridge_version("v1.9.0")),
    pytest.param("master", id="master", marks=pytest.mark.liftbridge_version("master")),
]


@pytest.fixture(params=VERSIONS)
def node(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SingleNode]:
    with SingleNode(base_dir=tmp_path, version=request.param) as deployment:
        yield deployment


async def server_answer(address: str, cursor_id: str, stream: str) -> int:
    """FetchCursor straight to the node (no client logic), retried while it settles."""
    req = api_pb2.FetchCursorRequest(stream=stream, partition=0, cursorId=cursor_id)
    deadline = asyncio.get_running_loop().time() + 30
    async with grpc.aio.insecure_channel(address) as channel:
        stub = api_pb2_grpc.APIStub(channel)
        while True:
            try:
                resp = await stub.FetchCursor(req, timeout=5)
                return int(resp.offset)
            except grpc.aio.AioRpcError as exc:
                # Not yet leader of the cursors partition, or not serving yet.
                settling = exc.code() in (
                    grpc.StatusCode.FAILED_PRECONDITION,
                    grpc.StatusCode.UNAVAILABLE,
                )
                if not settling or asyncio.get_running_loop().time() > deadline:
                    raise
            await asyncio.sleep(0.2)


def release(node: SingleNode) -> str:
    """``v1.9.0`` or ``master`` (whose version name carries the snapshot's commit)."""
    return node.version.split("-", 1)[0]


@pytest.mark.parametrize("last", [5, 0, -1], ids=["rewound", "rewound-to-0", "cleared"])
async def test_a_rewound_cursor_across_a_restart(node: SingleNode, last: int) -> None:
    ids = ("reader", "witness", "third")
    async with Client(node.addresses, options=OPTIONS) as client:
        for cursor_id in ids:
            await client.set_cursor(cursor_id, "orders", 10)
            await client.set_cursor(cursor_id, "orders", last)
        newest = (await client.fetch_partition_metadata("__cursors", 0)).newest_offset
        # From the cache: the last value, on every version.
        assert await server_answer(node.address, "reader", "orders") == last
    node.node.stop()  # graceful (SIGINT), same data directory
    if release(node) != "master":
        # A v1.9.0 (v1.7.1) node embedding NATS exits on SIGINT before it closes its logs,
        # so the HW on disk is what the 5 s checkpoint loop last wrote: -1 if it has not
        # run since the cursors were set, their HW if it has (a slow machine). Remove the
        # checkpoint so the restart is the first case every time.
        checkpoint_path(node, "__cursors", 0).unlink(missing_ok=True)
    node.node.start()
    async with Client(node.addresses, options=OPTIONS) as client:
        hidden = await client.fetch_partition_metadata("__cursors", 0)
        witness = await server_answer(node.address, "witness", "orders")
        if release(node) != "master":
            # The acked records are hidden (high watermark -1) until the next one, so the
            # server finds no record: -1, which it caches.
            assert (hidden.high_watermark, hidden.newest_offset) == (-1, newest)
            assert witness == -1
        else:
            assert (hidden.high_watermark, hidden.newest_offset) == (newest, newest)
            assert witness == last
        # The client's answer is the last value set, on every version (on v1.9.0 it
        # restores the watermark, then checks the server's answer against the log).
        assert await client.fetch_cursor("reader", "orders") == last
        restored = await client.fetch_partition_metadata("__cursors", 0)
        assert restored.high_watermark >= newest
        third = await server_answer(node.address, "third", "orders")
        witness = await server_answer(node.address, "witness", "orders")
        if release(node) != "master":
            assert third == max(10, last)  # uncached: the highest record, not the newest
            assert witness == -1  # cached while hidden: what the client cannot mend
        else:
            assert third == witness == last
        assert await client.fetch_cursor("third", "orders") == last
        # Set again after the restart: the cache answers, on every version.
        await client.set_cursor("reader", "orders", 3)
        assert await server_answer(node.address, "reader", "orders") == 3
        assert await client.fetch_cursor("reader", "orders") == 3


async def test_a_rewound_cursor_pushed_out_of_the_cache(node: SingleNode) -> None:
    # No restart: 512 other cursors evict it from the server's cache.
    async with Client(node.addresses, options=OPTIONS) as client:
        await client.set_cursor("reader", "orders", 10)
        await client.set_cursor("reader", "orders", 5)
        for n in range(CACHE_SIZE):
            await client.set_cursor(f"other-{n}", "orders", n)
        after = await server_answer(node.address, "reader", "orders")
        assert after == (10 if release(node) != "master" else 5)
        assert await client.fetch_cursor("reader", "orders") == 5
        # The others are right too, newest and oldest (the oldest is out of the cache
        # again, as the reads above put "reader" back in).
        assert await client.fetch_cursor(f"other-{CACHE_SIZE - 1}", "orders") == CACHE_SIZE - 1
        assert await client.fetch_cursor("other-0", "orders") == 0


async def partition_paused(address: str) -> bool:
    """Whether the node refuses FetchPartitionMetadata for ``__cursors`` 0 as not leading
    it (while it is its leader): what a paused partition answers."""
    req = api_pb2.FetchPartitionMetadataRequest(stream="__cursors", partition=0)
    async with grpc.aio.insecure_channel(address) as channel:
        try:
            await api_pb2_grpc.APIStub(channel).FetchPartitionMetadata(req, timeout=5)
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.FAILED_PRECONDITION:
                raise
            return True
    return False


@pytest.mark.parametrize("version", VERSIONS)
async def test_a_cursor_read_while_its_partition_is_paused(tmp_path: Path, version: str) -> None:
    # Servers pause a __cursors partition after cursors.stream.auto.pause.time without
    # writes (one minute by default; CI's long-lived servers see it between tests).
    settings = {"cursors.stream.auto.pause.time": "1s"}
    with SingleNode(base_dir=tmp_path, version=version, settings=settings) as node:
        async with Client(node.addresses, options=OPTIONS) as client:
            await client.set_cursor("reader", "orders", 10)
            await client.set_cursor("reader", "orders", 5)
            deadline = asyncio.get_running_loop().time() + 20
            while not await partition_paused(node.address):
                assert asyncio.get_running_loop().time() < deadline, "never paused"
                await asyncio.sleep(0.3)
            listed = await client.fetch_metadata("__cursors")
            assert listed.streams["__cursors"].partitions[0].paused
            assert await client.fetch_cursor("reader", "orders") == 5
            assert not await partition_paused(node.address)  # the client's record resumed it
            assert await client.fetch_cursor("absent", "orders") == -1
            await client.set_cursor("reader", "orders", 7)
            assert await client.fetch_cursor("reader", "orders") == 7
