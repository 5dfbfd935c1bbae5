"""The Spark connector's refusals and bounds (issue 23): misspelt options, offsets naming
nothing, empty plans, and the delivery timeout. Pure: no Spark session, no server."""

from __future__ import annotations

import asyncio

import pytest

from liftbridge_client import errors
from liftbridge_client.spark._options import (
    SINK_OPTIONS,
    SOURCE_OPTIONS,
    SinkOptions,
    SourceOptions,
)
from liftbridge_client.spark._positions import check_named
from liftbridge_client.spark._write import bounded

BASE = {"brokers": "127.0.0.1:9292", "stream": "orders"}


@pytest.mark.parametrize(
    ("typo", "suggested", "streaming"),
    [
        ("startingOffset", "startingOffsets", False),
        ("maxOffsetPerTrigger", "maxOffsetsPerTrigger", True),
        ("STARTINGOFFSET", "startingOffsets", False),
        ("endingOffset", "endingOffsets", False),
    ],
)
def test_a_misspelt_read_option_is_refused_with_the_closest_name(
    typo: str, suggested: str, streaming: bool
) -> None:
    with pytest.raises(errors.InvalidInputError, match=f"{typo!r}.*did you mean {suggested!r}"):
        SourceOptions.parse({**BASE, typo: "earliest"}, streaming=streaming)


def test_a_misspelt_write_option_is_refused() -> None:
    with pytest.raises(errors.InvalidInputError, match=r"'idempotant'.*'idempotent'"):
        SinkOptions.parse({**BASE, "idempotant": "true"})
    with pytest.raises(errors.InvalidInputError, match="'deliveryTimeout'"):
        SinkOptions.parse({**BASE, "deliveryTimeout": "1000"})


def test_read_options_are_refused_on_a_write_and_write_options_on_a_read() -> None:
    with pytest.raises(errors.InvalidInputError, match=r"'startingOffsets'.*write"):
        SinkOptions.parse({**BASE, "startingOffsets": "earliest"})
    with pytest.raises(errors.InvalidInputError, match=r"'ackPolicy'.*read"):
        SourceOptions.parse({**BASE, "ackPolicy": "all"}, streaming=False)


def test_an_unknown_option_far_from_any_name_lists_the_known_ones() -> None:
    with pytest.raises(errors.InvalidInputError, match="known: ") as info:
        SourceOptions.parse({**BASE, "zzz": "1"}, streaming=False)
    assert "did you mean" not in str(info.value)


def test_every_documented_option_and_spark_s_own_are_accepted() -> None:
    # Spark passes a path and a streaming query's own options through to the source.
    SourceOptions.parse({**BASE, "path": "x", "checkpointLocation": "/c"}, streaming=True)
    SinkOptions.parse({**BASE, "queryName": "q", "checkpointLocation": "/c"}, streaming=True)
    assert len(set(map(str.lower, SOURCE_OPTIONS))) == len(SOURCE_OPTIONS)
    assert len(set(map(str.lower, SINK_OPTIONS))) == len(SINK_OPTIONS)


def test_delivery_timeout_defaults_to_two_minutes_and_is_settable() -> None:
    assert SinkOptions.parse(BASE).delivery_timeout == 120.0
    assert SinkOptions.parse({**BASE, "deliveryTimeoutMs": "1500"}).delivery_timeout == 1.5
    with pytest.raises(errors.InvalidInputError, match="deliveryTimeoutMs"):
        SinkOptions.parse({**BASE, "deliveryTimeoutMs": "0"})


def test_bounded_turns_a_stalled_step_into_a_typed_timeout_naming_the_option() -> None:
    options = SinkOptions.parse({**BASE, "deliveryTimeoutMs": "50"})

    async def stalls() -> None:
        await asyncio.sleep(10)

    with pytest.raises(errors.LiftbridgeTimeoutError, match="deliveryTimeoutMs=50") as info:
        asyncio.run(bounded(stalls(), options, "publishing"))
    assert isinstance(info.value.__cause__, TimeoutError)


def test_bounded_passes_results_and_the_step_s_own_errors_through() -> None:
    options = SinkOptions.parse({**BASE, "deliveryTimeoutMs": "5000"})

    async def value() -> int:
        return 7

    async def ack_timeout() -> None:
        raise errors.AckTimeoutError("no ack")

    assert asyncio.run(bounded(value(), options)) == 7
    with pytest.raises(errors.AckTimeoutError, match="no ack"):
        asyncio.run(bounded(ack_timeout(), options))


def source(**extra: str) -> SourceOptions:
    return SourceOptions.parse({"brokers": "127.0.0.1:9292", **extra}, streaming=False)


def test_offsets_for_a_stream_the_read_does_not_cover_are_refused() -> None:
    options = source(stream="orders", startingOffsets='{"ordres": {"0": 5}}')
    with pytest.raises(errors.InvalidInputError, match=r"startingOffsets.*'ordres'"):
        check_named({"orders": [0, 1]}, options)


def test_offsets_for_a_partition_that_does_not_exist_are_refused() -> None:
    options = source(stream="orders", endingOffsets='{"orders": {"0": 5, "7": 9}}')
    with pytest.raises(errors.InvalidInputError, match=r"endingOffsets.*\[7\].*\[0, 1\]"):
        check_named({"orders": [0, 1]}, options)
    stamps = source(stream="orders", startingOffsetsByTimestamp='{"orders": {"3": 1}}')
    with pytest.raises(errors.InvalidInputError, match="startingOffsetsByTimestamp"):
        check_named({"orders": [0, 1]}, stamps)


def test_offsets_naming_what_exists_pass() -> None:
    options = source(stream="orders", startingOffsets='{"orders": {"1": 5}}')
    check_named({"orders": [0, 1]}, options)  # no error
    check_named({"orders": [0]}, source(stream="orders"))  # nothing named


def test_pack_rows_option() -> None:
    assert SinkOptions.parse(BASE).pack_rows == 1
    assert SinkOptions.parse({**BASE, "packRows": "500", "exactlyOnce": "true"}).pack_rows == 500
    with pytest.raises(errors.InvalidInputError, match="packRows"):
        SinkOptions.parse({**BASE, "packRows": "0"})
    with pytest.raises(errors.InvalidInputError, match=r"packRows.*idempotent"):
        SinkOptions.parse({**BASE, "packRows": "10", "idempotent": "true", "writeId": "w"})


def test_plain_packing_keeps_the_partition_a_row_would_get_unpacked() -> None:
    from liftbridge_client.packing import PACKED_HEADER, unpack
    from liftbridge_client.partitioning import key_partition
    from liftbridge_client.spark._rows import PublishedRow
    from liftbridge_client.spark._write import packed_publishes

    rows = [PublishedRow("s", b"v%d" % i, b"k%d" % i if i % 3 else None) for i in range(100)]
    rows.append(PublishedRow("s", b"pinned", b"k1", partition=2))
    packs = list(packed_publishes(rows, 7, lambda stream: 4))
    for p in packs:
        assert p.key is None
        assert p.headers is not None
        unpacked = unpack(p.value)
        assert int(p.headers[PACKED_HEADER]) == p.rows == len(unpacked) <= 7
        for r in unpacked:
            want = 2 if r.value == b"pinned" else key_partition(r.key, 4)
            assert p.partition == want, r
    assert sorted(r.value for p in packs for r in unpack(p.value)) == sorted(r.value for r in rows)


def test_plain_packing_refuses_a_partition_the_stream_lacks_at_that_row() -> None:
    from liftbridge_client.spark._rows import PublishedRow
    from liftbridge_client.spark._write import packed_publishes

    rows = [PublishedRow("s", b"a", partition=0), PublishedRow("s", b"b", partition=9)]
    publishes = packed_publishes(rows, 100, lambda stream: 2)
    with pytest.raises(errors.InvalidInputError, match=r"partition 9.*0\.\.1"):
        next(publishes)  # the first pack is not full: the bad row fails before anything


def test_producers_per_partition_option() -> None:
    eo = {**BASE, "exactlyOnce": "true"}
    assert SinkOptions.parse(eo).producers_per_partition == 1
    assert SinkOptions.parse({**eo, "producersPerPartition": "8"}).producers_per_partition == 8
    for bad in ("0", "65", "two"):
        with pytest.raises(errors.InvalidInputError, match="producersPerPartition"):
            SinkOptions.parse({**eo, "producersPerPartition": bad})
    with pytest.raises(errors.InvalidInputError, match=r"producersPerPartition.*exactlyOnce"):
        SinkOptions.parse({**BASE, "producersPerPartition": "4"})


def test_lanes_keep_a_key_on_one_lane_and_spread_keyless_rows() -> None:
    from liftbridge_client.spark._transactional import lane_for

    keys = [b"k%d" % i for i in range(200)]
    lanes = [lane_for(k, 0, 8) for k in keys]
    assert lanes == [lane_for(k, 99, 8) for k in keys]  # the key decides, not the number
    assert set(lanes) == set(range(8))  # and the keys spread over every lane
    assert [lane_for(None, n, 3) for n in range(7)] == [0, 1, 2, 0, 1, 2, 0]


def test_the_exactly_once_sink_picks_a_keyed_row_s_partition_as_the_modulo_mapping() -> None:
    # The sink inlines ModuloMapping's choice for exact-bytes keys: it must agree with the
    # mapping on every key and partition list, and leave anything else to the mapping.
    import random

    from liftbridge_client.exactly_once.mapping import ModuloMapping
    from liftbridge_client.spark._idempotent import TaskIdentity
    from liftbridge_client.spark._rows import PublishedRow
    from liftbridge_client.spark._transactional import _Producers

    options = SinkOptions.parse({**BASE, "exactlyOnce": "true", "writeId": "w"})
    producers = _Producers(None, options, TaskIdentity("w", 0, 3))  # type: ignore[arg-type]
    mapping = ModuloMapping()
    rng = random.Random(31)
    for _ in range(2000):
        key = rng.randbytes(rng.randrange(0, 24))
        partitions = tuple(sorted(rng.sample(range(50), rng.randrange(1, 9))))
        row = PublishedRow("orders", b"v", key)
        assert producers.partition_of(row, partitions) == mapping.choose("orders", key, partitions)
    # Keyless rows go by task number; a key that is not exact bytes gets the mapping's error.
    assert producers.partition_of(PublishedRow("orders", b"v"), (4, 7)) == 7
    with pytest.raises(errors.InvalidInputError, match="key must be bytes"):
        producers.partition_of(PublishedRow("orders", b"v", bytearray(b"k")), (0, 1))  # type: ignore[arg-type]
    with pytest.raises(errors.InvalidInputError, match="must not be empty"):
        producers.partition_of(PublishedRow("orders", b"v", b"k"), ())


def test_an_exactly_once_lane_takes_acks_in_order_and_ends_its_prefix_at_a_failure() -> None:
    # _Lane._take settles each acked head from one result() call: an ack in order extends
    # the gapless prefix; a failed, cancelled or out-of-order publish ends it there.
    from liftbridge_client._proto import api_pb2
    from liftbridge_client.exactly_once.publisher import DEFAULT_RETRY
    from liftbridge_client.models import ack_from_proto
    from liftbridge_client.spark._rows import PublishedRow
    from liftbridge_client.spark._transactional import _Lane

    def ack(offset: int) -> object:
        return ack_from_proto(api_pb2.Ack(stream="s", offset=offset))

    options = SinkOptions.parse({**BASE, "exactlyOnce": "true", "writeId": "w"})
    loop = asyncio.new_event_loop()
    try:
        for ending, expected in [
            ("error", errors.NotLeaderError),
            ("cancelled", errors.LiftbridgeTimeoutError),
            ("out of order", errors.OutOfOrderAckError),
        ]:
            lane = _Lane(None, options, "s", 0, DEFAULT_RETRY)  # type: ignore[arg-type]
            rows = [PublishedRow("s", b"%d" % i) for i in range(4)]
            futures = [loop.create_future() for _ in rows]
            for clock, (row, fut) in enumerate(zip(rows, futures, strict=True), 1):
                lane._record(row, 1, clock, fut)
            futures[0].set_result(ack(10))
            futures[1].set_result(ack(11))
            if ending == "error":
                futures[2].set_exception(errors.NotLeaderError("moved"))
            elif ending == "cancelled":
                futures[2].cancel()
            else:
                futures[2].set_result(ack(9))  # stored before the acked ones
            futures[3].set_result(ack(12))
            problem = lane._settle_done()
            assert isinstance(problem, expected), ending
            # Out of order: the messages stored after offset 9 go again with it.
            kept = 0 if ending == "out of order" else 2
            assert lane.rows == kept, ending
            assert list(lane._todo) == rows[kept:], ending
    finally:
        loop.close()
