"""create_stream: retries while the cluster has no metadata leader, then waits until visible;
an ALREADY_EXISTS after an ambiguous attempt. Against the in-process fake API."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import pytest
from fake_liftbridge import FakeCluster, Partition, Stream

from liftbridge_client import errors
from liftbridge_client._cluster import admin as _admin
from liftbridge_client.options import ClientOptions, RetryPolicy, StreamConfig

OPTIONS = ClientOptions(
    rpc_timeout=2.0,
    create_stream_timeout=2.0,
    retry=RetryPolicy(attempts=2, initial_backoff=0.01, max_backoff=0.01),
)
NO_LEADER = (grpc.StatusCode.INTERNAL, "no known metadata leader")


@pytest.fixture
async def cluster() -> AsyncIterator[FakeCluster]:
    async with FakeCluster(("a", "b")) as c:
        yield c


def appears_after(cluster: FakeCluster, refreshes: int, *, subject: str = "s") -> None:
    """The created stream shows in metadata from the ``refreshes``-th refresh on (first
    without a leader, then with one), as brokers learn of it a moment after the answer."""
    seen = 0

    def before_metadata() -> None:
        nonlocal seen
        seen += 1
        if seen >= refreshes:
            leader = "a" if seen > refreshes else ""
            cluster.streams["orders"] = Stream(subject, {0: Partition(leader, [leader])})

    cluster.before_metadata = before_metadata  # type: ignore[method-assign]


async def create(cluster: FakeCluster) -> None:
    cache = cluster.metadata_cache(OPTIONS, [cluster.address("a"), cluster.address("b")])
    await _admin.create_stream(cache, OPTIONS, "s", "orders", None)


def creates(cluster: FakeCluster) -> list[str]:
    return [broker for broker, _ in cluster.calls_of("CreateStream")]


async def test_retries_no_metadata_leader_past_the_policy_attempts(cluster: FakeCluster) -> None:
    # Four failures while the policy allows two attempts: the deadline, not the count, rules.
    cluster.fail("CreateStream", *NO_LEADER, times=4)
    appears_after(cluster, 1)
    await create(cluster)
    assert len(creates(cluster)) == 5


async def test_other_errors_are_not_retried(cluster: FakeCluster) -> None:
    cluster.fail("CreateStream", grpc.StatusCode.ALREADY_EXISTS, "exists")
    with pytest.raises(errors.AlreadyExistsError):
        await create(cluster)
    assert len(creates(cluster)) == 1


async def test_gives_up_at_the_deadline(cluster: FakeCluster) -> None:
    cluster.fail("CreateStream", *NO_LEADER, times=10_000)
    with pytest.raises(errors.InternalServerError, match="INTERNAL"):
        await create(cluster)


async def test_waits_until_the_stream_and_its_leaders_are_visible(cluster: FakeCluster) -> None:
    appears_after(cluster, 3)
    await create(cluster)
    # The cache's seed refresh, then: unknown, leaderless, complete.
    assert len(cluster.calls_of("FetchMetadata")) == 4


async def test_a_config_that_is_not_a_stream_config_is_invalid_input(
    cluster: FakeCluster,
) -> None:
    cache = cluster.metadata_cache(OPTIONS, [cluster.address("a")])
    with pytest.raises(errors.InvalidInputError, match="config must be a StreamConfig"):
        await _admin.create_stream(cache, OPTIONS, "s", "orders", {"partitions": 3})  # type: ignore[arg-type]
    assert cluster.calls == []


async def test_already_exists_after_an_ambiguous_attempt_is_this_calls_stream(
    cluster: FakeCluster,
) -> None:
    # Broker a failed in a way that may have created the stream; b says it exists.
    cluster.fail("CreateStream", grpc.StatusCode.UNAVAILABLE, "reset", broker="a")
    cluster.fail("CreateStream", grpc.StatusCode.ALREADY_EXISTS, "stream exists", broker="b")
    appears_after(cluster, 1)
    await create(cluster)  # no AlreadyExistsError: the stream matches the request
    assert creates(cluster) == ["a", "b"]


async def test_already_exists_after_an_ambiguous_attempt_but_another_stream_raises(
    cluster: FakeCluster,
) -> None:
    cluster.fail("CreateStream", grpc.StatusCode.DEADLINE_EXCEEDED, "", broker="a")
    cluster.fail("CreateStream", grpc.StatusCode.ALREADY_EXISTS, "stream exists", broker="b")
    appears_after(cluster, 1, subject="someone-elses-subject")
    with pytest.raises(errors.AlreadyExistsError):
        await create(cluster)


async def test_already_exists_without_an_ambiguous_attempt_raises(cluster: FakeCluster) -> None:
    cluster.fail("CreateStream", grpc.StatusCode.ALREADY_EXISTS, "stream exists")
    appears_after(cluster, 1)
    with pytest.raises(errors.AlreadyExistsError):
        await create(cluster)


@pytest.mark.parametrize(
    ("existing", "asked", "message"),
    [
        (
            ("other", 1),
            ("s", 1),
            "stream 'orders' exists with subject 'other', not 's'$",
        ),
        (("s", 1), ("s", 3), "stream 'orders' exists with 1 partition, not 3$"),
        (("s", 2), ("s", 1), "stream 'orders' exists with 2 partitions, not 1$"),
        (
            ("other", 2),
            ("s", 3),
            "stream 'orders' exists with subject 'other', not 's'; 2 partitions, not 3$",
        ),
    ],
)
async def test_exist_ok_names_each_setting_that_differs(
    cluster: FakeCluster, existing: tuple[str, int], asked: tuple[str, int], message: str
) -> None:
    # `streams create s1 --subject other --exist-ok` said "exists with another subject or
    # partition count than asked ('other', 1 partitions)": neither which nor what it has.
    subject, partitions = existing
    cluster.streams["orders"] = Stream(
        subject, {p: Partition("a", ["a"]) for p in range(partitions)}
    )
    cluster.fail("CreateStream", grpc.StatusCode.ALREADY_EXISTS, "stream exists")
    cache = cluster.metadata_cache(OPTIONS, [cluster.address("a")])
    asked_subject, asked_partitions = asked
    with pytest.raises(errors.AlreadyExistsError, match=message) as info:
        await _admin.create_stream(
            cache,
            OPTIONS,
            asked_subject,
            "orders",
            StreamConfig(partitions=asked_partitions),
            exist_ok=True,
        )
    assert isinstance(info.value.__cause__, errors.AlreadyExistsError)


async def test_exist_ok_accepts_the_stream_asked_for(cluster: FakeCluster) -> None:
    cluster.streams["orders"] = Stream("s", {p: Partition("a", ["a"]) for p in range(2)})
    cluster.fail("CreateStream", grpc.StatusCode.ALREADY_EXISTS, "stream exists")
    cache = cluster.metadata_cache(OPTIONS, [cluster.address("a")])
    await _admin.create_stream(
        cache, OPTIONS, "s", "orders", StreamConfig(partitions=2), exist_ok=True
    )
