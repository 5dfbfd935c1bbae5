"""Cursor routing, validation and error mapping, against the in-process fake API."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
from fake_liftbridge import FakeCluster

from liftbridge_client import errors
from liftbridge_client._cluster.admin import (
    cursor_key,
    cursors_partition,
    fetch_cursor,
    set_cursor,
)
from liftbridge_client._cluster.metadata import MetadataCache
from liftbridge_client._proto import api_pb2
from liftbridge_client.options import ClientOptions, RetryPolicy

OPTIONS = ClientOptions(
    rpc_timeout=2.0, retry=RetryPolicy(attempts=3, initial_backoff=0, max_backoff=0)
)


@pytest.fixture
async def cluster() -> AsyncIterator[FakeCluster]:
    async with FakeCluster(("a", "b", "c")) as c:
        yield c


def cursors_led_by(cluster: FakeCluster, leaders: str) -> MetadataCache:
    """One ``__cursors`` partition per letter, led by that broker ("": no cursors stream)."""
    if leaders:
        cluster.add_stream("__cursors", "ns.cursors", leaders)
    return cluster.metadata_cache(OPTIONS)


def cursor_calls(cluster: FakeCluster) -> list[tuple[str, str, Any]]:
    return [c for c in cluster.calls if c[0] in {"SetCursor", "FetchCursor"}]


def test_key_and_partition_golden_values() -> None:
    assert cursor_key("a", "s", 0) == b"a,s,0"
    # CRC-32 (IEEE) 0xC1CB346D is above 2**31: a signed hash would pick another partition.
    assert cursors_partition(b"a,s,0", 3) == 0xC1CB346D % 3 == 2
    assert cursors_partition(b"b,s,0", 3) == 0x866B4EBD % 3 == 1
    assert cursors_partition(b"orders,events,7", 3) == 0x31C4CED7 % 3 == 0
    assert cursors_partition(b"anything", 1) == 0


async def test_requests_go_to_the_leader_of_the_owning_partition(cluster: FakeCluster) -> None:
    md = cursors_led_by(cluster, "abc")  # partition 0 led by a, 1 by b, 2 by c
    await set_cursor(md, OPTIONS, "a", "s", 0, 41)  # -> partition 2
    await set_cursor(md, OPTIONS, "b", "s", 0, 7)  # -> partition 1
    assert await fetch_cursor(md, OPTIONS, "a", "s", 0) == 41
    assert await fetch_cursor(md, OPTIONS, "b", "s", 0) == 7
    assert await fetch_cursor(md, OPTIONS, "zz", "s", 0) == -1
    routed = [(what, broker) for what, broker, _ in cursor_calls(cluster)[:4]]
    assert routed == [
        ("SetCursor", "c"),
        ("SetCursor", "b"),
        ("FetchCursor", "c"),
        ("FetchCursor", "b"),
    ]
    req = cursor_calls(cluster)[0][2]
    assert isinstance(req, api_pb2.SetCursorRequest)
    assert (req.cursorId, req.stream, req.partition, req.offset) == ("a", "s", 0, 41)


async def test_not_leader_refreshes_and_retries_on_the_new_leader(cluster: FakeCluster) -> None:
    md = cursors_led_by(cluster, "aaa")
    await md.refresh()
    cluster.fail(
        "SetCursor",
        grpc.StatusCode.FAILED_PRECONDITION,
        "Server not leader for cursors partition 2",
    )
    cluster.streams["__cursors"].partitions[2].leader = "b"  # what the next refresh says
    await set_cursor(md, OPTIONS, "a", "s", 0, 3)
    assert [broker for _, broker, _ in cursor_calls(cluster)] == ["a", "b"]
    assert cluster.cursors[("a", "s", 0)] == 3


async def test_not_leader_retries_are_bounded(cluster: FakeCluster) -> None:
    md = cursors_led_by(cluster, "a")
    cluster.fail(
        "FetchCursor",
        grpc.StatusCode.FAILED_PRECONDITION,
        "Server not cursor partition leader",
        times=10,
    )
    with pytest.raises(errors.NotLeaderError):
        await fetch_cursor(md, OPTIONS, "a", "s", 0)
    assert len(cursor_calls(cluster)) == OPTIONS.retry.attempts


async def test_no_cursors_stream_in_metadata_is_cursors_disabled(cluster: FakeCluster) -> None:
    md = cursors_led_by(cluster, "")
    with pytest.raises(errors.CursorsDisabledError, match=r"cursors\.stream\.partitions"):
        await set_cursor(md, OPTIONS, "a", "s", 0, 1)
    assert cursor_calls(cluster) == []


async def test_server_saying_cursors_stream_does_not_exist_is_cursors_disabled(
    cluster: FakeCluster,
) -> None:
    md = cursors_led_by(cluster, "a")
    cluster.fail("FetchCursor", grpc.StatusCode.INTERNAL, "Cursors stream does not exist")
    with pytest.raises(errors.CursorsDisabledError) as info:
        await fetch_cursor(md, OPTIONS, "a", "s", 0)
    assert isinstance(info.value, errors.InternalServerError)
    assert info.value.details == "Cursors stream does not exist"
    assert isinstance(info.value.__cause__, errors.InternalServerError)


async def test_other_internal_errors_pass_through(cluster: FakeCluster) -> None:
    md = cursors_led_by(cluster, "a")
    cluster.fail("SetCursor", grpc.StatusCode.INTERNAL, "publish timed out")
    with pytest.raises(errors.InternalServerError) as info:
        await set_cursor(md, OPTIONS, "a", "s", 0, 1)
    assert type(info.value) is errors.InternalServerError


@pytest.mark.parametrize(
    ("cursor_id", "stream", "partition", "offset", "fragment"),
    [
        ("", "s", 0, 0, "cursor_id must be a non-empty string"),
        ("a,b", "s", 0, 0, "must not contain ','"),
        ("a", "", 0, 0, "stream must be a non-empty string"),
        ("a", "s", -1, 0, "partition must be >= 0"),
        ("a", "s", True, 0, "partition must be an int"),
        ("a", "s", 0, -2, "offset must be >= -1"),
        ("a", "s", 0, 1.5, "offset must be an int"),
    ],
)
async def test_invalid_inputs(
    cluster: FakeCluster, cursor_id: Any, stream: Any, partition: Any, offset: Any, fragment: str
) -> None:
    md = cursors_led_by(cluster, "a")
    with pytest.raises(errors.InvalidInputError, match=fragment):
        await set_cursor(md, OPTIONS, cursor_id, stream, partition, offset)
    assert cluster.calls == []  # not even a metadata refresh


async def test_minus_one_is_a_valid_offset_to_set(cluster: FakeCluster) -> None:
    md = cursors_led_by(cluster, "a")
    await set_cursor(md, OPTIONS, "a", "s", 0, -1)
    assert cluster.cursors[("a", "s", 0)] == -1
