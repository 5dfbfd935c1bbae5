"""Feature detection IO and the reverse emulation against the in-process fake API."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import grpc
import pytest
from fake_liftbridge import Fail, FakeBroker, FakeCluster, Hang

from liftbridge_client import Client, ClientOptions, StartPosition, StreamConfig, _subscribe, errors
from liftbridge_client._cluster.feature_probe import FeatureDetector
from liftbridge_client._cluster.metadata import MetadataCache
from liftbridge_client._proto import api_pb2
from liftbridge_client.features import FEATURES, PROBED_RPCS, State
from liftbridge_client.subscription import Subscription

OPTIONS = ClientOptions(rpc_timeout=2.0, metadata_refresh_interval=None)
CG_RPCS = [d.name for d in FEATURES["consumer_groups"].depends]
EMPTY = api_pb2.Message()


def msg(offset: int) -> api_pb2.Message:
    return api_pb2.Message(stream="s", offset=offset, value=f"m{offset}".encode(), timestamp=1)


def speaks(cluster: FakeCluster, version: str, broker: str | None = None) -> None:
    """Make the fake answer the probes as ``version`` does (the fake lacks Publish and CGs)."""
    times = 50
    cluster.fail(
        "Publish", grpc.StatusCode.INVALID_ARGUMENT, "No stream", broker=broker, times=times
    )
    if version != "v1.7.1":
        for rpc in CG_RPCS:
            cluster.fail(
                rpc, grpc.StatusCode.INVALID_ARGUMENT, "No groupId", broker=broker, times=times
            )


@pytest.fixture
async def fake() -> AsyncIterator[FakeCluster]:
    async with FakeCluster(("a", "b")) as cluster:
        cluster.add_stream("s", "s", ["a"])
        yield cluster


def detector(cluster: FakeCluster, options: ClientOptions = OPTIONS) -> FeatureDetector:
    pool = cluster.pool(options)
    return FeatureDetector(MetadataCache(pool, [cluster.address("a")], options), pool, options)


def probes(cluster: FakeCluster) -> list[tuple[str, str, object]]:
    return [c for c in cluster.calls if c[0] in PROBED_RPCS]


async def test_probes_are_empty_requests_and_the_answer_is_cached(fake: FakeCluster) -> None:
    speaks(fake, "v1.9.0")
    features = detector(fake)
    cluster = await features.cluster()
    assert cluster.enabled == set(FEATURES) - {"reverse_subscribe"}
    assert cluster.state("reverse_subscribe") is State.UNKNOWN
    sent = probes(fake)
    assert sorted((rpc, broker) for rpc, broker, _ in sent) == sorted(
        (rpc, broker) for rpc in PROBED_RPCS for broker in ("a", "b")
    )
    for rpc, _, request in sent:
        # Nothing a handler could act on: every name field is empty.
        for name in ("stream", "name", "groupId", "consumerId", "cursorId"):
            assert getattr(request, name, "") == "", (rpc, request)
    await features.cluster()
    await features.require("consumer_groups")
    assert len(probes(fake)) == len(sent)  # cached: nothing sent again
    assert set(features.cached()) == {fake.address("a"), fake.address("b")}


async def test_concurrent_first_users_share_one_probe(fake: FakeCluster) -> None:
    speaks(fake, "v1.9.0")
    features = detector(fake)
    found = await asyncio.gather(*(features.broker(fake.address("a")) for _ in range(5)))
    assert all(f is found[0] for f in found)
    assert len(probes(fake)) == len(PROBED_RPCS)


async def test_intersection_names_the_broker_that_lacks_a_feature(fake: FakeCluster) -> None:
    speaks(fake, "v1.9.0", broker="a")
    speaks(fake, "v1.7.1", broker="b")
    features = detector(fake)
    cluster = await features.cluster()
    assert cluster.lacking("consumer_groups") == [fake.address("b")]
    assert not await features.supported("consumer_groups")
    with pytest.raises(errors.FeatureNotSupportedError) as info:
        await features.require("consumer_groups")
    assert (info.value.feature, info.value.broker) == ("consumer_groups", fake.address("b"))
    assert "JoinConsumerGroup answers UNIMPLEMENTED" in str(info.value)
    await features.require("consumer_groups", brokers=[fake.address("a")])
    # Once known, calls that need it are refused without any IO.
    with pytest.raises(errors.FeatureNotSupportedError):
        features.check("consumer_groups")
    features.check("cursors")
    with pytest.raises(errors.InvalidInputError, match="feature must be one of"):
        await features.require("time_travel")


async def test_an_unreachable_broker_is_not_cached_and_is_left_out(fake: FakeCluster) -> None:
    speaks(fake, "v1.9.0")
    fake.fail("FetchCursor", grpc.StatusCode.UNAVAILABLE, broker="a")
    features = detector(fake)
    with pytest.raises(errors.UnavailableError):
        await features.broker(fake.address("a"))
    assert features.cached() == {}
    assert (await features.broker(fake.address("a"))).supported("cursors")  # probed again
    await fake.brokers["b"].stop()
    cluster = await features.cluster()
    assert [b.broker for b in cluster.brokers] == [fake.address("a")]
    with pytest.raises(errors.UnavailableError):
        await features.cluster([fake.address("b")])


@pytest.mark.parametrize(
    ("fallback", "consumer_groups", "cursors"),
    [("v1.7.1", False, True), ("v1.9.0", True, True), ("v1.2", False, False)],
)
async def test_without_probing_the_fallback_decides_and_nothing_is_sent(
    fake: FakeCluster, fallback: str, consumer_groups: bool, cursors: bool
) -> None:
    options = ClientOptions(probe_features=False, server_version_fallback=fallback)
    features = detector(fake, options)
    assert (await features.cluster()).supported("consumer_groups") is consumer_groups
    assert await features.supported("cursors") is cursors
    if not consumer_groups:
        with pytest.raises(errors.FeatureNotSupportedError, match="feature probing is off"):
            await features.require("consumer_groups")
    if not cursors:
        with pytest.raises(errors.FeatureNotSupportedError) as info:
            features.check("cursors")
        assert info.value.broker == "(any broker)"
    assert not await features.reverse_native(fake.address("a"), "s", 0, 10)
    assert fake.calls == []  # not even metadata


async def test_client_refuses_a_call_the_assumed_version_lacks_before_sending(
    fake: FakeCluster,
) -> None:
    options = ClientOptions(probe_features=False, server_version_fallback="v1.2.0")
    async with Client([fake.address("a")], options=options) as client:
        with pytest.raises(errors.FeatureNotSupportedError) as info:
            await client.set_cursor("c", "s", 1)
        assert info.value.feature == "cursors"
        with pytest.raises(errors.FeatureNotSupportedError, match="stop_positions"):
            client.subscribe("s", stop_offset=3)
        with pytest.raises(errors.FeatureNotSupportedError, match="optimistic_concurrency"):
            await client.create_stream("x", "x", StreamConfig(optimistic_concurrency_control=True))
    assert not fake.calls_of("SetCursor")
    assert not fake.calls_of("CreateStream")


@pytest.mark.parametrize(
    ("high_watermark", "script", "native"),
    [
        (4, [EMPTY, msg(3), msg(2)], True),  # backwards
        (4, [EMPTY, msg(3), msg(4)], False),  # the field was ignored: forward
        (1, [EMPTY, msg(0), Fail(grpc.StatusCode.UNKNOWN, "EOF")], True),  # ended at 0
    ],
)
async def test_reverse_probe_reads_two_messages_below_the_high_watermark(
    fake: FakeCluster,
    high_watermark: int,
    script: list[api_pb2.Message | Fail],
    native: bool,
    caplog: pytest.LogCaptureFixture,
) -> None:
    speaks(fake, "v1.9.0")
    call = fake.script("a", *script, Hang())
    features = detector(fake)
    with caplog.at_level(logging.DEBUG, logger="liftbridge_client.features"):
        assert await features.reverse_native(fake.address("a"), "s", 0, high_watermark) is native
    assert call.request is not None
    assert (call.request.reverse, call.request.startOffset) == (True, high_watermark - 1)
    verb = "Enabling" if native else "Disabling"
    assert f"{verb} feature reverse_subscribe" in caplog.text
    # Decided for the broker: no second probe.
    assert await features.reverse_native(fake.address("a"), "s", 0, high_watermark) is native
    assert len(fake.subscribe_calls) == 1
    await asyncio.wait_for(call.finished.wait(), 5)  # the probe's call was cancelled


async def test_reverse_probe_needs_two_messages(fake: FakeCluster) -> None:
    speaks(fake, "v1.9.0")
    features = detector(fake)
    assert not await features.reverse_native(fake.address("a"), "s", 0, 0)
    assert fake.subscribe_calls == []
    assert features.cached()[fake.address("a")].state("reverse_subscribe") is State.UNKNOWN


# ---------------------------------------------------------------- emulation through Subscription


@pytest.fixture
def high_watermark(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The fake's FetchPartitionMetadata answers with this high watermark."""
    value = [4]

    async def answer(
        self: FakeBroker, request: api_pb2.FetchPartitionMetadataRequest, context: object
    ) -> api_pb2.FetchPartitionMetadataResponse:
        await self._enter("FetchPartitionMetadata", request, context)  # type: ignore[arg-type]
        meta = api_pb2.PartitionMetadata(
            id=0, leader="a", highWatermark=value[0], newestOffset=value[0]
        )
        return api_pb2.FetchPartitionMetadataResponse(metadata=meta)

    monkeypatch.setattr(FakeBroker, "FetchPartitionMetadata", answer)
    return value


def stop_reached() -> Fail:
    return Fail(grpc.StatusCode.RESOURCE_EXHAUSTED, "Stop offset reached")


async def test_emulated_reverse_reads_windows_backwards_and_ends(
    high_watermark: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_subscribe, "WINDOW", 2)
    async with FakeCluster(("a",)) as fake:
        fake.add_stream("s", "s", ["a"])
        speaks(fake, "v1.9.0")
        fake.script("a", EMPTY, msg(3), msg(4), Hang())  # the probe: forward
        fake.script("a", EMPTY, msg(0), msg(1), Hang())  # the oldest offset
        fake.script("a", EMPTY, msg(3), msg(4), stop_reached())
        fake.script("a", EMPTY, msg(1), msg(2), stop_reached())
        fake.script("a", EMPTY, msg(0), stop_reached())
        features = detector(fake)
        pool = fake.pool(OPTIONS)
        metadata = MetadataCache(pool, [fake.address("a")], OPTIONS)
        sub = Subscription(
            metadata,
            pool,
            OPTIONS,
            "s",
            0,
            features=features,
            start=StartPosition.LATEST,
            reverse=True,
        )
        async with asyncio.timeout(10), sub:
            got = [m.offset async for m in sub]
        assert got == [4, 3, 2, 1, 0]
        assert isinstance(sub.end_reason, errors.StopPositionReached)
        assert sub.last_offset == 0
        windows = [
            (c.request.startOffset, c.request.stopOffset, c.request.reverse)
            for _, c in fake.subscribe_calls[2:]
            if c.request is not None
        ]
        assert windows == [(3, 4, False), (1, 2, False), (0, 0, False)]


async def test_reverse_on_an_empty_partition_ends_without_subscribing(
    high_watermark: list[int],
) -> None:
    high_watermark[0] = -1
    async with FakeCluster(("a",)) as fake:
        fake.add_stream("s", "s", ["a"])
        pool = fake.pool(OPTIONS)
        metadata = MetadataCache(pool, [fake.address("a")], OPTIONS)
        sub = Subscription(metadata, pool, OPTIONS, "s", 0, features=detector(fake), reverse=True)
        async with asyncio.timeout(10), sub:
            assert [m async for m in sub] == []
        assert isinstance(sub.end_reason, errors.StopPositionReached)
        assert "empty" in str(sub.end_reason)
        assert fake.subscribe_calls == []


async def test_a_failure_while_choosing_the_reverse_path_is_retried_not_skipped(
    high_watermark: list[int],
) -> None:
    high_watermark[0] = 0  # one message: too short to probe, so emulated
    async with FakeCluster(("a",)) as fake:
        fake.add_stream("s", "s", ["a"])
        speaks(fake, "v1.9.0")
        fake.fail("FetchPartitionMetadata", grpc.StatusCode.NOT_FOUND, "No such partition")
        fake.script("a", EMPTY, msg(0), Hang())  # the oldest offset
        fake.script("a", EMPTY, msg(0), stop_reached())  # the only window
        pool = fake.pool(OPTIONS)
        metadata = MetadataCache(pool, [fake.address("a")], OPTIONS)
        sub = Subscription(metadata, pool, OPTIONS, "s", 0, features=detector(fake), reverse=True)
        with pytest.raises(errors.NotFoundError):
            await sub.__aenter__()
        async with asyncio.timeout(10), sub:  # decided again, not sent forward
            assert [m.offset async for m in sub] == [0]
        assert [c.request.reverse for _, c in fake.subscribe_calls if c.request] == [False, False]


def test_master_failing_a_reverse_read_of_an_empty_partition_is_its_end() -> None:
    from liftbridge_client._subscribe import Action, Phase, SubscribeSpec, classify

    spec = SubscribeSpec.build("s", 0, {"reverse": True}, now_ns=0)
    details = "Failed to create stream reader: segment not found"
    exc = errors.InternalServerError(f"INTERNAL: {details}", details=details)
    verdict = classify(exc, spec, Phase.OPENING)
    assert verdict.action is Action.END
    assert isinstance(verdict.error, errors.StopPositionReached)
    forward = SubscribeSpec.build("s", 0, {}, now_ns=0)
    assert classify(exc, forward, Phase.OPENING).action is Action.FAIL  # only for reverse


async def test_a_broker_that_left_the_metadata_is_forgotten(fake: FakeCluster) -> None:
    speaks(fake, "v1.9.0")
    pool = fake.pool(OPTIONS)
    metadata = MetadataCache(pool, [fake.address("a")], OPTIONS)
    features = FeatureDetector(metadata, pool, OPTIONS)
    await features.cluster()
    assert set(features.cached()) == {fake.address("a"), fake.address("b")}
    fake.hidden.add("b")
    await metadata.refresh()
    assert [b.broker for b in (await features.cluster()).brokers] == [fake.address("a")]
    assert set(features.cached()) == {fake.address("a")}  # probed again if it comes back


class _Window:
    """A stand-in forward subscription of one window (hangs once when asked to)."""

    def __init__(self, start: int, stop: int, hang: asyncio.Event | None) -> None:
        self.items = list(range(start, stop + 1))
        self.hang = hang
        self.closed = False

    async def __aenter__(self) -> _Window:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.closed = True

    def __aiter__(self) -> _Window:
        return self

    async def __anext__(self) -> object:
        if self.hang is not None and not self.hang.is_set():
            await asyncio.Event().wait()  # until cancelled
        if not self.items:
            raise StopAsyncIteration
        from liftbridge_client.models import Message

        return Message(stream="s", partition=0, offset=self.items.pop(0), value=b"")

    async def close(self) -> None:
        self.closed = True


async def test_a_read_timeout_mid_window_loses_nothing() -> None:
    opened: list[_Window] = []
    released = asyncio.Event()

    def open_window(start: int, stop: int) -> _Window:
        window = _Window(start, stop, released if not opened else None)
        opened.append(window)
        return window

    reader = _subscribe.ReverseReader(open_window, 5, 0, size=3)  # type: ignore[arg-type]
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(reader.next(), 0.1)
    assert opened[0].closed  # the cancelled window's subscription was closed
    got = []
    while (message := await reader.next()) is not None:
        got.append(message.offset)
    assert got == [5, 4, 3, 2, 1, 0]  # the interrupted window [3, 5] was read again
    assert [(w.items, w.closed) for w in opened][1:] == [([], True), ([], True)]
