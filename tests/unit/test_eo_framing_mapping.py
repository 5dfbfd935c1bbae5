"""Exactly-once framings and partition mappings (pure parts)."""

from __future__ import annotations

import random
import uuid
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from liftbridge_client import AckPolicy, errors
from liftbridge_client.exactly_once import framing, mapping
from liftbridge_client.exactly_once.publisher import (
    AckIntent,
    ExactlyOncePublisher,
    intents_from_json,
)

U = uuid.UUID("0123456789ab1cde9402a1a2a3a4a5a6")


def test_fixed_frame_layout() -> None:
    assert framing.encode_fixed_frame(b"\x08\x01") == bytes.fromhex("66339336020000000801")


@given(st.lists(st.binary(max_size=50), max_size=10))
def test_fixed_frames_read_back(payloads: list[bytes]) -> None:
    data = b"".join(framing.encode_fixed_frame(p) for p in payloads)
    frames = list(framing.FixedFrameReader(data))
    assert [f[framing.FIXED_FRAME_HEADER_LENGTH :] for f in frames] == payloads


def test_desync_is_reported_with_the_skipped_bytes_then_reading_resumes() -> None:
    frame = framing.encode_fixed_frame(b"ok")
    reader = framing.FixedFrameReader(b"junk!" + frame)
    with pytest.raises(errors.FrameDesyncError, match="desynchronised") as info:
        reader.next_frame()
    assert info.value.skipped == b"junk!"
    assert reader.next_frame() == frame
    assert reader.next_frame() is None


def test_fixed_framing_of_protobuf_messages_round_trips() -> None:
    from liftbridge_client._proto import api_pb2

    fixed = framing.FixedProtoFraming(api_pb2.Ack)
    ack = api_pb2.Ack(stream="s", offset=7)
    assert fixed.unmarshal(fixed.marshal(ack)) == ack
    with pytest.raises(errors.InvalidInputError, match="protobuf"):
        fixed.marshal(3.5)


def test_truncated_frame_is_a_typed_error() -> None:
    with pytest.raises(errors.TruncatedFrameError):
        framing.FixedFrameReader(framing.encode_fixed_frame(b"abcdef")[:-1]).next_frame()


def test_json_lines_escape_like_go_and_round_trip() -> None:
    assert (
        framing.encode_json_line({"b": "<&>", "a": 1}) == b'{"a":1,"b":"\\u003c\\u0026\\u003e"}\n'
    )
    jl = framing.framing_for(framing.CONTENT_TYPE_JSON_LINES)
    msg = framing.JsonMessage({"n": 1}, U)
    back = jl.unmarshal(jl.marshal(msg))
    assert back == msg
    assert jl.unmarshal(jl.acknowledgement(U, msg)).uuid == U
    with pytest.raises(errors.FramingError):
        jl.unmarshal(b"[1]\n")


def test_csv_quotes_like_go_and_round_trips() -> None:
    assert framing.encode_csv_record(["a", "b,c", " x", 'q"', ""]) == b'a,"b,c"," x","q""",\n'
    csv = framing.framing_for(framing.CONTENT_TYPE_CSV)
    record = framing.CsvRecord([str(U), "x,y", "z"])
    assert csv.unmarshal(csv.marshal(record)) == record
    assert csv.unmarshal(csv.acknowledgement(U, record)).fields == [str(U), "", ""]
    with pytest.raises(errors.FramingError, match="UUID"):
        csv.unmarshal(b"nope,1\n")


def test_unknown_content_type_is_a_typed_error() -> None:
    with pytest.raises(errors.InvalidInputError, match="content_type"):
        framing.framing_for("text/plain")


def test_fnv1a_32_known_values() -> None:
    assert mapping.fnv1a_32(b"") == 0x811C9DC5
    assert mapping.fnv1a_32(b"a") == 0xE40C292C
    assert mapping.fnv1a_32(b"foobar") == 0xBF9CF968


def test_rendezvous_moves_only_the_keys_of_an_added_partition() -> None:
    rendezvous = mapping.RendezvousMapping()
    keys = [b"k%d" % i for i in range(2000)]
    before = {k: rendezvous.choose("s", k, [0, 1, 2, 3]) for k in keys}
    after = {k: rendezvous.choose("s", k, [0, 1, 2, 3, 4]) for k in keys}
    moved = [k for k in keys if before[k] != after[k]]
    assert moved
    assert all(after[k] == 4 for k in moved)
    modulo = mapping.ModuloMapping()
    assert sum(
        modulo.choose("s", k, [0, 1, 2, 3]) != modulo.choose("s", k, [0, 1, 2, 3, 4]) for k in keys
    ) > len(moved)


def test_random_mapping_uses_every_partition() -> None:
    rng = mapping.RandomMapping(random.Random(1))
    chosen = Counter(rng.choose("s", None, [3, 5]) for _ in range(200))
    assert set(chosen) == {3, 5}


def test_empty_partition_list_is_a_typed_error() -> None:
    with pytest.raises(errors.InvalidInputError, match="partitions"):
        mapping.ModuloMapping().choose("s", b"k", [])


def test_publisher_rejects_bad_options() -> None:
    with pytest.raises(errors.InvalidInputError, match="producer"):
        ExactlyOncePublisher(None, producer=b"123")  # type: ignore[arg-type]
    with pytest.raises(errors.InvalidInputError, match="ack_policy"):
        ExactlyOncePublisher(None, ack_policy=AckPolicy.NONE)  # type: ignore[arg-type]


def test_ack_intent_from_bad_json_is_a_typed_error() -> None:
    with pytest.raises(errors.InvalidInputError, match="AckIntent"):
        AckIntent.from_json('{"stream": "s"}')
    # A stored checkpoint anyone could have damaged: json recurses once per "[".
    with pytest.raises(errors.InvalidInputError, match="AckIntent"):
        AckIntent.from_json("[" * 100_000)
    with pytest.raises(errors.InvalidInputError, match="JSON"):
        intents_from_json("[" * 100_000)
