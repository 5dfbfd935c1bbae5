"""Protobuf becomes immutable public types in one place (models.py)."""

from __future__ import annotations

import copy
import dataclasses
import pickle
from datetime import UTC, datetime
from typing import Any

import pytest

from liftbridge_client._proto import api_pb2
from liftbridge_client.errors import PayloadDecodeError
from liftbridge_client.features import PROBED_RPCS, Observation, Version, decide
from liftbridge_client.models import (
    Ack,
    AckPolicy,
    EventTimestamps,
    Message,
    ack_from_proto,
    ack_from_wire,
    message_from_proto,
    metadata_from_proto,
    owned_message_from_proto,
)


def test_ack_conversion() -> None:
    pb = api_pb2.Ack(
        stream="s",
        partitionSubject="subj",
        msgSubject="subj.1",
        offset=41,
        ackInbox="inbox",
        correlationId="c",
        ackPolicy=api_pb2.ALL,
        receptionTimestamp=1_700_000_000_000_000_000,
        commitTimestamp=1_700_000_000_500_000_000,
    )
    ack = ack_from_proto(pb)
    assert (ack.stream, ack.offset, ack.correlation_id, ack.msg_subject) == ("s", 41, "c", "subj.1")
    assert ack.ack_policy is AckPolicy.ALL
    assert ack.commit_time == datetime(2023, 11, 14, 22, 13, 20, 500000, tzinfo=UTC)
    with pytest.raises(dataclasses.FrozenInstanceError):
        ack.offset = 1  # type: ignore[misc]


def test_message_conversion_copies_headers_read_only() -> None:
    pb = api_pb2.Message(offset=3, key=b"k", value=b"v", stream="s", partition=2, timestamp=5)
    pb.headers["h"] = b"x"
    msg = message_from_proto(pb)
    pb.headers["h"] = b"changed"
    assert msg.headers == {"h": b"x"}
    with pytest.raises(TypeError):
        msg.headers["h"] = b"y"  # type: ignore[index]
    assert (msg.offset, msg.key, msg.value, msg.partition) == (3, b"k", b"v", 2)
    assert message_from_proto(api_pb2.Message()).headers == {}


@pytest.mark.parametrize("convert", [message_from_proto, owned_message_from_proto])
def test_message_conversion_maps_every_field(convert: Any) -> None:
    # Fields are passed positionally (message_from_proto) or set slot by slot
    # (owned_message_from_proto): guard both against Message's fields.
    pb = api_pb2.Message(
        stream="s",
        partition=2,
        offset=3,
        value=b"v",
        key=b"k",
        timestamp=5,
        subject="subj",
        replySubject="reply",
    )
    pb.headers["h"] = b"x"
    msg = convert(pb)
    expected = Message(
        stream="s",
        partition=2,
        offset=3,
        value=b"v",
        key=b"k",
        timestamp_ns=5,
        subject="subj",
        reply_subject="reply",
        headers={"h": b"x"},
    )
    assert msg == expected
    assert repr(msg).startswith("Message(stream='s', partition=2, offset=3, value=b'v', key=b'k'")
    assert pickle.loads(pickle.dumps(msg)) == expected
    with pytest.raises(dataclasses.FrozenInstanceError):
        msg.offset = 4
    assert dataclasses.replace(msg, offset=4).offset == 4
    assert [f.name for f in dataclasses.fields(Message)] == [
        "stream",
        "partition",
        "offset",
        "value",
        "key",
        "timestamp_ns",
        "subject",
        "reply_subject",
        "headers",
    ]


def _metadata_response() -> api_pb2.FetchMetadataResponse:
    resp = api_pb2.FetchMetadataResponse(brokers=[api_pb2.Broker(id="n1", host="h", port=9)])
    good = resp.streamMetadata.add(name="s", subject="subj", creationTimestamp=7)
    good.partitions[1].CopyFrom(
        api_pb2.PartitionMetadata(
            id=1,
            leader="n1",
            replicas=["n1"],
            isr=["n1"],
            highWatermark=4,
            newestOffset=4,
            paused=True,
            messagesReceivedTimestamps=api_pb2.PartitionEventTimestamps(
                firstTimestamp=1, latestTimestamp=2
            ),
        )
    )
    good.partitions[0].CopyFrom(api_pb2.PartitionMetadata(id=0, leader="n1"))
    resp.streamMetadata.add(name="missing", error=api_pb2.StreamMetadata.UNKNOWN_STREAM)
    resp.groupMetadata.add(groupId="g", coordinator="n1", epoch=3)
    return resp


def test_metadata_conversion() -> None:
    md = metadata_from_proto(_metadata_response())
    assert md.broker("n1") is not None
    assert md.brokers[0].address == "h:9"
    assert md.broker("zz") is None
    assert set(md.streams) == {"s"}  # unknown streams are left out
    stream = md.streams["s"]
    assert list(stream.partitions) == [0, 1]  # sorted by id
    p1 = stream.partitions[1]
    assert (p1.high_watermark, p1.paused, p1.isr) == (4, True, ("n1",))
    assert p1.messages_received == EventTimestamps(first_ns=1, latest_ns=2)
    assert p1.pause_changed is None
    assert stream.partition_subject(0) == "subj"
    assert stream.partition_subject(2) == "subj.2"
    assert md.groups["g"].epoch == 3


@pytest.mark.parametrize(
    ("base", "msg", "partition"),
    [
        ("orders", "orders", 0),
        ("orders", "orders.2", 2),
        ("orders", "orders.17", 17),
        ("orders", "", -1),  # an error ack carries no subject
        ("", "", -1),
        ("orders", "other.2", -1),
        ("orders", "orders.x", -1),
        ("orders", "orders.\u0663", -1),  # a non-ASCII digit is not a partition number
    ],
)
def test_ack_partition_from_its_subjects(base: str, msg: str, partition: int) -> None:
    pb = api_pb2.Ack(stream="s", partitionSubject=base, msgSubject=msg, offset=1)
    assert ack_from_proto(pb).partition == partition


def test_owned_conversion_reads_headers_lazily_and_equals_the_copying_one() -> None:
    pb = api_pb2.Message(
        stream="s", offset=3, value=b"v", subject="a", headers={"subject": b"a", "reply": b""}
    )
    owned = owned_message_from_proto(pb)
    assert owned == message_from_proto(pb)
    assert dict(owned.headers) == {}  # both the server's: fields of the message
    assert owned.raw_headers == {"subject": b"a", "reply": b""}
    assert message_from_proto(pb).raw_headers == {"subject": b"a", "reply": b""}
    pb = api_pb2.Message(stream="s", value=b"v", subject="a", headers={"subject": b"a", "h": b"1"})
    owned = owned_message_from_proto(pb)
    assert dict(owned.headers) == {"h": b"1"}
    assert "subject" not in owned.headers
    assert len(owned.headers) == 1
    assert repr(owned.headers) == repr(dict(owned.headers))
    with pytest.raises(TypeError):
        owned.headers["x"] = b"y"  # type: ignore[index]
    assert owned_message_from_proto(api_pb2.Message()).headers == {}


def _wire_ack(**kw: object) -> api_pb2.Ack:
    fields: dict[str, object] = {
        "stream": "s",
        "partitionSubject": "subj",
        "msgSubject": "subj.2",
        "offset": 7,
        "ackInbox": "_INBOX.x",
        "correlationId": "c-1",
        "ackPolicy": api_pb2.ALL,
        "receptionTimestamp": 11,
        "commitTimestamp": 12,
    }
    fields.update(kw)
    return api_pb2.Ack(**fields)  # type: ignore[arg-type]


def test_an_ack_from_the_wire_equals_one_built_by_hand() -> None:
    wire = ack_from_proto(_wire_ack())
    built = Ack("s", "subj", "subj.2", 7, "_INBOX.x", "c-1", AckPolicy.ALL, 11, 12)
    assert wire == built
    assert hash(wire) == hash(built)
    assert wire != ack_from_proto(_wire_ack(offset=8))
    assert wire != ("s", "subj", "subj.2", 7, "_INBOX.x", "c-1", AckPolicy.ALL, 11, 12)
    assert repr(wire) == (
        "Ack(stream='s', partition_subject='subj', msg_subject='subj.2', offset=7, "
        "ack_inbox='_INBOX.x', correlation_id='c-1', ack_policy=<AckPolicy.ALL: 1>, "
        "reception_timestamp_ns=11, commit_timestamp_ns=12)"
    )
    assert wire.partition == 2
    assert pickle.loads(pickle.dumps(wire)) == wire
    match wire:
        case Ack(stream, _, _, offset):
            assert (stream, offset) == ("s", 7)
        case _:  # pragma: no cover - the match above must take it
            pytest.fail("Ack did not match positionally")


def test_an_ack_cannot_be_changed() -> None:
    ack = ack_from_proto(_wire_ack())
    with pytest.raises(dataclasses.FrozenInstanceError):
        ack.stream = "other"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        ack._decoded = api_pb2.Ack()
    with pytest.raises(dataclasses.FrozenInstanceError):
        ack._raw = b""
    with pytest.raises(dataclasses.FrozenInstanceError):
        del ack.offset
    with pytest.raises(AttributeError):
        ack.extra = 1
    assert ack.offset == 7


def test_an_ack_with_an_unknown_policy_is_refused() -> None:
    with pytest.raises(ValueError, match="AckPolicy"):
        ack_from_proto(_wire_ack(ackPolicy=7))
    with pytest.raises(ValueError, match="AckPolicy"):
        Ack("s", "s", "s", 0, "", "c", 7, 0, 0)  # type: ignore[arg-type]


def test_an_ack_from_wire_bytes_is_decoded_when_first_read() -> None:
    pb = _wire_ack()
    lazy = ack_from_wire(pb.SerializeToString())
    assert lazy._decoded is None  # nothing decoded yet
    assert lazy.offset == 7
    assert lazy._decoded == pb
    assert lazy._raw == b""  # the bytes are dropped once decoded
    again = ack_from_wire(pb.SerializeToString())
    assert again == ack_from_proto(_wire_ack())
    assert hash(again) == hash(ack_from_proto(_wire_ack()))
    assert repr(ack_from_wire(pb.SerializeToString())) == repr(ack_from_proto(_wire_ack()))
    assert pickle.loads(pickle.dumps(ack_from_wire(pb.SerializeToString()))) == again
    assert ack_from_wire(b"").offset == 0  # an empty Ack is every field's default


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (b"\x0a\x05ab", "bad ack"),  # a string field cut short
        (b"\xff\xff\xff", "bad ack"),
        (_wire_ack(ackPolicy=7).SerializeToString(), "unknown ack policy 7"),
    ],
)
def test_an_undecodable_wire_ack_raises_when_read(raw: bytes, why: str) -> None:
    ack = ack_from_wire(raw)
    assert repr(ack) == "Ack(<undecodable>)"
    with pytest.raises(PayloadDecodeError, match=why):
        _ = ack.offset
    with pytest.raises(PayloadDecodeError):
        _ = ack == ack_from_proto(_wire_ack())


def test_models_pickle_and_copy_and_stay_read_only() -> None:
    """Received messages, metadata and feature decisions hold read-only views, which
    pickle cannot take: they travel as dicts and come back read-only."""
    pb = api_pb2.Message(stream="s", offset=3, value=b"v", headers={"subject": b"a"})
    md = metadata_from_proto(_metadata_response())
    features = decide(
        "b1", Observation(rpcs=dict.fromkeys(PROBED_RPCS, True)), fallback=Version(1, 9, 0)
    )
    samples: list[Any] = [
        Message("s", 0, 1, b"v"),
        Message("s", 0, 1, b"v", headers={"h": b"x"}),
        message_from_proto(pb),
        owned_message_from_proto(pb),  # its headers not read yet: still the protobuf's map
        owned_message_from_proto(api_pb2.Message(stream="s")),
        md,
        md.streams["s"],
        features,
    ]
    for obj in samples:
        for again in (pickle.loads(pickle.dumps(obj)), copy.deepcopy(obj), copy.copy(obj)):
            assert type(again) is type(obj)
            assert again == obj
    again_md = pickle.loads(pickle.dumps(md))
    with pytest.raises(TypeError):
        again_md.streams["x"] = md.streams["s"]
    with pytest.raises(TypeError):
        again_md.streams["s"].partitions[5] = md.streams["s"].partitions[0]
    again_msg = pickle.loads(pickle.dumps(owned_message_from_proto(pb)))
    assert dict(again_msg.headers) == {"subject": b"a"}  # not the message's subject: kept
    server = api_pb2.Message(stream="s", subject="a", headers={"subject": b"a", "h": b"1"})
    again_msg = pickle.loads(pickle.dumps(owned_message_from_proto(server)))
    assert again_msg.headers == {"h": b"1"}
    assert again_msg.raw_headers == {"subject": b"a", "h": b"1"}
    with pytest.raises(TypeError):
        again_msg.headers["x"] = b"y"
    assert pickle.loads(pickle.dumps(features)).enabled == features.enabled


@pytest.mark.parametrize("owned", [True, False], ids=["owned", "copied"])
def test_only_the_servers_subject_and_reply_headers_are_left_out(owned: bool) -> None:
    convert = owned_message_from_proto if owned else message_from_proto
    cases = [
        # (subject, reply subject, stored headers) -> headers
        (("a", "", {"subject": b"a", "reply": b""}), {}),
        (("a", "r", {"subject": b"a", "reply": b"r", "k": b"v"}), {"k": b"v"}),
        # Not the message's subject or reply: a publisher's, kept (an older server, say).
        (("a", "", {"subject": b"b", "reply": b"x"}), {"subject": b"b", "reply": b"x"}),
        (("a", "", {"k": b"v"}), {"k": b"v"}),
        (("a", "", {}), {}),
    ]
    for (subject, reply, stored), headers in cases:
        pb = api_pb2.Message(stream="s", subject=subject, replySubject=reply, headers=stored)
        msg = convert(pb)
        assert dict(msg.headers) == headers
        assert dict(msg.raw_headers) == stored
        with pytest.raises(TypeError):
            msg.raw_headers["x"] = b"y"  # type: ignore[index]


def test_raw_headers_of_a_message_made_by_hand() -> None:
    msg = Message("s", 0, 1, b"v", headers={"subject": b"x"})
    assert msg.raw_headers is msg.headers
