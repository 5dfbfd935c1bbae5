"""Subscription arguments, the wire request, and what each ending status means (no IO)."""

from __future__ import annotations

from typing import Any

import grpc
import grpc.aio
import hypothesis.strategies as st
import pytest
from hypothesis import given

from liftbridge_client import StartPosition, StopPosition, errors
from liftbridge_client._proto import api_pb2
from liftbridge_client._subscribe import Action, Phase, Progress, SubscribeSpec, classify
from liftbridge_client._transport.grpc import map_rpc_error

NOW = 1_700_000_000_000_000_000


def spec(**kw: Any) -> SubscribeSpec:
    return SubscribeSpec.build("s", 0, kw, now_ns=NOW)


def status(code: grpc.StatusCode, details: str) -> errors.ServerError:
    return map_rpc_error(
        grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details=details)
    )


# ---------------------------------------------------------------- positions


def test_defaults_are_new_only_until_cancelled() -> None:
    s = spec()
    assert (s.start, s.stop) == (StartPosition.NEW_ONLY, StopPosition.ON_CANCEL)
    req = s.request()
    assert req.startPosition == api_pb2.NEW_ONLY
    assert req.stopPosition == api_pb2.STOP_ON_CANCEL
    assert (req.stream, req.partition) == ("s", 0)


@pytest.mark.parametrize(
    ("kw", "start", "field", "value"),
    [
        ({"start_offset": 7}, StartPosition.OFFSET, "startOffset", 7),
        (
            {"start": StartPosition.OFFSET, "start_offset": 0},
            StartPosition.OFFSET,
            "startOffset",
            0,
        ),
        ({"start_timestamp_ns": 123}, StartPosition.TIMESTAMP, "startTimestamp", 123),
        ({"start_time_delta": 1.5}, StartPosition.TIMESTAMP, "startTimestamp", NOW - 1_500_000_000),
        ({"start": StartPosition.EARLIEST}, StartPosition.EARLIEST, "startOffset", 0),
        ({"start": StartPosition.LATEST}, StartPosition.LATEST, "startOffset", 0),
    ],
)
def test_start_positions(kw: dict[str, Any], start: StartPosition, field: str, value: int) -> None:
    s = spec(**kw)
    assert s.start is start
    req = s.request()
    assert req.startPosition == start.value
    assert getattr(req, field) == value


@pytest.mark.parametrize(
    ("kw", "stop", "field", "value"),
    [
        ({"stop_offset": 9}, StopPosition.OFFSET, "stopOffset", 9),
        ({"stop_timestamp_ns": 55}, StopPosition.TIMESTAMP, "stopTimestamp", 55),
        ({"stop": StopPosition.LATEST}, StopPosition.LATEST, "stopOffset", 0),
    ],
)
def test_stop_positions(kw: dict[str, Any], stop: StopPosition, field: str, value: int) -> None:
    s = spec(**kw)
    assert s.stop is stop
    req = s.request()
    assert req.stopPosition == stop.value
    assert getattr(req, field) == value


def test_flags_reach_the_request_and_reverse_is_field_12() -> None:
    req = spec(read_isr_replica=True, resume=True, reverse=True).request()
    assert (req.readISRReplica, req.resume, req.reverse) == (True, True, True)
    assert api_pb2.SubscribeRequest.DESCRIPTOR.fields_by_name["reverse"].number == 12
    assert req.SerializeToString().endswith(b"\x60\x01")  # tag 12, varint 1


def test_resubscribe_request_starts_at_an_offset_and_keeps_the_rest() -> None:
    s = spec(start_time_delta=10, stop_offset=100, read_isr_replica=True)
    req = s.request(resume_at=42)
    assert (req.startPosition, req.startOffset, req.startTimestamp) == (api_pb2.OFFSET, 42, 0)
    assert (req.stopPosition, req.stopOffset, req.readISRReplica) == (
        api_pb2.STOP_OFFSET,
        100,
        True,
    )


def test_resume_forward_reverse_and_after_the_stop_offset() -> None:
    def after(s: SubscribeSpec, *delivered: int) -> int | None:
        progress = Progress(s.reverse)
        for offset in delivered:
            progress.accept(offset)
        return progress.resume_at(s)

    assert after(spec(), 4) == 5
    assert after(spec(stop_offset=4), 3) == 4
    assert after(spec(stop_offset=4), 4) is None
    assert after(spec(reverse=True), 4) == 3  # order not seen yet: as asked
    assert after(spec(reverse=True), 5, 4) == 3
    assert after(spec(reverse=True), 1, 0) is None
    # A server that ignores reverse (v1.9.0) sends ascending offsets: resume forward.
    assert after(spec(reverse=True), 4, 5) == 6
    with pytest.raises(ValueError, match="original position"):
        after(spec())


@pytest.mark.parametrize(
    ("reverse", "offsets", "accepted"),
    [
        (False, [0, 1, 1, 0, 2], [0, 1, 2]),
        (True, [9, 8, 8, 9, 7], [9, 8, 7]),
        (True, [0, 1, 1, 0, 2], [0, 1, 2]),  # reverse ignored by the server: learned
        (True, [5, 5, 4], [5, 4]),
    ],
)
def test_replays_are_dropped(reverse: bool, offsets: list[int], accepted: list[int]) -> None:
    progress = Progress(reverse)
    assert [o for o in offsets if progress.accept(o)] == accepted
    assert progress.last == accepted[-1]


@pytest.mark.parametrize(
    ("kw", "fragment"),
    [
        ({"start": StartPosition.OFFSET}, "needs start_offset"),
        ({"start_offset": -1}, "start_offset must be >= 0"),
        ({"start_offset": True}, "must be an int"),
        ({"start_offset": 1.0}, "must be an int"),
        ({"start": StartPosition.EARLIEST, "start_offset": 3}, "conflicts with start=EARLIEST"),
        ({"start_offset": 1, "start_timestamp_ns": 2}, "conflicting start options"),
        ({"start_timestamp_ns": 1, "start_time_delta": 2}, "conflicting start options"),
        (
            {"start": StartPosition.TIMESTAMP},
            "needs start_timestamp_ns, start_time or start_time_delta",
        ),
        ({"start_timestamp_ns": -5}, "start_timestamp_ns must be >= 0"),
        ({"start_time_delta": -1}, "start_time_delta must be >= 0"),
        ({"start_time_delta": float("nan")}, "start_time_delta must be >= 0"),
        ({"start": 99}, "no StartPosition 99"),
        ({"start": "EARLIEST"}, "start must be a StartPosition"),
        ({"stop": StopPosition.OFFSET}, "needs stop_offset"),
        ({"stop_offset": -2}, "stop_offset must be >= 0"),
        ({"start_offset": 10, "stop_offset": 9}, "stop_offset 9 is before start_offset 10"),
        ({"stop": StopPosition.LATEST, "stop_offset": 3}, "conflicts with stop=LATEST"),
        ({"stop_offset": 3, "stop_timestamp_ns": 4}, "conflicting stop options"),
        ({"stop": StopPosition.TIMESTAMP}, "needs stop_timestamp_ns"),
        ({"start_timestamp_ns": 10, "stop_timestamp_ns": 9}, "is before the start timestamp"),
        ({"reverse": True, "stop": StopPosition.LATEST}, "reverse"),
        ({"reverse": 1}, "reverse must be a bool"),
        ({"resume": "yes"}, "resume must be a bool"),
        ({"startOffset": 3}, "unknown subscribe option(s): startOffset"),
    ],
)
def test_invalid_arguments(kw: dict[str, Any], fragment: str) -> None:
    with pytest.raises(errors.InvalidInputError) as info:
        spec(**kw)
    assert fragment in str(info.value)


@pytest.mark.parametrize(
    ("stream", "partition"), [("", 0), ("s", -1), ("s", 2**31), (None, 0), ("s", True)]
)
def test_invalid_stream_or_partition(stream: Any, partition: Any) -> None:
    with pytest.raises(errors.InvalidInputError):
        SubscribeSpec.build(stream, partition, {}, now_ns=NOW)


# ---------------------------------------------------------------- outcomes

OK_ = grpc.StatusCode
CASES: list[tuple[dict[str, Any], Phase, grpc.StatusCode, str, Action, type[Exception]]] = [
    (
        {"stop_offset": 3},
        Phase.STREAMING,
        OK_.RESOURCE_EXHAUSTED,
        "Stop offset reached",
        Action.END,
        errors.StopPositionReached,
    ),
    (
        {"stop": StopPosition.LATEST},
        Phase.OPENING,
        OK_.RESOURCE_EXHAUSTED,
        "Stream is empty",
        Action.END,
        errors.StopPositionReached,
    ),
    (
        {},
        Phase.STREAMING,
        OK_.RESOURCE_EXHAUSTED,
        "Stop offset reached",
        Action.END,
        errors.ReadonlyPartitionEnd,
    ),
    (
        {},
        Phase.STREAMING,
        OK_.RESOURCE_EXHAUSTED,
        "End of readonly partition",
        Action.END,
        errors.ReadonlyPartitionEnd,
    ),
    (
        {},
        Phase.OPENING,
        OK_.INVALID_ARGUMENT,
        "Stop offset is before start offset: 2 < 3",
        Action.END,
        errors.ReadonlyPartitionEnd,
    ),
    (
        {"stop": StopPosition.LATEST},
        Phase.OPENING,
        OK_.INVALID_ARGUMENT,
        "Stop offset is before start offset: 2 < 3",
        Action.END,
        errors.StopPositionReached,
    ),
    (
        {"stop_timestamp_ns": 5},
        Phase.RESUBSCRIBING,
        OK_.INVALID_ARGUMENT,
        "Stop offset is before start offset: 2 < 3",
        Action.END,
        errors.StopPositionReached,
    ),
    (
        {"stop_timestamp_ns": 5},
        Phase.OPENING,
        OK_.INVALID_ARGUMENT,
        "Stop offset is before start offset: 2 < 3",
        Action.FAIL,
        errors.InvalidArgumentError,
    ),
    (  # v1.9.0 refuses a stop time older than the log: nothing to read
        {"stop_timestamp_ns": 5},
        Phase.OPENING,
        OK_.INTERNAL,
        "Failed to lookup offset for timestamp: timestamp is before the beginning of the log",
        Action.END,
        errors.StopPositionReached,
    ),
    (  # the same text without a stop time is not ours to explain
        {"start_timestamp_ns": 5},
        Phase.OPENING,
        OK_.INTERNAL,
        "Failed to lookup offset for timestamp: timestamp is before the beginning of the log",
        Action.FAIL,
        errors.InternalServerError,
    ),
    ({}, Phase.OPENING, OK_.NOT_FOUND, "No such partition", Action.FAIL, errors.NotFoundError),
    (
        {},
        Phase.STREAMING,
        OK_.NOT_FOUND,
        "commit log was deleted",
        Action.END_RAISE,
        errors.StreamDeletedEnd,
    ),
    (  # a restarting broker says so too: the subscription checks the metadata
        {},
        Phase.RESUBSCRIBING,
        OK_.NOT_FOUND,
        "No such partition",
        Action.CHECK_DELETED,
        errors.StreamDeletedEnd,
    ),
    (
        {},
        Phase.STREAMING,
        OK_.NOT_FOUND,
        "No such partition",
        Action.CHECK_DELETED,
        errors.StreamDeletedEnd,
    ),
    (
        {},
        Phase.STREAMING,
        OK_.FAILED_PRECONDITION,
        "commit log was closed",
        Action.END_RAISE,
        errors.PartitionPausedEnd,
    ),
    (
        {},
        Phase.OPENING,
        OK_.INTERNAL,
        "Failed to create stream reader: segment has been closed",
        Action.CHECK_PAUSED,  # paused, or retention closed the segment: the metadata says
        errors.PartitionPausedEnd,
    ),
    (
        {},
        Phase.OPENING,
        OK_.FAILED_PRECONDITION,
        "Server not partition leader",
        Action.RESUBSCRIBE,
        errors.NotLeaderError,
    ),
    (
        {},
        Phase.STREAMING,
        OK_.UNAVAILABLE,
        "Socket closed",
        Action.RESUBSCRIBE,
        errors.UnavailableError,
    ),
    (
        {},
        Phase.STREAMING,
        OK_.INTERNAL,
        "commit log was closed",
        Action.RESUBSCRIBE,
        errors.InternalServerError,
    ),
    (
        {"reverse": True},
        Phase.STREAMING,
        OK_.UNKNOWN,
        "EOF",
        Action.END,
        errors.StopPositionReached,
    ),
    ({}, Phase.STREAMING, OK_.UNKNOWN, "EOF", Action.FAIL, errors.UnknownServerError),
    (  # seen by the soak after a leader kill: the server lost its reader, not the partition
        {},
        Phase.STREAMING,
        OK_.UNKNOWN,
        "failed to reinitialize reader: segment not found",
        Action.RESUBSCRIBE,
        errors.UnknownServerError,
    ),
    (
        {},
        Phase.STREAMING,
        OK_.RESOURCE_EXHAUSTED,
        "other",
        Action.FAIL,
        errors.ResourceExhaustedError,
    ),
    ({}, Phase.STREAMING, OK_.CANCELLED, "", Action.FAIL, errors.RequestCancelledError),
]


@pytest.mark.parametrize(("kw", "phase", "code", "details", "action", "kind"), CASES)
def test_classify(
    kw: dict[str, Any],
    phase: Phase,
    code: grpc.StatusCode,
    details: str,
    action: Action,
    kind: type[Exception],
) -> None:
    cause = status(code, details)
    verdict = classify(cause, spec(**kw), phase)
    assert verdict.action is action
    assert type(verdict.error) is kind
    if isinstance(verdict.error, errors.SubscriptionEnded):
        assert verdict.error.__cause__ is cause
        assert "s/0" in str(verdict.error)


def test_client_side_timeouts_resubscribe() -> None:
    for exc in (
        errors.LiftbridgeTimeoutError("no handshake"),
        errors.NoBrokerAvailableError("none"),
    ):
        assert classify(exc, spec(), Phase.RESUBSCRIBING).action is Action.RESUBSCRIBE


# ---------------------------------------------------------------- properties of Progress


@given(
    start=st.integers(min_value=0, max_value=50),
    segments=st.lists(
        st.tuples(st.integers(min_value=0, max_value=20), st.integers(min_value=0, max_value=30)),
        min_size=1,
        max_size=12,
    ),
)
def test_progress_never_delivers_a_duplicate_or_a_gap_after_any_replay(
    start: int, segments: list[tuple[int, int]]
) -> None:
    """Forward reads broken at arbitrary points; each subscribe's server may replay from
    any earlier offset (at-least-once; the first one too: v1.9.0 starts a read asked for an
    offset past its high watermark at the watermark). What is accepted is exactly start,
    start+1, ..."""
    spec = SubscribeSpec.build("s", 0, {"start_offset": start}, now_ns=0)
    progress = Progress.for_spec(spec)
    accepted: list[int] = []
    for replay, length in segments:
        resume: int | None
        if progress.last is None:
            resume, back = start, replay  # the original position, maybe rewound
        else:
            resume, back = progress.resume_at(spec), replay
        assert resume is not None
        sent = range(max(resume - back, 0), resume + length)
        accepted.extend(offset for offset in sent if progress.accept(offset))
    assert accepted == list(range(start, start + len(accepted)))


@given(
    newest=st.integers(min_value=0, max_value=60),
    segments=st.lists(
        st.tuples(st.integers(min_value=0, max_value=10), st.integers(min_value=0, max_value=20)),
        min_size=1,
        max_size=10,
    ),
)
def test_progress_reversed_never_delivers_a_duplicate_or_a_gap(
    newest: int, segments: list[tuple[int, int]]
) -> None:
    spec = SubscribeSpec.build("s", 0, {"start_offset": newest, "reverse": True}, now_ns=0)
    progress = Progress(spec.reverse)
    accepted: list[int] = []
    for replay, length in segments:
        resume: int | None
        if progress.last is None:
            resume, back = newest, 0  # the first read starts where it was asked to
        else:
            resume, back = progress.resume_at(spec), replay
        if resume is None:
            break  # offset 0 was delivered: nothing is left
        sent = range(min(resume + back, newest), max(resume - length, -1), -1)
        accepted.extend(offset for offset in sent if progress.accept(offset))
    assert accepted == list(range(newest, newest - len(accepted), -1))


@given(
    start=st.integers(min_value=0, max_value=50),
    span=st.integers(min_value=0, max_value=50),
    sent=st.lists(st.integers(min_value=0, max_value=120), max_size=40),
)
def test_progress_to_a_stop_offset_takes_nothing_past_it_and_keeps_the_first_past(
    start: int, span: int, sent: list[int]
) -> None:
    """A server sends on past a stop offset compaction removed: the first offset past it
    is kept as ``past`` (the end), and no offset past it is ever accepted."""
    stop = start + span
    spec = SubscribeSpec.build("s", 0, {"start_offset": start, "stop_offset": stop}, now_ns=0)
    progress = Progress.for_spec(spec)
    accepted = [offset for offset in sorted(sent) if progress.accept(offset)]
    assert accepted == sorted({o for o in sent if start <= o <= stop})
    beyond = sorted(o for o in sent if o > stop)
    assert progress.past == (beyond[0] if beyond else None)


@pytest.mark.parametrize(
    "args",
    [
        {"start_offset": 3},
        {"start_offset": 3, "stop": StopPosition.LATEST},
        {"start_offset": 9, "reverse": True},
    ],
)
def test_progress_has_no_ceiling_without_a_forward_stop_offset(args: dict[str, Any]) -> None:
    progress = Progress.for_spec(SubscribeSpec.build("s", 0, args, now_ns=0))
    assert progress.accept(2**62)
    assert progress.past is None


def test_not_found_on_opening_waits_only_for_a_stream_listed_lately() -> None:
    """Opening: the server's NOT_FOUND fails at once, unless the metadata judged it a
    restarted broker's (`StreamNotLoadedError`): then the partition is checked as for a
    deletion, and the error once proven gone is a plain NotFoundError."""
    spec = SubscribeSpec.build("s", 0, {}, now_ns=0)
    plain = errors.NotFoundError("NOT_FOUND: No such partition", details="No such partition")
    assert classify(plain, spec, Phase.OPENING).action is Action.FAIL
    judged = errors.StreamNotLoadedError(str(plain), details=plain.details)
    verdict = classify(judged, spec, Phase.OPENING)
    assert verdict.action is Action.CHECK_DELETED
    assert type(verdict.error) is errors.NotFoundError
    assert verdict.error.__cause__ is judged
    assert "s/0" in str(verdict.error)
    # Once streaming, NOT_FOUND of either kind is a possible deletion.
    for exc in (plain, judged):
        verdict = classify(exc, spec, Phase.STREAMING)
        assert verdict.action is Action.CHECK_DELETED
        assert isinstance(verdict.error, errors.StreamDeletedEnd)
