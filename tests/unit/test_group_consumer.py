"""Consumer groups without a server: options, bookkeeping, and servers lacking the group RPCs.

The in-process fake API does not serve the group RPCs (it answers UNIMPLEMENTED, as
Liftbridge before v1.8.0 does): joining must fail with `FeatureNotSupportedError`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from fake_liftbridge import FakeCluster

from liftbridge_client import AutoOffset, Client, ConsumerOptions, StartPosition, errors
from liftbridge_client._cluster.groups import (
    FEATURE,
    PartitionState,
    diff_assignments,
    is_not_member,
    join,
    start_args,
)
from liftbridge_client.groups import group_cursor_id
from liftbridge_client.options import ClientOptions, RetryPolicy
from liftbridge_client.subscription import Subscription

OPTIONS = ClientOptions(
    rpc_timeout=2.0, retry=RetryPolicy(attempts=2, initial_backoff=0.01, max_backoff=0.01)
)


@pytest.fixture
async def cluster() -> AsyncIterator[FakeCluster]:
    async with FakeCluster(("a",)) as c:
        yield c


# ---------------------------------------------------------------- servers without groups


async def test_join_on_a_server_without_groups_is_feature_not_supported(
    cluster: FakeCluster,
) -> None:
    cache = cluster.metadata_cache(OPTIONS)
    with pytest.raises(errors.FeatureNotSupportedError) as info:
        await join(cache, OPTIONS, "g", "c1", ("s",))
    assert info.value.feature == FEATURE
    assert "v1.8.0" in str(info.value)
    assert len(cluster.calls_of("JoinConsumerGroup")) == 1  # not retried


async def test_a_consumer_on_a_server_without_groups_raises_on_start(
    cluster: FakeCluster,
) -> None:
    async with Client([cluster.address("a")], options=OPTIONS) as client:
        consumer = client.consumer("g", ["s"])
        with pytest.raises(errors.FeatureNotSupportedError):
            await consumer.start()
        with pytest.raises(errors.FeatureNotSupportedError):
            await anext(aiter(consumer))
        await consumer.close()
        assert consumer.closed
    # Nothing was joined, so nothing is left: no leave was sent.
    assert cluster.calls_of("LeaveConsumerGroup") == []


# ---------------------------------------------------------------- inputs


@pytest.mark.parametrize(
    ("group", "streams", "match"),
    [
        ("", ["s"], "group_id"),
        ("a,b", ["s"], "group_id"),
        (3, ["s"], "group_id"),
        ("g", [], "streams"),
        ("g", "s", "streams"),
        ("g", ["s", ""], "streams"),
    ],
)
async def test_bad_group_arguments_are_refused(
    cluster: FakeCluster, group: object, streams: object, match: str
) -> None:
    async with Client([cluster.address("a")], options=OPTIONS) as client:
        with pytest.raises(errors.InvalidInputError, match=match):
            client.consumer(group, streams)  # type: ignore[arg-type]
    assert cluster.calls_of("JoinConsumerGroup") == []


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"consumer_id": ""}, "consumer_id"),
        ({"auto_offset": "earliest"}, "auto_offset"),
        ({"commit_interval": 0}, "commit_interval"),
        ({"commit_interval": float("nan")}, "commit_interval"),
        ({"fetch_interval": -1.0}, "fetch_interval"),
        ({"max_buffered": 0}, "max_buffered"),
        ({"max_buffered": True}, "max_buffered"),
        ({"commit_on_close": 1}, "commit_on_close"),
        ({"cursor_id": ""}, "cursor_id"),
        ({"cursor_id": "a,b"}, "cursor_id"),
    ],
)
def test_bad_consumer_options_name_the_field(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(errors.InvalidInputError, match=match):
        ConsumerOptions(**kwargs)  # type: ignore[arg-type]


def test_consumer_options_are_frozen_with_documented_defaults() -> None:
    opts = ConsumerOptions()
    assert opts.auto_offset is AutoOffset.EARLIEST
    assert opts.commit_interval == 5.0
    assert opts.fetch_interval is None
    with pytest.raises(AttributeError):
        opts.commit_interval = 1.0  # type: ignore[misc]


def test_the_cursor_id_is_go_liftbridges() -> None:
    assert group_cursor_id("billing") == "__group:billing"


# ---------------------------------------------------------------- bookkeeping


def test_assignment_diff() -> None:
    diff = diff_assignments([("s", 0), ("s", 1), ("t", 0)], {"s": (1, 2), "u": ()})
    assert diff.revoked == (("s", 0), ("t", 0))
    assert diff.added == (("s", 2),)
    assert diff.kept == (("s", 1),)


def test_processed_offsets_only_move_forward_and_commit_once() -> None:
    state = PartitionState("s", 0)
    assert state.to_commit() is None
    state.mark_processed(4)
    state.mark_processed(2)  # a redelivery does not move it back
    assert state.processed == 4
    assert state.to_commit() == 4
    state.committed = 4
    assert state.to_commit() is None


@pytest.mark.parametrize(
    ("processed", "cursor", "expected"),
    [(None, -1, None), (None, 9, 10), (12, 9, 13), (3, 9, 10)],
)
def test_a_reader_resumes_after_the_furthest_known_position(
    processed: int | None, cursor: int, expected: int | None
) -> None:
    state = PartitionState("s", 0, processed=processed)
    assert state.resume_offset(cursor) == expected


def test_start_args() -> None:
    assert start_args(7, AutoOffset.NEW_ONLY) == {"start_offset": 7}
    assert start_args(None, AutoOffset.EARLIEST) == {"start": StartPosition.EARLIEST}
    assert start_args(None, AutoOffset.LATEST) == {"start": StartPosition.LATEST}
    assert start_args(None, AutoOffset.NEW_ONLY) == {"start": StartPosition.NEW_ONLY}


def test_not_member_answers() -> None:
    assert is_not_member(errors.NotFoundError("x", details="consumer group does not exist"))
    assert is_not_member(
        errors.FailedPreconditionError(
            "x", details="consumer is not a member of the consumer group"
        )
    )
    assert not is_not_member(
        errors.FailedPreconditionError("x", details="broker is not the consumer group coordinator")
    )
    assert not is_not_member(errors.UnavailableError("x", details="down"))


async def test_a_coordinator_left_out_of_the_broker_list_is_reached_at_its_last_address(
    cluster: FakeCluster,
) -> None:
    """A node lists only the brokers that answer its NATS survey in time; a coordinator
    left out still coordinates (docs/compatibility.md, "A leader missing from the broker
    list")."""
    from liftbridge_client.groups import Consumer

    def no_reads(*args: object, **kwargs: object) -> Subscription:
        raise AssertionError("nothing is read here")

    cache = cluster.metadata_cache(OPTIONS)
    await cache.refresh()
    consumer = Consumer(cache, cache._pool, OPTIONS, no_reads, "g", ("s",))
    consumer._coordinator = "a"
    assert await consumer._coordinator_address() == cluster.address("a")
    cluster.hidden.add("a")  # the answers leave "a" out from now on
    await cache.refresh()
    assert cache.current.broker("a") is None  # nothing names it: not added back
    assert await consumer._coordinator_address() == cluster.address("a")
    consumer._coordinator = "z"  # never listed
    with pytest.raises(errors.UnavailableError, match="not among the known brokers"):
        await consumer._coordinator_address()
