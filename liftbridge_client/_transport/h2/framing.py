"""gRPC over HTTP/2 without IO: what ends a call, as a gRPC status, and message framing.

Statuses
--------

What ends an HTTP/2 gRPC call, as a gRPC status (no IO).

Trailers (or a trailers-only response) carry ``grpc-status`` and a percent-encoded
``grpc-message``; a response without them is mapped from its HTTP status; a
stream reset from its HTTP/2 error code, as gRPC's HTTP/2 protocol spec says.
GOAWAY and a lost connection are UNAVAILABLE, as grpc-core reports them, so
`_transport.grpc` turns all of these into the same typed errors as on grpc.aio.

Framing
-------

gRPC length-prefixed messages over a byte stream (sans-IO).

Each message is a 1-byte compressed flag, a 4-byte big-endian length, then the
bytes. `MessageSplitter` takes the DATA payloads of one call as they come, cut
anywhere, and returns every message completed by each piece in one pass.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import Final
from urllib.parse import unquote_to_bytes

import grpc
from grpc import StatusCode
from h2.errors import ErrorCodes

from liftbridge_client._native import speedups

__all__ = [
    "DEFAULT_MAX_MESSAGE",
    "H2RpcError",
    "MessageSplitter",
    "data_run",
    "data_run_twin",
    "encode_message",
    "encode_timeout",
    "from_http_status",
    "from_reset",
    "split_messages",
    "split_messages_twin",
    "status_error",
]

# ---- Statuses --------------------------------------------------------------------------

_BY_NUMBER: Final[dict[int, StatusCode]] = {c.value[0]: c for c in StatusCode}


class H2RpcError(grpc.RpcError):
    """A gRPC call over the h2 transport failed: the same ``code()``/``details()`` as grpc.aio."""

    def __init__(self, code: StatusCode, details: str) -> None:
        super().__init__(f"{code.name}: {details}")
        self._code = code
        self._details = details

    def code(self) -> StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


def _decode_message(raw: bytes) -> str:
    return unquote_to_bytes(raw).decode("utf-8", "replace")


def status_error(headers: Iterable[tuple[bytes, bytes]]) -> H2RpcError | None:
    """The status trailers carry: None for OK, an `H2RpcError` otherwise."""
    status: bytes | None = None
    message = b""
    http: bytes | None = None
    for name, value in headers:
        if name == b"grpc-status":
            status = value
        elif name == b"grpc-message":
            message = value
        elif name == b":status":
            http = value
    if status is None:
        if http is not None and http != b"200":
            return H2RpcError(from_http_status(int(http)), f"HTTP status {http.decode()}")
        return H2RpcError(StatusCode.UNKNOWN, "the call ended without a grpc-status")
    try:
        number = int(status)
    except ValueError:
        return H2RpcError(StatusCode.UNKNOWN, f"bad grpc-status {status!r}")
    if number == 0:
        return None
    code = _BY_NUMBER.get(number, StatusCode.UNKNOWN)
    return H2RpcError(code, _decode_message(message))


_HTTP: Final[dict[int, StatusCode]] = {
    400: StatusCode.INTERNAL,
    401: StatusCode.UNAUTHENTICATED,
    403: StatusCode.PERMISSION_DENIED,
    404: StatusCode.UNIMPLEMENTED,
    429: StatusCode.UNAVAILABLE,
    502: StatusCode.UNAVAILABLE,
    503: StatusCode.UNAVAILABLE,
    504: StatusCode.UNAVAILABLE,
}


def from_http_status(status: int) -> StatusCode:
    """gRPC's mapping of an HTTP status that came without a grpc-status."""
    return _HTTP.get(status, StatusCode.UNKNOWN)


_RESET: Final[dict[int, StatusCode]] = {
    ErrorCodes.REFUSED_STREAM: StatusCode.UNAVAILABLE,
    ErrorCodes.CANCEL: StatusCode.CANCELLED,
    ErrorCodes.ENHANCE_YOUR_CALM: StatusCode.RESOURCE_EXHAUSTED,
    ErrorCodes.INADEQUATE_SECURITY: StatusCode.PERMISSION_DENIED,
}


def from_reset(error_code: int) -> H2RpcError:
    """The status of a call the server reset with RST_STREAM ``error_code``."""
    try:
        name = ErrorCodes(error_code).name
    except ValueError:
        name = str(error_code)
    return H2RpcError(
        _RESET.get(error_code, StatusCode.INTERNAL), f"stream reset by the server ({name})"
    )


_UNITS: Final = ((1, b"n"), (1_000, b"u"), (1_000_000, b"m"), (1_000_000_000, b"S"))


def encode_timeout(seconds: float) -> bytes:
    """A ``grpc-timeout`` value: at most 8 digits, in the finest unit that fits."""
    nanos = max(1, round(seconds * 1e9))
    for scale, unit in _UNITS:
        value = -(-nanos // scale)  # round up: never ask for less time than given
        if value < 100_000_000:
            return str(value).encode() + unit
    minutes = -(-nanos // 60_000_000_000)
    if minutes < 100_000_000:
        return str(minutes).encode() + b"M"
    return str(min(99_999_999, -(-nanos // 3_600_000_000_000))).encode() + b"H"


# ---- Framing ---------------------------------------------------------------------------

DEFAULT_MAX_MESSAGE: Final = 64 * 1024 * 1024  # as the grpc.aio channels' receive limit
_HEAD: Final = struct.Struct(">BI")
_unpack_head = _HEAD.unpack_from
_pack_head = _HEAD.pack


def encode_message(payload: bytes) -> bytes:
    """One uncompressed gRPC message."""
    return _pack_head(0, len(payload)) + payload


def split_messages_twin(data: bytes, max_length: int) -> tuple[list[bytes], int]:
    """The payloads of the complete, uncompressed gRPC messages of at most ``max_length``
    bytes at the start of ``data``, in order, and the offset where the walk stopped: at an
    incomplete message, at a head the caller must refuse (a flag set, too long), or at
    the end. (The C accelerator's ``split_messages`` is the same walk.)"""
    out: list[bytes] = []
    size = len(data)
    i = 0
    while size - i >= 5:
        flag, length = _unpack_head(data, i)
        end = i + 5 + length
        if flag or length > max_length or end > size:
            break
        out.append(data[i + 5 : end])
        i = end
    return out, i


split_messages = split_messages_twin if speedups is None else speedups.split_messages


def data_run_twin(data: bytes, i: int, head: bytes, max_frame: int) -> tuple[bytes, int, int]:
    """From offset ``i``, the complete HTTP/2 frames whose type, flags and stream id (the
    6 bytes after the length) equal ``head`` and whose length is at most ``max_frame``:
    their payloads joined, the sum of their lengths, and the offset after the last one.
    ``head`` is that of a DATA frame without flags, so each payload is the whole frame.
    (The C accelerator's ``data_run`` is the same walk, for a read's hundreds of frames.)"""
    size = len(data)
    if not 0 <= i <= size:
        raise ValueError("data_run: offset out of range")
    parts: list[bytes] = []
    flow = 0
    while size - i >= 9:
        length = int.from_bytes(data[i : i + 3], "big")
        end = i + 9 + length
        if length > max_frame or end > size or not data.startswith(head, i + 3):
            break
        parts.append(data[i + 9 : end])
        flow += length
        i = end
    return b"".join(parts), flow, i


data_run = data_run_twin if speedups is None else speedups.data_run


class MessageSplitter:
    """Cuts a call's DATA bytes into gRPC messages; keeps an incomplete tail.

    A message flagged compressed is refused (this client never offers
    compression, so the server must not send any), and so is one longer than
    ``max_length``: both raise `H2RpcError` and the splitter must not be fed again.
    """

    __slots__ = ("_have", "_max", "_need", "_parts")

    def __init__(self, max_length: int = DEFAULT_MAX_MESSAGE) -> None:
        self._max = max_length
        self._parts: list[bytes] = []  # an incomplete tail, in pieces (no quadratic joins)
        self._have = 0  # bytes in _parts
        self._need = 0  # bytes the message in _parts needs in all (0: its head is not complete)

    @property
    def buffered(self) -> int:
        """Bytes held for a message not complete yet."""
        return self._have

    def feed(self, data: bytes) -> list[bytes]:
        """The messages ``data`` completes, in order."""
        if self._parts:
            self._parts.append(data)
            self._have += len(data)
            if not self._need:
                if self._have < 5:
                    return []
                head = b"".join(self._parts)
                self._parts = [head]
                self._need = self._check(head, 0)
            if self._have < self._need:
                return []
            data = b"".join(self._parts)
            self._parts = []
            self._have = self._need = 0
        out, i = split_messages(data, self._max)
        size = len(data)
        if i < size:
            # An incomplete message (kept), or a head to refuse (`_check` raises).
            self._need = self._check(data, i) if size - i >= 5 else 0
            self._parts.append(data[i:] if i else data)
            self._have = size - i
        return out

    def _check(self, data: bytes, at: int) -> int:
        """The whole size of the message whose head is at ``at``; raise if it is refused."""
        flag: int
        length: int
        flag, length = _unpack_head(data, at)
        if flag == 1:
            raise H2RpcError(
                StatusCode.INTERNAL,
                "the server sent a compressed gRPC message; this client offers no "
                "compression (grpc-accept-encoding) and refuses it",
            )
        if flag:
            raise H2RpcError(StatusCode.INTERNAL, f"bad gRPC message flag {flag:#x}")
        if length > self._max:
            raise H2RpcError(
                StatusCode.RESOURCE_EXHAUSTED,
                f"received message larger than max ({length} vs. {self._max})",
            )
        return 5 + length
