"""Framings: how a message and its UUID may be written inside a value (pure, no IO).

On Liftbridge the UUID travels in a header (see `publisher.UUID_HEADER`) and the value
stays the user's bytes, so framings are optional. They serve users who want Gazette-style
self-describing values (the UUID inside the value) and byte-compatible data with Gazette:

- ``application/x-ndjson``: one JSON document per line, encoded as Go's encoding/json
  encodes a map (sorted keys, no spaces, ``<``, ``>``, ``&``, U+2028 and U+2029 escaped);
- ``application/x-protobuf-fixed``: the magic word 66 33 93 36, a 4-byte little-endian
  length, then the protobuf bytes. A reader that meets anything but the magic word
  reports `FrameDesyncError` with the bytes it skipped and resynchronises on the next word;
- ``text/csv``: one CSV record per line (Go's encoding/csv quoting), first field the UUID.

`register_framing` / `framing_for` keep a registry by content type.
"""

from __future__ import annotations

import csv
import io
import json
import struct
import uuid as _uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from liftbridge_client import errors

__all__ = [
    "CONTENT_TYPE_CSV",
    "CONTENT_TYPE_JSON_LINES",
    "CONTENT_TYPE_PROTO_FIXED",
    "FIXED_FRAME_HEADER_LENGTH",
    "FIXED_FRAME_WORD",
    "CsvFraming",
    "CsvRecord",
    "FixedFrameReader",
    "FixedProtoFraming",
    "Framing",
    "JsonLinesFraming",
    "JsonMessage",
    "ProtoMessage",
    "decode_csv_record",
    "encode_csv_record",
    "encode_fixed_frame",
    "encode_json_line",
    "framing_for",
    "register_framing",
    "split_lines",
]

CONTENT_TYPE_JSON_LINES = "application/x-ndjson"
CONTENT_TYPE_PROTO_FIXED = "application/x-protobuf-fixed"
CONTENT_TYPE_CSV = "text/csv"
FIXED_FRAME_WORD = bytes((0x66, 0x33, 0x93, 0x36))
FIXED_FRAME_HEADER_LENGTH = 8
_MAX_FRAME = 0xFFFF_FFFF


class Framing(Protocol):
    """Encodes one message per value and decodes it back; names its content type."""

    @property
    def content_type(self) -> str: ...

    def marshal(self, message: Any) -> bytes: ...

    def unmarshal(self, data: bytes) -> Any: ...

    def acknowledgement(self, uuid: _uuid.UUID, template: Any) -> bytes:
        """The value of an ACK_TXN message for this framing (``template``: a message of
        the transaction, for framings whose acks mirror its shape)."""
        ...


# ---------------------------------------------------------------- JSON lines

_GO_JSON_ESCAPES = {
    "<": "\\u003c",
    ">": "\\u003e",
    "&": "\\u0026",
    "\u2028": "\\u2028",
    "\u2029": "\\u2029",
}


def encode_json_line(document: Any) -> bytes:
    """``document`` as one JSON line, byte-identical to Go's json.Encoder for maps of
    strings, ints, bools, None, lists and nested maps (floats are Python's repr)."""
    try:
        text = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise errors.InvalidInputError(f"document is not JSON-serialisable: {exc}") from exc
    # These characters can only occur inside JSON strings, so replacing them is safe.
    for char, escape in _GO_JSON_ESCAPES.items():
        if char in text:
            text = text.replace(char, escape)
    return text.encode() + b"\n"


def split_lines(data: bytes) -> Iterator[bytes]:
    """Each ``\\n``-terminated line of ``data`` (newline kept); a last line without one
    raises `TruncatedFrameError`."""
    start = 0
    while start < len(data):
        end = data.find(b"\n", start)
        if end < 0:
            raise errors.TruncatedFrameError("data ends inside a line (no trailing newline)")
        yield data[start : end + 1]
        start = end + 1


@dataclass(slots=True)
class JsonMessage:
    """A self-describing JSON message: ``{"uuid": "...", **body}`` on one line."""

    body: dict[str, Any] = field(default_factory=dict)
    uuid: _uuid.UUID | None = None


class JsonLinesFraming:
    content_type = CONTENT_TYPE_JSON_LINES

    def marshal(self, message: Any) -> bytes:
        if isinstance(message, JsonMessage):
            if "uuid" in message.body:
                raise errors.InvalidInputError("JsonMessage.body must not hold a 'uuid' key")
            document = dict(message.body)
            if message.uuid is not None:
                document["uuid"] = str(message.uuid)
            return encode_json_line(document)
        return encode_json_line(message)

    def unmarshal(self, data: bytes) -> JsonMessage:
        try:
            document = json.loads(data)
        except (ValueError, RecursionError) as exc:
            # RecursionError: json recurses once per nesting level ("[" * 100_000).
            raise errors.FramingError(f"not a JSON line: {exc}") from exc
        if not isinstance(document, dict):
            raise errors.FramingError("a JSON message must be an object")
        raw = document.pop("uuid", None)
        try:
            uuid = None if raw is None else _uuid.UUID(str(raw))
        except ValueError as exc:
            raise errors.FramingError(f"bad uuid field {raw!r}") from exc
        return JsonMessage(document, uuid)

    def acknowledgement(self, uuid: _uuid.UUID, template: Any) -> bytes:
        return self.marshal(JsonMessage({}, uuid))


# ---------------------------------------------------------------- fixed protobuf frames


def encode_fixed_frame(payload: bytes) -> bytes:
    """``payload`` (marshalled protobuf) behind the magic word and its LE length."""
    if len(payload) > _MAX_FRAME:
        raise errors.InvalidInputError("payload exceeds the 4-byte frame length")
    return FIXED_FRAME_WORD + struct.pack("<I", len(payload)) + payload


class FixedFrameReader:
    """Reads fixed frames one by one from a byte string, detecting desynchronisation.

    `next_frame` returns the whole frame (header included), None at a clean end, and
    raises `FrameDesyncError` (with the skipped bytes) when the magic word is missing or
    `TruncatedFrameError` when the data ends inside a frame. After a desync the reader
    stands on the next magic word (or on the last 3 bytes) and may be called again.
    A single trailing newline is tolerated as a clean end, as Gazette does.
    """

    __slots__ = ("_data", "_pos")

    def __init__(self, data: bytes) -> None:
        self._data = bytes(data)
        self._pos = 0

    @property
    def position(self) -> int:
        return self._pos

    def next_frame(self) -> bytes | None:
        data, pos = self._data, self._pos
        rest = len(data) - pos
        if rest < FIXED_FRAME_HEADER_LENGTH:
            if rest == 0 or (rest == 1 and data[pos] == 0x0A):
                self._pos = len(data)
                return None
            raise errors.TruncatedFrameError(f"{rest} bytes left, short of a frame header")
        if data[pos : pos + 4] != FIXED_FRAME_WORD:
            found = data.find(FIXED_FRAME_WORD, pos + 1)
            # Keep the last 3 bytes: they may be the start of a magic word.
            skip_to = found if found >= 0 else len(data) - (len(FIXED_FRAME_WORD) - 1)
            self._pos = skip_to
            raise errors.FrameDesyncError(
                f"desynchronised: no frame magic word at offset {pos}", data[pos:skip_to]
            )
        size = FIXED_FRAME_HEADER_LENGTH + struct.unpack_from("<I", data, pos + 4)[0]
        if rest < size:
            self._pos = len(data)
            raise errors.TruncatedFrameError(f"frame of {size} bytes, only {rest} left")
        self._pos = pos + size
        return data[pos : pos + size]

    def __iter__(self) -> Iterator[bytes]:
        while (frame := self.next_frame()) is not None:
            yield frame


class ProtoMessage(Protocol):
    """What a generated protobuf message class offers (google.protobuf.message.Message)."""

    def SerializeToString(self) -> bytes: ...

    def ParseFromString(self, data: bytes) -> Any: ...


class FixedProtoFraming:
    """Fixed frames of protobuf messages of one class (``message_type``)."""

    content_type = CONTENT_TYPE_PROTO_FIXED

    def __init__(self, message_type: type[ProtoMessage] | None = None) -> None:
        self._message_type = message_type

    def marshal(self, message: Any) -> bytes:
        if isinstance(message, bytes | bytearray):
            return encode_fixed_frame(bytes(message))
        serialize = getattr(message, "SerializeToString", None)
        if serialize is None:
            raise errors.InvalidInputError(
                "message must be bytes or a protobuf message (with SerializeToString)"
            )
        return encode_fixed_frame(serialize())

    def unmarshal(self, data: bytes) -> Any:
        frame = FixedFrameReader(data).next_frame()
        if frame is None:
            raise errors.TruncatedFrameError("empty value: no frame")
        payload = frame[FIXED_FRAME_HEADER_LENGTH:]
        if self._message_type is None:
            return payload
        message = self._message_type()
        try:
            message.ParseFromString(payload)
        except Exception as exc:  # protobuf's DecodeError is not exported stably
            raise errors.FramingError(f"bad protobuf in frame: {exc}") from exc
        return message

    def acknowledgement(self, uuid: _uuid.UUID, template: Any) -> bytes:
        # A protobuf message's UUID field is application-defined: acks carry an empty
        # message, and the UUID travels in the header.
        return encode_fixed_frame(b"")


# ---------------------------------------------------------------- CSV


def _csv_needs_quotes(value: str) -> bool:
    # Go's encoding/csv rule (comma ','): empty is bare; `\.` and any field holding a
    # comma, quote, CR or LF, or starting with a Unicode space, is quoted.
    if value == "":
        return False
    if value == "\\.":
        return True
    if any(c in value for c in ',"\r\n'):
        return True
    return value[0] in _GO_SPACES


# unicode.IsSpace in Go: ASCII and Latin-1 spaces plus the White_Space property.
_GO_SPACES = frozenset(
    "\t\n\v\f\r \x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000"
    + "".join(chr(c) for c in range(0x2000, 0x200B))
)


def encode_csv_record(fields: Sequence[str]) -> bytes:
    """One CSV record and ``\\n``, quoted as Go's csv.Writer quotes it."""
    parts = []
    for value in fields:
        if type(value) is not str:
            raise errors.InvalidInputError("CSV fields must be str")
        if _csv_needs_quotes(value):
            parts.append('"' + value.replace('"', '""') + '"')
        else:
            parts.append(value)
    return (",".join(parts) + "\n").encode()


def decode_csv_record(data: bytes) -> list[str]:
    """The fields of one CSV record (``data`` holds exactly one)."""
    try:
        rows = list(csv.reader(io.StringIO(data.decode(), newline="")))
    except (UnicodeDecodeError, csv.Error) as exc:
        raise errors.FramingError(f"bad CSV record: {exc}") from exc
    if len(rows) != 1:
        raise errors.FramingError(f"expected one CSV record, got {len(rows)}")
    return rows[0]


@dataclass(slots=True)
class CsvRecord:
    """A CSV message whose first field is its UUID (as text)."""

    fields: list[str]

    @property
    def uuid(self) -> _uuid.UUID:
        return _uuid.UUID(self.fields[0])


class CsvFraming:
    content_type = CONTENT_TYPE_CSV

    def marshal(self, message: Any) -> bytes:
        fields = message.fields if isinstance(message, CsvRecord) else message
        return encode_csv_record(fields)

    def unmarshal(self, data: bytes) -> CsvRecord:
        fields = decode_csv_record(data)
        if not fields:
            raise errors.FramingError("CSV record has no fields")
        try:
            _uuid.UUID(fields[0])
        except ValueError as exc:
            raise errors.FramingError(f"first CSV field is not a UUID: {fields[0]!r}") from exc
        return CsvRecord(fields)

    def acknowledgement(self, uuid: _uuid.UUID, template: Any) -> bytes:
        width = len(template.fields) if isinstance(template, CsvRecord) else 1
        return encode_csv_record([str(uuid)] + [""] * (width - 1))


# ---------------------------------------------------------------- registry

_REGISTRY: dict[str, Framing] = {}


def register_framing(framing: Framing) -> None:
    """Register (or replace) the framing of its content type."""
    _REGISTRY[framing.content_type] = framing


def framing_for(content_type: str) -> Framing:
    try:
        return _REGISTRY[content_type]
    except KeyError:
        raise errors.InvalidInputError(
            f"content_type {content_type!r} has no registered framing"
        ) from None


register_framing(JsonLinesFraming())
register_framing(FixedProtoFraming())
register_framing(CsvFraming())
