"""The protobuf schema: generated code is fresh, and proto/api.proto is wire-compatible with
upstream liftbridge-api v1.9.0 (field names, numbers, types; plus SubscribeRequest.reverse).

The upstream schema lives beside the project in ../shared (reference material, not part of the
product). Without it the cross-check is skipped on a developer machine but fails in CI.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, text_format
from google.protobuf.message import Message as ProtoMessage

from liftbridge_client import envelope
from liftbridge_client._proto import api_pb2

ROOT = Path(__file__).resolve().parents[2]
OUR_PROTO = ROOT / "proto" / "api.proto"
UPSTREAM_PROTO = ROOT.parent / "shared" / "reference" / "upstream-api-v1.9.0.proto"

FDP = descriptor_pb2.FieldDescriptorProto
# The one field ours has beyond v1.9.0 (from the newer upstream API): message, name, number,
# type, label.
OUR_EXTRA_FIELDS = {("SubscribeRequest", "reverse", 12, FDP.TYPE_BOOL, FDP.LABEL_OPTIONAL)}


def test_generated_code_is_fresh() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_proto.py"), "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, (
        "liftbridge_client/_proto is stale (run `make proto`):\n" + result.stdout + result.stderr
    )


# ---------------------------------------------------------------- descriptors


def compile_descriptor(proto: Path, out_dir: Path) -> descriptor_pb2.FileDescriptorProto:
    """Compile one .proto (no imports) with grpc_tools.protoc into a FileDescriptorProto."""
    out = out_dir / (proto.stem + ".pb")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{proto.parent}",
            f"--descriptor_set_out={out}",
            proto.name,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, f"protoc failed on {proto}:\n{result.stderr}"
    files = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file
    assert len(files) == 1
    return files[0]


def require_upstream(path: Path) -> Path:
    """The upstream schema, or a skip (a developer machine without ../shared), or a failure (CI)."""
    if not path.is_file():
        reason = f"upstream schema not found at {path} (../shared is dev-only reference material)"
        if os.environ.get("CI"):
            pytest.fail(f"{reason}; CI must provide it")
        pytest.skip(f"{reason}: wire cross-check with upstream skipped")
    return path


def test_missing_upstream_skips_locally_and_fails_in_ci(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = tmp_path / "absent.proto"
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception):
        require_upstream(missing)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception):
        require_upstream(missing)


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> descriptor_pb2.FileDescriptorProto:
    return compile_descriptor(require_upstream(UPSTREAM_PROTO), tmp_path_factory.mktemp("upstream"))


@pytest.fixture(scope="module")
def ours(tmp_path_factory: pytest.TempPathFactory) -> descriptor_pb2.FileDescriptorProto:
    return compile_descriptor(OUR_PROTO, tmp_path_factory.mktemp("ours"))


def walk_messages(
    messages: Iterable[descriptor_pb2.DescriptorProto], prefix: str = ""
) -> Iterator[tuple[str, descriptor_pb2.DescriptorProto]]:
    for message in messages:
        name = prefix + message.name
        yield name, message
        yield from walk_messages(message.nested_type, name + ".")


def all_messages(
    fd: descriptor_pb2.FileDescriptorProto,
) -> dict[str, descriptor_pb2.DescriptorProto]:
    return dict(walk_messages(fd.message_type))


def all_enums(fd: descriptor_pb2.FileDescriptorProto) -> dict[str, dict[str, int]]:
    enums = {e.name: {v.name: v.number for v in e.value} for e in fd.enum_type}
    for name, message in all_messages(fd).items():
        for e in message.enum_type:
            enums[f"{name}.{e.name}"] = {v.name: v.number for v in e.value}
    return enums


# Everything about a field that decides its wire form and its generated API. jstype (a
# JavaScript-only option upstream sets on some int64 fields) and comments are deliberately
# not compared.
FieldKey = tuple[str, int, int, int, str, bool, bool, bool]


def field_key(field: descriptor_pb2.FieldDescriptorProto) -> FieldKey:
    return (
        field.name,
        field.number,
        field.type,
        field.label,
        field.type_name,
        field.HasField("oneof_index"),
        field.proto3_optional,
        field.options.packed if field.options.HasField("packed") else True,
    )


def test_both_schemas_share_package_and_syntax(
    upstream: descriptor_pb2.FileDescriptorProto, ours: descriptor_pb2.FileDescriptorProto
) -> None:
    # Type names on the wire-facing side (gRPC paths, Any URLs) carry the package.
    assert ours.package == upstream.package == "proto"
    assert ours.syntax == upstream.syntax == "proto3"


def test_same_messages(
    upstream: descriptor_pb2.FileDescriptorProto, ours: descriptor_pb2.FileDescriptorProto
) -> None:
    assert sorted(all_messages(ours)) == sorted(all_messages(upstream))


def test_every_upstream_field_matches(
    upstream: descriptor_pb2.FileDescriptorProto, ours: descriptor_pb2.FileDescriptorProto
) -> None:
    our_messages = all_messages(ours)
    problems = []
    for name, theirs in all_messages(upstream).items():
        mine = {f.name: f for f in our_messages[name].field} if name in our_messages else {}
        for field in theirs.field:
            if field.name not in mine:
                problems.append(f"{name}.{field.name}: missing")
            elif field_key(mine[field.name]) != field_key(field):
                problems.append(
                    f"{name}.{field.name}: ours {field_key(mine[field.name])}, "
                    f"upstream {field_key(field)}"
                )
        if theirs.options.map_entry != (
            name in our_messages and our_messages[name].options.map_entry
        ):
            problems.append(f"{name}: map-ness differs")
        their_oneofs = [o.name for o in theirs.oneof_decl]
        if name in our_messages and [o.name for o in our_messages[name].oneof_decl] != their_oneofs:
            problems.append(f"{name}: oneofs differ")
    assert problems == []


def test_only_extra_is_subscribe_reverse(
    upstream: descriptor_pb2.FileDescriptorProto, ours: descriptor_pb2.FileDescriptorProto
) -> None:
    their_messages = all_messages(upstream)
    extras = set()
    for name, message in all_messages(ours).items():
        theirs = {f.name for f in their_messages[name].field} if name in their_messages else set()
        extras |= {
            (name, f.name, f.number, f.type, f.label) for f in message.field if f.name not in theirs
        }
    assert extras == OUR_EXTRA_FIELDS
    # The extra number is free upstream (field 11 is consumer).
    numbers = {f.number for f in their_messages["SubscribeRequest"].field}
    assert 12 not in numbers
    assert 11 in numbers


def test_map_fields_are_maps(ours: descriptor_pb2.FileDescriptorProto) -> None:
    # A spot check that the comparison sees map-ness at all: Message.headers is map<string, bytes>.
    message = all_messages(ours)["Message"]
    headers = next(f for f in message.field if f.name == "headers")
    assert headers.label == FDP.LABEL_REPEATED
    assert headers.type_name == ".proto.Message.HeadersEntry"
    entry = all_messages(ours)["Message.HeadersEntry"]
    assert entry.options.map_entry
    assert [(f.name, f.number, f.type) for f in entry.field] == [
        ("key", 1, FDP.TYPE_STRING),
        ("value", 2, FDP.TYPE_BYTES),
    ]


def test_same_enums(
    upstream: descriptor_pb2.FileDescriptorProto, ours: descriptor_pb2.FileDescriptorProto
) -> None:
    assert all_enums(ours) == all_enums(upstream)


def test_same_service(
    upstream: descriptor_pb2.FileDescriptorProto, ours: descriptor_pb2.FileDescriptorProto
) -> None:
    def rpcs(fd: descriptor_pb2.FileDescriptorProto) -> dict[str, tuple[str, str, bool, bool]]:
        return {
            f"{service.name}.{m.name}": (
                m.input_type,
                m.output_type,
                m.client_streaming,
                m.server_streaming,
            )
            for service in fd.service
            for m in service.method
        }

    assert [s.name for s in ours.service] == [s.name for s in upstream.service] == ["API"]
    assert rpcs(ours) == rpcs(upstream)
    assert rpcs(ours)["API.Subscribe"][3]  # server streaming
    assert rpcs(ours)["API.PublishAsync"][2:] == (True, True)


def test_generated_module_matches_our_schema(ours: descriptor_pb2.FileDescriptorProto) -> None:
    # The committed module was built from proto/api.proto (field-level, independent of the
    # byte-for-byte freshness check above).
    generated = descriptor_pb2.FileDescriptorProto()
    api_pb2.DESCRIPTOR.CopyToProto(generated)
    assert sorted(all_messages(generated)) == sorted(all_messages(ours))
    for name, message in all_messages(ours).items():
        assert [field_key(f) for f in all_messages(generated)[name].field] == [
            field_key(f) for f in message.field
        ], name


# ---------------------------------------------------------------- bytes across the two schemas


@pytest.fixture(scope="module")
def upstream_pool(upstream: descriptor_pb2.FileDescriptorProto) -> descriptor_pool.DescriptorPool:
    pool = descriptor_pool.DescriptorPool()
    pool.Add(upstream)
    return pool


def upstream_class(pool: descriptor_pool.DescriptorPool, name: str) -> type[ProtoMessage]:
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"proto.{name}"))


def as_text(msg: ProtoMessage) -> str:
    # Text format names every field and enum value, and leaves unknown fields out: equal text
    # means both schemas read the same bytes as the same fields.
    return text_format.MessageToString(msg)


def our_message() -> api_pb2.Message:
    return api_pb2.Message(
        offset=-1,
        key=b"\x00k",
        value=b"v\xff",
        timestamp=-5,
        stream="s",
        partition=-2,
        subject="s.1",
        replySubject="r",
        headers={"a": b"1", "ключ": b"", "z": bytes(range(20))},
        ackInbox="_INBOX.1",
        correlationId="c",
        ackPolicy=api_pb2.NONE,
    )


def test_our_message_parses_with_upstream_schema(
    upstream_pool: descriptor_pool.DescriptorPool,
) -> None:
    mine = our_message()
    theirs = upstream_class(upstream_pool, "Message").FromString(mine.SerializeToString())
    assert as_text(theirs) == as_text(mine)
    assert "offset: -1" in as_text(theirs)
    assert "ackPolicy: NONE" in as_text(theirs)
    assert theirs.SerializeToString(deterministic=True) == mine.SerializeToString(
        deterministic=True
    )


def test_upstream_message_parses_with_our_schema(
    upstream_pool: descriptor_pool.DescriptorPool,
) -> None:
    theirs = upstream_class(upstream_pool, "Message")()
    text_format.Parse(as_text(our_message()), theirs)
    mine = api_pb2.Message.FromString(theirs.SerializeToString())
    assert mine == our_message()
    assert mine.offset == -1
    assert dict(mine.headers)["ключ"] == b""


def test_enveloped_publish_parses_with_upstream_schema(
    upstream_pool: descriptor_pool.DescriptorPool,
) -> None:
    data = envelope.encode_message(b"x", headers={"h": b"v"}, ack_inbox="i", crc=True)
    theirs = upstream_class(upstream_pool, "Message").FromString(envelope.decode(data).payload)
    assert (
        as_text(theirs)
        == 'offset: -1\nvalue: "x"\nheaders {\n  key: "h"\n  value: "v"\n}\nackInbox: "i"\n'
    )


def test_ack_round_trips_both_ways(upstream_pool: descriptor_pool.DescriptorPool) -> None:
    mine = api_pb2.Ack(
        stream="s",
        partitionSubject="s",
        msgSubject="s.3",
        offset=-1,
        ackInbox="i",
        correlationId="c",
        ackPolicy=api_pb2.ALL,
        receptionTimestamp=1,
        commitTimestamp=-1,
        ackError=api_pb2.Ack.ENCRYPTION,
    )
    ack_cls = upstream_class(upstream_pool, "Ack")
    theirs = ack_cls.FromString(mine.SerializeToString())
    assert as_text(theirs) == as_text(mine)
    assert "ackError: ENCRYPTION" in as_text(theirs)
    assert api_pb2.Ack.FromString(theirs.SerializeToString()) == mine


def test_nested_messages_cross(upstream_pool: descriptor_pool.DescriptorPool) -> None:
    mine = api_pb2.CreateStreamRequest(
        subject="s",
        name="n",
        partitions=3,
        replicationFactor=-1,
        retentionMaxAge=api_pb2.NullableInt64(value=-1),
        compactEnabled=api_pb2.NullableBool(value=False),  # present but false: must survive
        minIsr=api_pb2.NullableInt32(value=2),
    )
    theirs = upstream_class(upstream_pool, "CreateStreamRequest").FromString(
        mine.SerializeToString()
    )
    assert as_text(theirs) == as_text(mine)
    assert theirs.HasField("compactEnabled")
    assert api_pb2.CreateStreamRequest.FromString(theirs.SerializeToString()) == mine


def test_publish_response_async_error_crosses(
    upstream_pool: descriptor_pool.DescriptorPool,
) -> None:
    mine = api_pb2.PublishResponse(
        correlationId="c",
        asyncError=api_pb2.PublishAsyncError(
            code=api_pb2.PublishAsyncError.INCORRECT_OFFSET, message="m"
        ),
    )
    theirs = upstream_class(upstream_pool, "PublishResponse").FromString(mine.SerializeToString())
    assert as_text(theirs) == as_text(mine)
    assert "INCORRECT_OFFSET" in as_text(theirs)


def test_subscribe_reverse_is_unknown_to_upstream_and_harmless(
    upstream_pool: descriptor_pool.DescriptorPool,
) -> None:
    mine = api_pb2.SubscribeRequest(
        stream="s", partition=1, startPosition=api_pb2.OFFSET, startOffset=-1, reverse=True
    )
    theirs = upstream_class(upstream_pool, "SubscribeRequest").FromString(mine.SerializeToString())
    without_reverse = api_pb2.SubscribeRequest()
    without_reverse.CopyFrom(mine)
    without_reverse.ClearField("reverse")
    assert as_text(theirs) == as_text(without_reverse)
    assert "reverse" not in theirs.DESCRIPTOR.fields_by_name
    # An old server skips field 12 but keeps it: re-serialized, our schema reads it back.
    assert api_pb2.SubscribeRequest.FromString(theirs.SerializeToString()).reverse
