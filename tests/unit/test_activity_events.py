"""Decoding activity-stream messages into typed events (no server)."""

from __future__ import annotations

import pytest

from liftbridge_client import errors
from liftbridge_client._proto import api_pb2
from liftbridge_client.activity import (
    ActivityOp,
    GroupLeft,
    StreamPaused,
    UnknownActivity,
    decode_event,
)
from liftbridge_client.models import Message


def message(pb: api_pb2.ActivityStreamEvent, offset: int = 4) -> Message:
    return Message("__activity", 0, offset, pb.SerializeToString(), timestamp_ns=99)


def test_fields_offset_and_timestamp_are_kept() -> None:
    pb = api_pb2.ActivityStreamEvent(
        id=17,
        op=api_pb2.PAUSE_STREAM,
        pauseStreamOp=api_pb2.PauseStreamOp(stream="s", partitions=[2, 0], resumeAll=True),
    )
    event = decode_event(message(pb))
    assert event == StreamPaused(
        id=17, offset=4, timestamp_ns=99, stream="s", partitions=(2, 0), resume_all=True
    )
    assert event.op is ActivityOp.PAUSE_STREAM


def test_leave_carries_expired() -> None:
    pb = api_pb2.ActivityStreamEvent(
        id=3,
        op=api_pb2.LEAVE_CONSUMER_GROUP,
        leaveConsumerGroupOp=api_pb2.LeaveConsumerGroupOp(
            groupId="g", consumerId="c", expired=True
        ),
    )
    event = decode_event(message(pb))
    assert isinstance(event, GroupLeft)
    assert (event.group_id, event.consumer_id, event.expired) == ("g", "c", True)


def test_an_unknown_op_is_kept_raw() -> None:
    raw = api_pb2.ActivityStreamEvent(id=5).SerializeToString() + b"\x10\x2a"  # op = 42
    event = decode_event(Message("__activity", 0, 1, raw))
    assert isinstance(event, UnknownActivity)
    assert (event.op, event.raw, event.id) == (42, raw, 5)


def test_garbage_is_a_payload_decode_error() -> None:
    with pytest.raises(errors.PayloadDecodeError, match="offset 7"):
        decode_event(Message("__activity", 0, 7, b"\xff\xff\xff"))
