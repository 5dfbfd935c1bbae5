"""Byte compatibility with go-liftbridge v2.4.0, the official Go client.

The Go program beside this file (main.go) drives go-liftbridge's public API and
talks JSON over stdin/stdout. It is built once per session; a missing Go
toolchain or a failed build fails the tests, because without it nothing here
is proven.

What go-liftbridge does, as pinned by these tests:

- ``NewMessage`` never sets the CRC flag: HeaderLen 8, flags 0, always.
- ``NewMessage`` puts the expected offset in ``Message.offset`` and defaults it
  to -1 (so the varint ``08 ff ff ff ff ff ff ff ff ff 01`` leads every default
  publish); the default ack policy is LEADER (0, hence absent on the wire).
- ``ToPartition``/``PartitionByKey`` do not change ``NewMessage``'s bytes: on
  NATS the partition is chosen by the subject, not by the envelope.
- ``Header`` and ``Headers`` merge into one map, the last value for a name wins.
- Decoding: inputs of 8 bytes or fewer are refused ("data missing envelope
  header"), so an all-default Ack without CRC (exactly 8 bytes) is refused
  while our decoder and the server accept it; HeaderLen beyond the data
  panics; unknown flag bits are ignored; ``UnmarshalAck`` drops
  ``Ack.ackError`` and ``Message`` exposes no ack inbox, correlation id or
  ack policy (main.go reads those three from the payload itself).
- Partitioning: ``crc32.ChecksumIEEE(key) % partitions`` (unsigned), a nil key
  hashes as empty, round robin is ``count % partitions`` per stream, and a
  stream with no known partitions maps to 0. SetCursor routes a cursor to
  ``__cursors`` partition ``crc32("<id>,<stream>,<partition>") % N``.
"""

from __future__ import annotations

import importlib
import json
import os
import random
import shutil
import subprocess
import time
import zlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from liftbridge_client import envelope
from liftbridge_client._proto import api_pb2
from liftbridge_client.envelope import MsgType
from liftbridge_client.errors import (
    BadHeaderLengthError,
    BadMagicError,
    CrcMismatchError,
    EnvelopeError,
    EnvelopeTooShortError,
    UnexpectedMessageTypeError,
    UnsupportedVersionError,
)

pytestmark = pytest.mark.interop

HERE = Path(__file__).resolve().parent
BINARY = HERE / "interop-bin"
SOURCES = ("main.go", "go.mod", "go.sum")
BUILD_TIMEOUT = 600.0
RUN_TIMEOUT = 60.0

Json = Any


# ---------------------------------------------------------------- the Go program


def _stale(binary: Path) -> bool:
    if not binary.exists():
        return True
    built = binary.stat().st_mtime
    return any((HERE / name).stat().st_mtime > built for name in SOURCES)


@pytest.fixture(scope="session")
def go_bin() -> Path:
    """Build the interop program unless an up-to-date binary is already there."""
    if not _stale(BINARY):
        return BINARY
    go = shutil.which("go")
    if go is None:
        pytest.fail(
            "the Go toolchain is not on PATH: the go-liftbridge interop tests need it "
            "(install Go >= 1.25 and re-run)",
            pytrace=False,
        )
    env = dict(os.environ)
    # Never let a test run rewrite go.mod or go.sum.
    env["GOFLAGS"] = (env.get("GOFLAGS", "") + " -mod=readonly").strip()
    started = time.monotonic()
    try:
        proc = subprocess.run(
            [go, "build", "-o", str(BINARY), "."],
            cwd=HERE,
            env=env,
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"`go build` in {HERE} took longer than {BUILD_TIMEOUT:.0f} s", pytrace=False)
    if proc.returncode != 0:
        pytest.fail(
            f"`go build` in {HERE} failed (exit {proc.returncode}):\n{proc.stderr}{proc.stdout}",
            pytrace=False,
        )
    print(f"built {BINARY.name} in {time.monotonic() - started:.1f} s")
    return BINARY


def run_go(binary: Path, subcommand: str, payload: Json) -> Json:
    proc = subprocess.run(
        [str(binary), subcommand],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
    )
    if proc.returncode != 0:
        pytest.fail(f"interop {subcommand} failed (exit {proc.returncode}):\n{proc.stderr}")
    return json.loads(proc.stdout)


def _hex(data: bytes | None) -> str | None:
    return None if data is None else data.hex()


# ---------------------------------------------------------------- publish cases


@dataclass(frozen=True)
class Case:
    """One set of publish options. None means "option not given" on both sides."""

    name: str
    value: bytes = b""
    key: bytes | None = None
    headers: Mapping[str, bytes] | None = None
    ack_inbox: str | None = None
    correlation_id: str | None = None
    ack_policy: str | None = None
    expected_offset: int | None = None
    # Options that NewMessage takes but that cannot change its bytes.
    to_partition: int | None = None
    partition_by_key: bool = False
    # Headers given one by one through Header(); later names overwrite.
    header_calls: tuple[tuple[str, bytes], ...] = field(default=())

    def go_input(self) -> dict[str, Json]:
        return {
            "name": self.name,
            "value": self.value.hex(),
            "key": _hex(self.key),
            "headers": None
            if self.headers is None
            else {k: v.hex() for k, v in self.headers.items()},
            "header_calls": [{"name": k, "value": v.hex()} for k, v in self.header_calls],
            "ack_inbox": self.ack_inbox,
            "correlation_id": self.correlation_id,
            "ack_policy": self.ack_policy,
            "expected_offset": self.expected_offset,
            "to_partition": self.to_partition,
            "partition_by_key": self.partition_by_key,
        }

    def all_headers(self) -> dict[str, bytes]:
        merged = dict(self.headers or {})
        merged.update(self.header_calls)
        return merged

    def encode_kwargs(self) -> dict[str, Any]:
        """Our encode_message arguments: only what the case gives, so defaults meet defaults."""
        kwargs: dict[str, Any] = {}
        if self.key is not None:
            kwargs["key"] = self.key
        if self.headers is not None or self.header_calls:
            kwargs["headers"] = self.all_headers()
        if self.ack_inbox is not None:
            kwargs["ack_inbox"] = self.ack_inbox
        if self.correlation_id is not None:
            kwargs["correlation_id"] = self.correlation_id
        if self.ack_policy is not None:
            kwargs["ack_policy"] = api_pb2.AckPolicy.Value(self.ack_policy)
        if self.expected_offset is not None:
            kwargs["expected_offset"] = self.expected_offset
        return kwargs

    def encode(self, *, crc: bool = False) -> bytes:
        return envelope.encode_message(self.value, crc=crc, **self.encode_kwargs())

    @property
    def byte_identical(self) -> bool:
        # Map order is unspecified on both sides, so more than one header is
        # compared as parsed fields only.
        return len(self.all_headers()) <= 1

    def expected(self) -> dict[str, Json]:
        return {
            "offset": -1 if self.expected_offset is None else self.expected_offset,
            "key": self.key or b"",
            "value": self.value,
            "headers": self.all_headers(),
            "ack_inbox": self.ack_inbox or "",
            "correlation_id": self.correlation_id or "",
            "ack_policy": api_pb2.AckPolicy.Value(self.ack_policy or "LEADER"),
        }


CASES: tuple[Case, ...] = (
    Case("all defaults", value=b"hello"),
    Case("empty value, all defaults"),
    Case("binary value", value=bytes(range(256))),
    Case("large value", value=random.Random(7).randbytes(70_000)),
    Case("key", value=b"v", key=b"order-17"),
    Case("empty key given", value=b"v", key=b""),
    Case("binary key", value=b"v", key=b"\x00\xff\x80"),
    Case("ack policy LEADER", value=b"v", ack_policy="LEADER"),
    Case("ack policy ALL", value=b"v", ack_policy="ALL"),
    Case("ack policy NONE", value=b"v", ack_policy="NONE"),
    Case("ack inbox", value=b"v", ack_inbox="_INBOX.abc.def"),
    Case("correlation id", value=b"v", correlation_id="6f1e0a4c-cid"),
    Case("ack inbox and correlation id", value=b"v", ack_inbox="acks", correlation_id="c-1"),
    Case("unicode strings", value=b"v", ack_inbox="acks.\u00e9t\u00e9", correlation_id="\u2603"),
    Case("expected offset -1 given", value=b"v", expected_offset=-1),
    Case("expected offset 0", value=b"v", expected_offset=0),
    Case("expected offset 42", value=b"v", expected_offset=42),
    Case("expected offset int64 max", value=b"v", expected_offset=2**63 - 1),
    Case("expected offset int64 min", value=b"v", expected_offset=-(2**63)),
    Case("one header", value=b"v", headers={"trace": b"abc"}),
    Case("one header, empty value", value=b"v", headers={"empty": b""}),
    Case("one header, empty name", value=b"v", headers={"": b"x"}),
    Case("one header, unicode name", value=b"v", headers={"\u00fcber": b"\x00\x01"}),
    Case("empty header map", value=b"v", headers={}),
    Case("three headers", value=b"v", headers={"a": b"1", "b": b"", "c": b"\xff" * 300}),
    Case(
        "Header() calls overwrite Headers()",
        value=b"v",
        headers={"a": b"1", "b": b"2"},
        header_calls=(("b", b"3"), ("c", b"4"), ("c", b"5")),
    ),
    Case("ToPartition leaves the bytes alone", value=b"v", key=b"k", to_partition=3),
    Case("PartitionByKey leaves the bytes alone", value=b"v", key=b"k", partition_by_key=True),
    Case(
        "everything",
        value=b"payload",
        key=b"key",
        headers={"h": b"1"},
        ack_inbox="inbox.1",
        correlation_id="corr-1",
        ack_policy="ALL",
        expected_offset=1234567,
    ),
)


def _fields(msg: api_pb2.Message) -> dict[str, Json]:
    return {
        "offset": msg.offset,
        "key": msg.key,
        "value": msg.value,
        "headers": dict(msg.headers),
        "ack_inbox": msg.ackInbox,
        "correlation_id": msg.correlationId,
        "ack_policy": msg.ackPolicy,
    }


@pytest.fixture(scope="module")
def go_envelopes(go_bin: Path) -> dict[str, bytes]:
    results = run_go(go_bin, "envelopes", [case.go_input() for case in CASES])
    assert [r["name"] for r in results] == [case.name for case in CASES]
    errors = {r["name"]: r["error"] for r in results if r.get("error")}
    assert not errors, errors
    return {r["name"]: bytes.fromhex(r["data"]) for r in results}


def _case_id(case: Case) -> str:
    return case.name


# ---------------------------------------------------------------- Go -> Python


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_go_publish_decodes_in_python(case: Case, go_envelopes: dict[str, bytes]) -> None:
    data = go_envelopes[case.name]
    env = envelope.decode(data, MsgType.PUBLISH)
    # NewMessage never sets the CRC flag: header length 8, flags 0.
    assert (data[5], data[6], env.has_crc) == (envelope.HEADER_LEN, 0, False)
    assert _fields(envelope.decode_message(data)) == case.expected()


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_python_publish_matches_go_bytes(case: Case, go_envelopes: dict[str, bytes]) -> None:
    ours, theirs = case.encode(), go_envelopes[case.name]
    if case.byte_identical:
        assert ours.hex() == theirs.hex()
    else:
        assert len(ours) == len(theirs)
        assert ours[:8] == theirs[:8]
        assert envelope.decode_message(ours) == envelope.decode_message(theirs)


def test_go_default_expected_offset_is_minus_one(go_envelopes: dict[str, bytes]) -> None:
    # Message.offset carries the expected offset; -1 (ten-byte varint) unless given.
    data = go_envelopes["all defaults"]
    assert data.hex() == "b90e43b400080000" + "08ffffffffffffffffff01" + "1a0568656c6c6f"
    assert go_envelopes["expected offset -1 given"] == go_envelopes["ack policy LEADER"]
    assert envelope.decode_message(go_envelopes["expected offset 0"]).offset == 0


def test_go_partition_options_do_not_change_bytes(go_envelopes: dict[str, bytes]) -> None:
    plain = Case("plain", value=b"v", key=b"k").encode()
    assert go_envelopes["ToPartition leaves the bytes alone"] == plain
    assert go_envelopes["PartitionByKey leaves the bytes alone"] == plain


# ---------------------------------------------------------------- Python -> Go: messages


def _go_message_fields(result: dict[str, Json]) -> dict[str, Json]:
    return {
        "offset": result["offset"],
        "key": bytes.fromhex(result["key"]),
        "value": bytes.fromhex(result["value"]),
        "headers": {k: bytes.fromhex(v) for k, v in result["headers"].items()},
        "ack_inbox": result["ack_inbox"],
        "correlation_id": result["correlation_id"],
        "ack_policy": result["ack_policy"],
    }


@pytest.mark.parametrize("crc", [False, True], ids=["crc-off", "crc-on"])
def test_python_publish_decodes_in_go(go_bin: Path, crc: bool) -> None:
    encoded = [case.encode(crc=crc) for case in CASES]
    results = run_go(go_bin, "decode-messages", [data.hex() for data in encoded])
    for case, data, result in zip(CASES, encoded, results, strict=True):
        assert data[6] == (envelope.FLAG_CRC if crc else 0)
        assert "error" not in result, (case.name, result)
        assert _go_message_fields(result) == case.expected(), case.name
        assert (result["timestamp"], result["stream"], result["partition"]) == (0, "", 0)
        assert (result["subject"], result["reply_subject"]) == ("", "")


@pytest.mark.parametrize("crc", [False, True], ids=["crc-off", "crc-on"])
def test_server_side_message_fields_decode_in_go(go_bin: Path, crc: bool) -> None:
    # A Message as the server fills it in, enveloped by our generic encoder.
    msg = api_pb2.Message(
        offset=987654321,
        key=b"k",
        value=b"v",
        timestamp=1_732_000_000_123_456_789,
        stream="orders",
        partition=5,
        subject="orders.eu",
        replySubject="_INBOX.reply",
        headers={"x": b"y"},
        ackInbox="acks",
        correlationId="cid",
        ackPolicy=api_pb2.NONE,
    )
    data = envelope.encode(MsgType.PUBLISH, msg.SerializeToString(), crc=crc)
    [result] = run_go(go_bin, "decode-messages", [data.hex()])
    assert "error" not in result, result
    assert result == {
        "offset": 987654321,
        "key": b"k".hex(),
        "value": b"v".hex(),
        "headers": {"x": b"y".hex()},
        "timestamp": 1_732_000_000_123_456_789,
        "stream": "orders",
        "partition": 5,
        "subject": "orders.eu",
        "reply_subject": "_INBOX.reply",
        "ack_inbox": "acks",
        "correlation_id": "cid",
        "ack_policy": api_pb2.NONE,
    }


# ---------------------------------------------------------------- Python -> Go: acks

ACKS: tuple[api_pb2.Ack, ...] = (
    api_pb2.Ack(
        stream="orders",
        partitionSubject="orders.2",
        msgSubject="orders",
        offset=41,
        ackInbox="_INBOX.acks",
        correlationId="c-41",
        ackPolicy=api_pb2.ALL,
        receptionTimestamp=1_732_000_000_000_000_001,
        commitTimestamp=1_732_000_000_000_500_002,
    ),
    api_pb2.Ack(stream="s"),
    api_pb2.Ack(stream="s", offset=0, ackPolicy=api_pb2.NONE),
    api_pb2.Ack(stream="s", offset=2**63 - 1, receptionTimestamp=-1, commitTimestamp=2**63 - 1),
    api_pb2.Ack(stream="\u00e9t\u00e9", correlationId="\u2603", ackInbox="a.\u00fc"),
    api_pb2.Ack(
        stream="s",
        correlationId="refused",
        offset=-1,
        ackError=api_pb2.Ack.INCORRECT_OFFSET,
    ),
    api_pb2.Ack(stream="s", ackError=api_pb2.Ack.TOO_LARGE),
)


def _ack_fields(ack: api_pb2.Ack) -> dict[str, Json]:
    return {
        "stream": ack.stream,
        "partition_subject": ack.partitionSubject,
        "msg_subject": ack.msgSubject,
        "offset": ack.offset,
        "ack_inbox": ack.ackInbox,
        "correlation_id": ack.correlationId,
        "ack_policy": ack.ackPolicy,
        "reception_timestamp": ack.receptionTimestamp,
        "commit_timestamp": ack.commitTimestamp,
        "wire_ack_error": ack.ackError,
    }


@pytest.mark.parametrize("crc", [False, True], ids=["crc-off", "crc-on"])
def test_python_ack_decodes_in_go(go_bin: Path, crc: bool) -> None:
    encoded = [envelope.encode_ack(ack, crc=crc) for ack in ACKS]
    results = run_go(go_bin, "decode-acks", [data.hex() for data in encoded])
    for ack, result in zip(ACKS, results, strict=True):
        assert result == _ack_fields(ack)


def test_empty_ack_is_refused_by_go_without_crc(go_bin: Path) -> None:
    """An all-default Ack has an empty payload: 8 bytes without CRC, which Go refuses."""
    bare = envelope.encode_ack(api_pb2.Ack())
    with_crc = envelope.encode_ack(api_pb2.Ack(), crc=True)
    assert len(bare) == 8
    assert envelope.decode_ack(bare) == api_pb2.Ack() == envelope.decode_ack(with_crc)
    refused, accepted = run_go(go_bin, "decode-acks", [bare.hex(), with_crc.hex()])
    assert refused["error"] == "data missing envelope header"
    assert accepted == _ack_fields(api_pb2.Ack())


def test_empty_publish_is_refused_by_go_without_crc(go_bin: Path) -> None:
    """Only an explicit expected offset 0 with nothing else set gives an empty payload."""
    bare = envelope.encode_message(b"", expected_offset=0)
    with_crc = envelope.encode_message(b"", expected_offset=0, crc=True)
    assert len(bare) == 8
    refused, accepted = run_go(go_bin, "decode-messages", [bare.hex(), with_crc.hex()])
    assert refused["error"] == "data missing envelope header"
    assert "error" not in accepted
    assert _go_message_fields(accepted) == Case("empty", expected_offset=0).expected()


# ---------------------------------------------------------------- decode strictness


def _with(data: bytes, index: int, byte: int) -> bytes:
    return data[:index] + bytes((byte,)) + data[index + 1 :]


_ACK = envelope.encode_ack(api_pb2.Ack(stream="s", offset=3))
_ACK_CRC = envelope.encode_ack(api_pb2.Ack(stream="s", offset=3), crc=True)


@dataclass(frozen=True)
class Malformed:
    name: str
    data: bytes
    go_error: str | None  # substring of Go's error; None: Go accepts
    ours: type[EnvelopeError] | None  # our decode_ack's error; None: we accept


MALFORMED: tuple[Malformed, ...] = (
    Malformed("too short", _ACK[:7], "data missing envelope header", EnvelopeTooShortError),
    Malformed("bad magic", b"\xb9\x0e\x43\xb5" + _ACK[4:], "magic number", BadMagicError),
    Malformed("version 1", _with(_ACK, 4, 1), "unknown envelope protocol", UnsupportedVersionError),
    Malformed(
        "publish, not ack",
        Case("m", value=b"v").encode(),
        "MsgType mismatch",
        UnexpectedMessageTypeError,
    ),
    Malformed("CRC mismatch", _ACK_CRC[:-1] + b"\x04", "crc mismatch", CrcMismatchError),
    Malformed(
        "CRC flag, HeaderLen 8",
        _with(_ACK, 6, envelope.FLAG_CRC),
        "incorrect envelope header size",
        BadHeaderLengthError,
    ),
    # Go slices data[HeaderLen:] without a bounds check and panics.
    Malformed("HeaderLen past the end", _with(_ACK, 5, 200), "panic:", BadHeaderLengthError),
    # Go reads the payload from byte 4 and trips over the header bytes.
    Malformed("HeaderLen 4", _with(_ACK, 5, 4), "proto:", BadHeaderLengthError),
    # Both skip header bytes they do not know when the CRC flag is off.
    Malformed(
        "HeaderLen 12, no CRC flag",
        _ACK[:5] + b"\x0c" + _ACK[6:8] + b"\0" * 4 + _ACK[8:],
        None,
        None,
    ),
    Malformed("unknown flag bit", _with(_ACK, 6, 0x02), None, None),
)


def test_decode_strictness_against_go(go_bin: Path) -> None:
    results = run_go(go_bin, "decode-acks", [m.data.hex() for m in MALFORMED])
    for m, result in zip(MALFORMED, results, strict=True):
        if m.go_error is None:
            assert "error" not in result, (m.name, result)
            assert result["stream"] == "s"
            assert result["offset"] == 3
        else:
            assert m.go_error in result.get("error", ""), (m.name, result)
        if m.ours is None:
            assert envelope.decode_ack(m.data) == api_pb2.Ack(stream="s", offset=3), m.name
        else:
            with pytest.raises(m.ours):
                envelope.decode_ack(m.data)


# ---------------------------------------------------------------- partitioners


def reference_key_partition(key: bytes, partitions: int) -> int:
    """go-liftbridge's key partitioner: unsigned CRC-32 (IEEE) of the key, modulo."""
    return zlib.crc32(key) % partitions


def _our_key_partition() -> Callable[[bytes, int], int] | None:
    """liftbridge_client.partitioning.key_partition, once that module exists."""
    try:
        module = importlib.import_module("liftbridge_client.partitioning")
    except ModuleNotFoundError:
        return None
    func: Callable[[bytes, int], int] = module.key_partition
    return func


def _key_cases() -> Iterator[tuple[bytes | None, int]]:
    yield from [(b"foobarbazqux", 2), (b"blah", 2), (b"foo", 3), (b"", 1), (b"", 5), (None, 4)]
    rng = random.Random(20240611)
    for _ in range(210):
        yield rng.randbytes(rng.randrange(0, 33)), rng.randrange(1, 8)


KEY_CASES = tuple(_key_cases())
ROUND_ROBIN = tuple(range(1, 8))


@pytest.fixture(scope="module")
def go_partitions(go_bin: Path) -> dict[str, Json]:
    payload = {
        "key": [{"key": _hex(key), "partitions": n} for key, n in KEY_CASES]
        + [{"key": b"x".hex(), "partitions": 0}],
        "round_robin": [{"partitions": n, "calls": 2 * n + 3} for n in ROUND_ROBIN],
    }
    result: dict[str, Json] = run_go(go_bin, "partition", payload)
    return result


def test_key_partitioner_vectors(go_partitions: dict[str, Json]) -> None:
    go = go_partitions["key"]
    # The documented vectors: CRC of "foobarbazqux" is above 2**31 (unsigned modulo).
    assert go[:6] == [1, 0, 2, 0, 0, 0]
    assert zlib.crc32(b"foobarbazqux") == 0xF6103C0F
    # A stream with no known partitions maps every key to 0.
    assert go[-1] == 0


def test_key_partitioner_matches_reference(go_partitions: dict[str, Json]) -> None:
    go = go_partitions["key"][: len(KEY_CASES)]
    ours = _our_key_partition()
    for (key, n), picked in zip(KEY_CASES, go, strict=True):
        data = key or b""  # go-liftbridge hashes a nil key as empty
        assert picked == reference_key_partition(data, n), (data.hex(), n)
        if ours is not None:
            assert ours(data, n) == picked, (data.hex(), n)


def test_round_robin_partitioner(go_partitions: dict[str, Json]) -> None:
    for n, sequence in zip(ROUND_ROBIN, go_partitions["round_robin"], strict=True):
        assert sequence == [i % n for i in range(2 * n + 3)]


def reference_cursor_partition(cursor_id: str, stream: str, partition: int, n: int) -> int:
    """The __cursors partition go-liftbridge sends a cursor to."""
    return zlib.crc32(f"{cursor_id},{stream},{partition}".encode()) % n


def test_cursor_partition(go_bin: Path) -> None:
    # go-liftbridge keeps this hash private; main.go observes where SetCursor goes.
    rng = random.Random(99)
    cases = [("c", "s", 0, 3), ("__group:billing", "orders", 2, 5), ("\u00e9", "s", 7, 4)]
    cases += [
        (f"cursor-{rng.randrange(10**6)}", f"stream-{rng.randrange(100)}", rng.randrange(8), n)
        for n in (1, 2, 3, 4, 5)
        for _ in range(10)
    ]
    payload = [
        {"cursor_id": c, "stream": s, "partition": p, "partitions": n} for c, s, p, n in cases
    ]
    results = run_go(go_bin, "cursor-partition", payload)
    for (c, s, p, n), result in zip(cases, results, strict=True):
        assert result == {"partition": reference_cursor_partition(c, s, p, n)}, (c, s, p, n)
