"""The Sequencer's read-committed semantics, on hand-written cases and generated logs."""

from __future__ import annotations

import logging
from collections import Counter

import pytest
from budget import examples
from eo_logs import logs, run
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from liftbridge_client import errors
from liftbridge_client.exactly_once.sequencer import (
    Checkpoint,
    Envelope,
    PartitionRef,
    QueueOutcome,
    Sequencer,
)
from liftbridge_client.exactly_once.uuids import Flags, build_uuid

P0 = PartitionRef("s", 0)
A = bytes.fromhex("a1a2a3a4a5a6")
B = bytes.fromhex("b1b2b3b4b5b6")


class Log:
    """Appends messages to one partition and feeds them to a Sequencer."""

    def __init__(self, seq: Sequencer, partition: PartitionRef = P0) -> None:
        self.seq, self.partition, self.offset = seq, partition, 0
        self.entries: list[Envelope] = []

    def put(self, producer: bytes, clock: int, flags: Flags) -> tuple[QueueOutcome, list[int]]:
        env = Envelope(
            self.partition, self.offset, self.offset + 1, build_uuid(producer, clock, flags).bytes
        )
        self.offset += 1
        self.entries.append(env)
        outcome = self.seq.queue(env)
        if outcome is QueueOutcome.ACK_COMMIT_REPLAY:
            _, begin, end = self.seq.replay_range()
            self.seq.start_replay(e for e in self.entries if begin <= e.begin < end)
        out = []
        while (got := self.seq.step()) is not None:
            out.append(got.begin)
        return outcome, out


def test_outside_txn_commits_at_once_and_duplicates_are_dropped() -> None:
    log = Log(Sequencer())
    assert log.put(A, 10, Flags.OUTSIDE_TXN) == (QueueOutcome.OUTSIDE_COMMIT, [0])
    assert log.put(A, 10, Flags.OUTSIDE_TXN) == (QueueOutcome.OUTSIDE_ALREADY_ACKED, [])
    assert log.put(A, 9, Flags.OUTSIDE_TXN) == (QueueOutcome.OUTSIDE_ALREADY_ACKED, [])
    assert log.put(A, 11, Flags.OUTSIDE_TXN) == (QueueOutcome.OUTSIDE_COMMIT, [3])


def test_continue_txn_waits_for_ack_without_blocking_other_producers() -> None:
    log = Log(Sequencer())
    assert log.put(A, 1, Flags.CONTINUE_TXN) == (QueueOutcome.CONTINUE_BEGIN_SPAN, [])
    assert log.put(B, 1, Flags.OUTSIDE_TXN) == (QueueOutcome.OUTSIDE_COMMIT, [1])
    assert log.put(A, 2, Flags.CONTINUE_TXN) == (QueueOutcome.CONTINUE_EXTEND_SPAN, [])
    assert log.put(A, 2, Flags.CONTINUE_TXN) == (QueueOutcome.CONTINUE_TXN_CLOCK_LARGER, [])
    # The ACK commits the held messages and itself (acks are filtered by readers).
    assert log.put(A, 3, Flags.ACK_TXN) == (QueueOutcome.ACK_COMMIT_RING, [0, 2, 4])
    assert log.put(A, 2, Flags.CONTINUE_TXN) == (QueueOutcome.CONTINUE_ALREADY_ACKED, [])
    assert log.put(A, 3, Flags.ACK_TXN) == (QueueOutcome.ACK_ROLLBACK, [])  # re-written ack


def test_a_gap_in_a_producers_clocks_loses_the_resent_message() -> None:
    # Why a producer keeps one message in flight (docs/spark.md, "Why one row at a time
    # per producer"): had clock 12 been stored while clock 11 was lost, the resend of 11
    # (same UUID, as a retried Spark task sends it) lands after 12 and is dropped, and the
    # ACK then commits the transaction without it.
    log = Log(Sequencer())
    assert log.put(A, 10, Flags.CONTINUE_TXN) == (QueueOutcome.CONTINUE_BEGIN_SPAN, [])
    assert log.put(A, 12, Flags.CONTINUE_TXN) == (QueueOutcome.CONTINUE_EXTEND_SPAN, [])
    assert log.put(A, 10, Flags.CONTINUE_TXN) == (QueueOutcome.CONTINUE_TXN_CLOCK_LARGER, [])
    assert log.put(A, 11, Flags.CONTINUE_TXN) == (QueueOutcome.CONTINUE_TXN_CLOCK_LARGER, [])
    assert log.put(A, 12, Flags.CONTINUE_TXN) == (QueueOutcome.CONTINUE_TXN_CLOCK_LARGER, [])
    assert log.put(A, 13, Flags.ACK_TXN) == (QueueOutcome.ACK_COMMIT_RING, [0, 1, 5])


def test_ack_with_smaller_clock_commits_only_up_to_it() -> None:
    log = Log(Sequencer())
    log.put(A, 1, Flags.CONTINUE_TXN)
    log.put(A, 5, Flags.CONTINUE_TXN)
    assert log.put(A, 3, Flags.ACK_TXN) == (QueueOutcome.ACK_COMMIT_RING, [0, 2])


def test_rollback_discards_the_open_transaction() -> None:
    log = Log(Sequencer())
    log.put(A, 1, Flags.OUTSIDE_TXN)
    log.put(A, 2, Flags.CONTINUE_TXN)
    log.put(A, 3, Flags.CONTINUE_TXN)
    assert log.put(A, 1, Flags.ACK_TXN) == (QueueOutcome.ACK_ROLLBACK, [])
    assert log.put(A, 4, Flags.ACK_TXN) == (QueueOutcome.ACK_EMPTY, [4])  # nothing held


def test_small_ring_asks_for_a_replay_of_the_exact_range() -> None:
    seq = Sequencer(buffer=2)
    log = Log(seq)
    log.put(A, 1, Flags.CONTINUE_TXN)
    log.put(B, 1, Flags.OUTSIDE_TXN)
    log.put(A, 2, Flags.CONTINUE_TXN)
    log.put(B, 2, Flags.OUTSIDE_TXN)
    outcome, out = log.put(A, 3, Flags.ACK_TXN)
    assert outcome is QueueOutcome.ACK_COMMIT_REPLAY
    assert out == [0, 2, 4]


def test_step_without_the_required_replay_is_a_typed_error() -> None:
    seq = Sequencer(buffer=1)
    seq.queue(Envelope(P0, 0, 1, build_uuid(A, 1, Flags.CONTINUE_TXN).bytes))
    seq.queue(Envelope(P0, 1, 2, build_uuid(B, 1, Flags.CONTINUE_TXN).bytes))
    assert seq.queue(Envelope(P0, 2, 3, build_uuid(A, 2, Flags.ACK_TXN).bytes)) is (
        QueueOutcome.ACK_COMMIT_REPLAY
    )
    assert seq.replay_range() == (P0, 0, 2)
    with pytest.raises(errors.ReplayMismatchError, match="replay"):
        seq.step()
    seq.start_replay([Envelope(PartitionRef("other", 0), 0, 1, bytes(16))])
    with pytest.raises(errors.ReplayMismatchError, match="wrong partition"):
        seq.step()


def test_queue_before_draining_is_refused() -> None:
    seq = Sequencer()
    seq.queue(Envelope(P0, 0, 1, build_uuid(A, 1, Flags.OUTSIDE_TXN).bytes))
    with pytest.raises(errors.InvalidInputError, match="step"):
        seq.queue(Envelope(P0, 1, 2, build_uuid(A, 2, Flags.OUTSIDE_TXN).bytes))


def test_checkpoint_round_trips_through_bytes_and_resumes() -> None:
    seq = Sequencer()
    log = Log(seq)
    log.put(A, 1, Flags.OUTSIDE_TXN)
    log.put(A, 2, Flags.CONTINUE_TXN)
    checkpoint = seq.checkpoint()
    assert checkpoint.offsets == {P0: 2}
    assert [(s.producer, s.last_ack, s.begin) for s in checkpoint.states] == [(A, 1, 1)]
    restored = Checkpoint.from_bytes(checkpoint.to_bytes())
    assert restored == checkpoint
    # A new reader from offset 2 meets the ACK: the open span (offset 1) needs a replay.
    seq2 = Sequencer(restored)
    assert seq2.queue(Envelope(P0, 2, 3, build_uuid(A, 3, Flags.ACK_TXN).bytes)) is (
        QueueOutcome.ACK_COMMIT_REPLAY
    )
    assert seq2.replay_range() == (P0, 1, 2)


def test_checkpoint_prunes_producers_older_than_the_horizon() -> None:
    seq = Sequencer()
    log = Log(seq)
    second = 10_000_000 << 4  # one second of clock
    log.put(A, 5 * second, Flags.OUTSIDE_TXN)
    log.put(B, 1 * second, Flags.OUTSIDE_TXN)
    kept = seq.checkpoint(prune_horizon_ns=2_000_000_000)
    assert [s.producer for s in kept.states] == [A]


def test_checkpoint_prunes_nothing_when_the_newest_clock_is_within_the_horizon() -> None:
    seq = Sequencer()
    log = Log(seq)
    log.put(A, 10 << 4, Flags.OUTSIDE_TXN)  # clocks far below a week of ticks
    log.put(B, 3 << 4, Flags.OUTSIDE_TXN)
    kept = seq.checkpoint(prune_horizon_ns=7 * 24 * 3600 * 10**9)
    assert [s.producer for s in kept.states] == sorted([A, B])


def test_bad_checkpoint_is_a_typed_error() -> None:
    with pytest.raises(errors.InvalidInputError, match="checkpoint"):
        Checkpoint.from_json('{"offsets": 3}')
    with pytest.raises(errors.InvalidInputError, match="checkpoint"):
        Checkpoint.from_bytes(b'{"offsets": ' * 100_000)  # json recursion


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@settings(max_examples=examples(200), deadline=None)
@given(logs(zero_producer=False), st.integers(1, 6))
def test_committed_output_has_no_duplicate_uuids(log: list[dict[str, object]], buffer: int) -> None:
    records = _Records()
    seq_log = logging.getLogger("liftbridge_client.exactly_once.sequencer")
    seq_log.addHandler(records)
    try:
        events = run(log, buffer)
    finally:
        seq_log.removeHandler(records)
    # An ACK below the producer's last ACK means its checkpoint went back in time: Gazette
    # documents the fall back to at-least-once, so duplicates are then expected.
    assume(not any("below the last ACK" in m for m in records.messages))
    committed = Counter(
        (j, log_uuid)
        for event in events
        for j, b in event["dequeued"]
        for log_uuid in [next(e["u"] for e in log if e["j"] == j and e["b"] == b)]
        if log_uuid != bytes(16).hex()
    )
    assert all(n == 1 for n in committed.values())


@settings(max_examples=examples(200), deadline=None)
@given(logs(zero_producer=False, monotonic=True), st.integers(1, 6), st.data())
def test_restart_from_a_checkpoint_continues_the_same_output(
    log: list[dict[str, object]], buffer: int, data: st.DataObject
) -> None:
    restart_at = data.draw(st.integers(0, len(log)))
    whole = [pair for event in run(log, buffer) for pair in event["dequeued"]]
    resumed = [pair for event in run(log, buffer, restart_at) for pair in event["dequeued"]]
    assert resumed == whole


@settings(max_examples=examples(200), deadline=None)
@given(logs(zero_producer=False), st.data())
def test_outside_txn_messages_in_clock_order_are_all_committed_once(
    log: list[dict[str, object]], data: st.DataObject
) -> None:
    # Keep only OUTSIDE_TXN entries: each first copy of a rising clock commits, once.
    outside = [e for e in log if int(str(e["u"])[16:20], 16) & 0x3FF == 0]
    committed = [tuple(pair) for event in run(outside, 4) for pair in event["dequeued"]]
    expected = []
    last: dict[tuple[str, str], int] = {}
    for e in outside:
        raw = bytes.fromhex(str(e["u"]))
        clock = int.from_bytes(raw[0:4], "big") << 4 | (raw[8] >> 2) & 0xF
        key = (str(e["j"]), raw[10:].hex())
        if clock == 0 and raw == bytes(16):
            expected.append((e["j"], e["b"]))
        elif clock > last.get(key, clock - 1):
            last[key] = clock
            expected.append((e["j"], e["b"]))
    assert committed == expected


def _committed_with_cut(log: list[dict[str, object]], buffer: int, cut: int) -> list[list[object]]:
    """Committed (partition, offset) pairs when the reader checkpoints after its ``cut``-th
    committed message (possibly inside a sequence) and a new Sequencer resumes from it."""
    from eo_logs import _env

    out: list[list[object]] = []
    seq = Sequencer(buffer=buffer)

    def feed(entries: list[dict[str, object]], limit: int | None) -> bool:
        for entry in entries:
            if seq.queue(_env(entry)) is QueueOutcome.ACK_COMMIT_REPLAY:
                ref, begin, end = seq.replay_range()
                seq.start_replay(
                    _env(e) for e in log if e["j"] == str(ref) and begin <= int(str(e["b"])) < end
                )
            while (env := seq.step()) is not None:
                out.append([str(env.partition), env.begin])
                if limit is not None and len(out) == limit:
                    return True
        return False

    if not feed(log, cut):
        return out
    checkpoint = Checkpoint.from_bytes(seq.checkpoint().to_bytes())
    seq = Sequencer(checkpoint, buffer=buffer)
    offsets = {str(ref): o for ref, o in checkpoint.offsets.items()}
    feed([e for e in log if int(str(e["b"])) >= offsets.get(str(e["j"]), 0)], None)
    return out


@settings(max_examples=examples(200), deadline=None)
@given(logs(zero_producer=False, monotonic=True), st.integers(1, 6), st.data())
def test_checkpoint_after_any_committed_message_resumes_exactly(
    log: list[dict[str, object]], buffer: int, data: st.DataObject
) -> None:
    # Rising clocks per producer, as publishers write them: with clocks going backwards in
    # a transaction, a replay can commit what the ring path ignored (Gazette does the same).
    whole = [pair for event in run(log, buffer) for pair in event["dequeued"]]
    cut = data.draw(st.integers(1, max(1, len(whole))))
    assert _committed_with_cut(log, buffer, cut) == whole


def test_an_ack_below_a_producer_that_committed_nothing_is_a_rollback_not_a_loss(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A writer restarted without a checkpoint rolls back its open span with a low clock
    # (ExactlyOncePublisher's rollback_open): nothing of it can come twice.
    log = Log(Sequencer())
    log.put(A, 50, Flags.CONTINUE_TXN)
    with caplog.at_level(logging.INFO, logger="liftbridge_client.exactly_once.sequencer"):
        assert log.put(A, 1, Flags.ACK_TXN) == (QueueOutcome.ACK_ROLLBACK, [])
    assert [r.levelno for r in caplog.records] == [logging.INFO]
    assert log.put(A, 60, Flags.CONTINUE_TXN) == (QueueOutcome.CONTINUE_BEGIN_SPAN, [])
    assert log.put(A, 61, Flags.ACK_TXN) == (QueueOutcome.ACK_COMMIT_RING, [2, 3])
    caplog.clear()
    # Once something is committed, an ACK below the last one is the loss Gazette logs.
    with caplog.at_level(logging.INFO, logger="liftbridge_client.exactly_once.sequencer"):
        assert log.put(A, 1, Flags.ACK_TXN) == (QueueOutcome.ACK_ROLLBACK, [])
    assert [r.levelno for r in caplog.records] == [logging.ERROR]
    assert "exactly-once is lost" in caplog.text


def test_served_messages_leave_the_ring_and_a_ring_the_size_of_the_range_never_replays() -> None:
    # 16 producers whose transactions interleave over the whole range (the Spark sink with
    # producersPerPartition=16): with a ring as large as the range, every commit is served
    # from memory; once served, the ring keeps nothing of them.
    producers = [bytes([0x01, i, 0, 0, 0, 0]) for i in range(16)]
    seq = Sequencer(buffer=16 * 50 + 16)
    log = Log(seq)
    outcomes = [
        log.put(p, clock, Flags.CONTINUE_TXN)[0] for clock in range(1, 51) for p in producers
    ]
    committed = []
    for p in producers:
        outcome, out = log.put(p, 51, Flags.ACK_TXN)
        outcomes.append(outcome)
        committed += out
    assert QueueOutcome.ACK_COMMIT_REPLAY not in outcomes
    assert len(committed) == 16 * 51  # every message, and each ACK
    assert sorted(committed) == list(range(16 * 51))
    assert all(slot is None for slot in seq._ring)


def test_outcomes_hash_by_identity_and_sets_of_them_work() -> None:
    from liftbridge_client.exactly_once.sequencer import COMMIT_OUTCOMES

    for outcome in QueueOutcome:
        assert hash(outcome) == object.__hash__(outcome)
        assert outcome == outcome  # noqa: PLR0124 - equal to itself only
        assert (outcome in COMMIT_OUTCOMES) is (
            outcome.name in {"OUTSIDE_COMMIT", "ACK_EMPTY", "ACK_COMMIT_RING", "ACK_COMMIT_REPLAY"}
        )
    assert len({*QueueOutcome, *QueueOutcome}) == len(QueueOutcome)
