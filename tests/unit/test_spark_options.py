"""The Spark source's options and offset arithmetic (pure: no Spark, no server)."""

from __future__ import annotations

import json
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from liftbridge_client import errors
from liftbridge_client.errors import InvalidInputError
from liftbridge_client.exactly_once.uuids import build_uuid_bytes
from liftbridge_client.models import AckPolicy
from liftbridge_client.options import Transport
from liftbridge_client.spark._columns import Columns
from liftbridge_client.spark._idempotent import TaskIdentity, row_ids
from liftbridge_client.spark._offsets import (
    PartitionRange,
    cap_by_backlog,
    offsets_from_checkpoint,
    plan_ranges,
)
from liftbridge_client.spark._options import (
    EARLIEST,
    LATEST,
    SinkOptions,
    SourceOptions,
    get_option,
)

BASE = {"brokers": "127.0.0.1:9292", "stream": "orders"}


def parse(streaming: bool = False, **extra: str) -> SourceOptions:
    return SourceOptions.parse({**BASE, **extra}, streaming=streaming)


def test_defaults_follow_the_kafka_source() -> None:
    batch, stream = parse(), parse(streaming=True)
    assert batch.starting.default == EARLIEST  # batch reads everything by default
    assert stream.starting.default == LATEST  # a stream starts at the end
    assert batch.ending.default == LATEST
    assert batch.fail_on_data_loss is True
    assert batch.include_headers is False
    assert batch.streams == ("orders",)
    assert batch.isolation == "read_uncommitted"


def test_option_names_are_case_insensitive() -> None:
    opts = SourceOptions.parse(
        {"BROKERS": "h:1", "Stream": "a, b", "failondataloss": "FALSE"}, streaming=False
    )
    assert opts.brokers == ("h:1",)
    assert opts.streams == ("a", "b")
    assert opts.fail_on_data_loss is False
    assert get_option({"MaxOffsetsPerTrigger": "5"}, "maxOffsetsPerTrigger") == "5"


def test_offsets_json_per_stream_and_partition() -> None:
    opts = parse(
        startingOffsets=json.dumps({"orders": {"0": 5, "1": -2, "2": -1}}),
        endingOffsets=json.dumps({"orders": {"0": 9}}),
    )
    assert opts.starting.for_partition("orders", 0) == 5
    assert opts.starting.for_partition("orders", 1) == EARLIEST
    assert opts.starting.for_partition("orders", 2) == LATEST
    assert opts.starting.for_partition("orders", 3) == EARLIEST  # unlisted: the default
    assert opts.ending.for_partition("orders", 0) == 9
    assert opts.ending.for_partition("orders", 1) == LATEST


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ({"startingOffsets": "{not json"}, "startingOffsets"),
        ({"startingOffsets": '{"orders": {"x": 1}}'}, "startingOffsets"),
        ({"startingOffsets": '{"orders": {"0": -3}}'}, "startingOffsets"),
        ({"startingOffsets": '{"orders": {"0": true}}'}, "startingOffsets"),
        ({"startingOffsets": "[]"}, "startingOffsets"),
        ({"endingOffsets": "earliest"}, "endingOffsets"),
        ({"endingOffsets": '{"orders": {"0": -2}}'}, "endingOffsets"),
        ({"failOnDataLoss": "yes"}, "failOnDataLoss"),
        ({"minPartitions": "0"}, "minPartitions"),
        ({"pollTimeoutMs": "-1"}, "pollTimeoutMs"),
        ({"brokers": "nohost"}, "brokers"),
        ({"brokers": "h:1,,h:2"}, "brokers"),
        ({"streamPattern": "("}, "streamPattern"),
        ({"isolation": "serializable"}, "isolation"),
        ({"startingTimestamp": "1", "startingOffsetsByTimestamp": "{}"}, "startingTimestamp"),
        ({"maxOffsetsPerTrigger": "10"}, "maxOffsetsPerTrigger"),  # batch: streaming only
    ],
)
def test_bad_values_name_the_option(extra: dict[str, str], named: str) -> None:
    with pytest.raises(InvalidInputError, match=named):
        SourceOptions.parse({**BASE, **extra}, streaming=False)


def test_read_committed_isolation() -> None:
    assert parse(isolation="Read_Committed").isolation == "read_committed"
    assert parse(streaming=True, isolation="read_committed").isolation == "read_committed"


def test_exactly_once_sink_options() -> None:
    opts = SinkOptions.parse({"brokers": "h:1", "exactlyOnce": "true"}, streaming=True)
    assert opts.exactly_once
    assert not opts.idempotent
    assert opts.write_id is None  # batch writes get a job id from the writer
    assert not SinkOptions.parse({"brokers": "h:1"}).exactly_once
    with pytest.raises(InvalidInputError, match="exactlyOnce"):
        SinkOptions.parse({"brokers": "h:1", "exactlyOnce": "true", "ackPolicy": "none"})
    with pytest.raises(InvalidInputError, match="exactlyOnce"):
        SinkOptions.parse(
            {"brokers": "h:1", "stream": "s", "exactlyOnce": "true", "idempotent": "true"},
            streaming=True,
        )
    with pytest.raises(InvalidInputError, match="exactlyOnce"):
        SinkOptions.parse({"brokers": "h:1", "exactlyOnce": "maybe"})


def test_a_journal_record_round_trips_and_garbage_is_refused() -> None:
    from liftbridge_client.exactly_once.publisher import AckIntent
    from liftbridge_client.spark._journal import JOURNAL_PREFIX, Record, journal_stream

    intents = tuple(AckIntent(f"s{i % 3}", i % 5, bytes([i]) * 16) for i in range(200))
    record = Record("query-1", 7, intents)
    assert Record.decode(record.encode()) == record
    assert len(record.encode()) < 200 * 40  # compressed: a large job's record stays small
    names = {journal_stream(w) for w in ("q", "q ", "Q", "a,b", "x" * 500)}
    assert len(names) == 5
    assert all(n.startswith(JOURNAL_PREFIX) and n.isascii() and len(n) < 64 for n in names)
    for garbage in (b"", b"not zlib", zlib.compress(b"[]"), zlib.compress(b'{"write": 1}')):
        with pytest.raises(errors.PayloadDecodeError, match="journal record"):
            Record.decode(garbage)


def test_a_rollback_intent_acks_the_same_producer_at_the_base_clock() -> None:
    from liftbridge_client.exactly_once.publisher import AckIntent
    from liftbridge_client.exactly_once.uuids import Flags, fields_of
    from liftbridge_client.spark._journal import CLOCK_BASE, rollback_intent

    producer = bytes.fromhex("0b0c0d0e0f10")
    commit = AckIntent("s", 3, build_uuid_bytes(producer, CLOCK_BASE + 99, Flags.ACK_TXN))
    back = rollback_intent(commit)
    assert (back.stream, back.partition) == ("s", 3)
    assert fields_of(back.uuid) == (producer, CLOCK_BASE, Flags.ACK_TXN)


def _ids(
    ident: TaskIdentity,
    rows: list[tuple[bytes, bytes | None, int | None, dict[str, bytes] | None]],
    seen: dict[bytes, int],
) -> list[str]:
    values, keys, partitions, headers = (list(column) for column in zip(*rows, strict=True))
    return row_ids(ident, Columns(values, "s", keys, partitions, headers), seen)


def test_row_ids_do_not_depend_on_row_order() -> None:
    ident = TaskIdentity("query", 3, 1)
    rows: list[tuple[bytes, bytes | None, int | None, dict[str, bytes] | None]] = [
        (b"a", None, None, None),
        (b"b", b"k", 1, {"h": b"x"}),
        (b"a", None, None, None),
    ]
    ids = _ids(ident, rows, {})
    assert len(set(ids)) == 3  # identical rows get distinct ids by occurrence
    assert all(i.startswith("query/3/1/") for i in ids)
    reordered = _ids(ident, [rows[1], rows[0], rows[2]], {})
    assert set(reordered) == set(ids)
    seen: dict[bytes, int] = {}  # chunk by chunk gives the same ids as all at once
    assert _ids(ident, rows[:2], seen) + _ids(ident, rows[2:], seen) == ids
    assert _ids(TaskIdentity("query", 4, 1), rows, {}) != ids
    assert _ids(ident, [(b"a", b"", None, None)], {}) != _ids(ident, rows[:1], {})


def test_stream_and_pattern_exclude_each_other() -> None:
    with pytest.raises(InvalidInputError, match="exactly one"):
        SourceOptions.parse({"brokers": "h:1"}, streaming=False)
    with pytest.raises(InvalidInputError, match="exactly one"):
        parse(streamPattern="orders.*")
    opts = SourceOptions.parse({"brokers": "h:1", "streamPattern": "orders-.*"}, streaming=True)
    assert opts.matches("orders-eu")
    assert not opts.matches("x-orders-eu")


def test_streaming_rejects_batch_only_options() -> None:
    with pytest.raises(InvalidInputError, match="endingOffsets"):
        parse(streaming=True, endingOffsets="latest")
    assert parse(streaming=True, maxOffsetsPerTrigger="7").max_offsets_per_trigger == 7


def test_sink_options() -> None:
    opts = SinkOptions.parse({"brokers": "h:1", "ackPolicy": "ALL"})
    assert opts.ack_policy is AckPolicy.ALL
    assert opts.stream is None
    assert opts.transport is None
    with pytest.raises(InvalidInputError, match="natsServers"):
        SinkOptions.parse({"brokers": "h:1", "transport": "nats"})
    nats = SinkOptions.parse({"brokers": "h:1", "transport": "nats", "natsServers": "nats://h:4"})
    assert nats.transport is Transport.NATS
    with pytest.raises(InvalidInputError, match="writeId"):  # a name a rerun repeats
        SinkOptions.parse({"brokers": "h:1", "stream": "s", "idempotent": "true"})
    with pytest.raises(InvalidInputError, match="'stream'"):
        SinkOptions.parse({"brokers": "h:1", "idempotent": "true"}, streaming=True)
    with pytest.raises(InvalidInputError, match="ackPolicy"):
        SinkOptions.parse(
            {"brokers": "h:1", "stream": "s", "idempotent": "true", "ackPolicy": "none"},
            streaming=True,
        )
    assert SinkOptions.parse(
        {"brokers": "h:1", "stream": "s", "idempotent": "true"}, streaming=True
    ).idempotent
    for bad in ({"ackPolicy": "some"}, {"stream": "a,b"}, {"maxInflight": "0"}):
        with pytest.raises(InvalidInputError, match=next(iter(bad))):
            SinkOptions.parse({"brokers": "h:1", **bad})


def test_checkpointed_offsets_round_trip_through_json() -> None:
    offsets = {"orders": {"0": 4, "10": 7}}
    assert offsets_from_checkpoint(json.loads(json.dumps(offsets))) == offsets
    with pytest.raises(InvalidInputError):
        offsets_from_checkpoint({"orders": {"0": -1}})


def test_cap_by_backlog_shares_the_limit_by_backlog() -> None:
    start = {"s": {"0": 0, "1": 0, "2": 0}}
    latest = {"s": {"0": 60, "1": 25, "2": 5}}
    assert cap_by_backlog(start, latest, 20) == {"s": {"0": 13, "1": 6, "2": 1}}
    assert cap_by_backlog(start, latest, 1000) == latest


backlogs = st.dictionaries(
    st.sampled_from([str(i) for i in range(8)]),
    st.tuples(st.integers(0, 10_000), st.integers(0, 5_000)),
    min_size=1,
)


@given(backlogs, st.integers(1, 20_000))
def test_cap_by_backlog_takes_exactly_the_limit(
    parts: dict[str, tuple[int, int]], limit: int
) -> None:
    start = {"s": {p: begin for p, (begin, _) in parts.items()}}
    latest = {"s": {p: begin + size for p, (begin, size) in parts.items()}}
    capped = cap_by_backlog(start, latest, limit)
    total = sum(size for _, size in parts.values())
    taken = [capped["s"][p] - start["s"][p] for p in parts]
    assert sum(taken) == min(limit, total)
    for p, (begin, size) in parts.items():
        assert begin <= capped["s"][p] <= begin + size


def test_plan_ranges_one_spark_partition_per_partition() -> None:
    start = {"a": {"0": 0, "1": 5}, "b": {"0": 3}}
    end = {"a": {"0": 10, "1": 5}, "b": {"0": 4}}
    assert plan_ranges(start, end) == [
        PartitionRange("a", 0, 0, 10),
        PartitionRange("b", 0, 3, 4),
    ]


@given(
    st.lists(st.integers(0, 1000), min_size=1, max_size=6),
    st.one_of(st.none(), st.integers(1, 40)),
    st.one_of(st.none(), st.integers(1, 300)),
)
def test_plan_ranges_split_covers_each_range_exactly(
    sizes: list[int], min_partitions: int | None, max_records: int | None
) -> None:
    start = {"s": {str(i): 100 for i in range(len(sizes))}}
    end = {"s": {str(i): 100 + n for i, n in enumerate(sizes)}}
    pieces = plan_ranges(start, end, min_partitions=min_partitions, max_records=max_records)
    for i, size in enumerate(sizes):
        mine = [r for r in pieces if r.partition == i]
        covered = [o for r in mine for o in range(r.start, r.end)]
        assert covered == list(range(100, 100 + size))  # in order, no gap, no overlap
        if max_records is not None:
            assert all(r.size <= max_records for r in mine)
    total = sum(sizes)
    if min_partitions is not None and total >= min_partitions:
        assert len(pieces) >= min_partitions


def test_available_now_caps_at_the_target_and_holds_new_partitions() -> None:
    from liftbridge_client.spark._streaming import _up_to

    begin = {"s": {"0": 5, "1": 0, "2": 3}}
    latest = {"s": {"0": 50, "1": 8, "2": 9}}
    target = {"s": {"0": 20, "1": 30}}  # partition 2 appeared after the query started
    assert _up_to(begin, latest, target) == {"s": {"0": 20, "1": 8, "2": 3}}


def test_read_committed_offsets_carry_a_plan_not_the_producer_states() -> None:
    from liftbridge_client.spark._committed_stream import (
        NO_STATES,
        STATES_KEY,
        Plan,
        next_plan,
        split_offsets,
        with_plan,
    )

    offsets = {"orders": {"0": 3, "1": 7}}
    plan = Plan.new("states", offsets)
    carried = json.loads(json.dumps(with_plan(offsets, plan)))  # as Spark stores it
    assert isinstance(carried[STATES_KEY], str)
    back, restored = split_offsets(carried)
    assert back == offsets
    assert restored == plan
    assert restored.position("orders", 1) == NO_STATES
    # Partition 1 moves: its snapshot is searched from the states stream's end at planning;
    # partition 0 does not: it keeps its position, so an idle batch gives equal offsets.
    end = {"orders": {"0": 3, "1": 9}, "new": {"0": 0}}
    moved = next_plan(plan, offsets, end, 40)
    assert moved.positions == {"orders": {"0": NO_STATES, "1": 40}, "new": {"0": NO_STATES}}
    assert next_plan(moved, end, end, 99) == moved
    assert split_offsets(offsets) == (offsets, None)
    with pytest.raises(InvalidInputError, match=STATES_KEY):
        split_offsets({**offsets, STATES_KEY: 3})
    # The development format (states inline in the offsets) is refused, naming the fix.
    inline = json.dumps({"offsets": [], "producers": []})
    with pytest.raises(InvalidInputError, match="new checkpointLocation"):
        split_offsets({**offsets, STATES_KEY: inline})


def test_producer_state_snapshots_round_trip_in_parts_under_the_message_limit() -> None:
    from liftbridge_client.exactly_once.sequencer import PartitionRef, ProducerState
    from liftbridge_client.spark import _committed_stream as cs

    ref = PartitionRef("orders", 2)
    states = tuple(
        ProducerState(ref, i.to_bytes(6, "big"), (1 << 63) + i, -1 if i % 2 else i)
        for i in range(cs.PART_STATES * 2 + 5)
    )
    parts = cs.encode_states(states)
    assert len(parts) == 3
    assert all(len(p) < 1 << 20 for p in parts)
    assert cs.decode_states(ref, parts) == states
    assert cs.decode_states(ref, cs.encode_states(())) == ()


@pytest.mark.parametrize("option", ["committedStatesStream", "producerIdleHorizonMs"])
def test_read_committed_state_options_only_for_streaming_read_committed(option: str) -> None:
    base = {"brokers": "127.0.0.1:1", "stream": "s", option: "5"}
    with pytest.raises(InvalidInputError, match=option):
        SourceOptions.parse(base, streaming=True)
    with pytest.raises(InvalidInputError, match=option):
        SourceOptions.parse({**base, "isolation": "read_committed"}, streaming=False)
    parsed = SourceOptions.parse({**base, "isolation": "read_committed"}, streaming=True)
    if option == "producerIdleHorizonMs":
        assert parsed.idle_horizon_ns == 5_000_000
    else:
        assert parsed.states_stream == "5"


def test_task_stats_file_is_an_absolute_path_for_any_read() -> None:
    assert parse().task_stats is None
    assert parse(taskStatsFile=" /tmp/stats.jsonl ").task_stats == "/tmp/stats.jsonl"
    assert parse(True, taskStatsFile="/tmp/s").task_stats == "/tmp/s"
    for bad in ("stats.jsonl", "", "./s"):
        with pytest.raises(InvalidInputError, match=r"taskStatsFile.*absolute"):
            parse(taskStatsFile=bad)


def test_nats_credentials_stay_out_of_reprs() -> None:
    nats = {"natsServers": "nats://app:hunter2-SECRET@h:4222"}
    source = parse(False, **nats)
    sink = SinkOptions.parse({"brokers": "127.0.0.1:9292", "stream": "orders", **nats})
    assert source.nats_servers == sink.nats_servers == ("nats://app:hunter2-SECRET@h:4222",)
    assert "SECRET" not in repr(source)
    assert "SECRET" not in repr(sink)
