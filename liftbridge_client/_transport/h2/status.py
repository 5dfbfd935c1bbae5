"""What ends an HTTP/2 gRPC call, as a gRPC status (no IO).

Trailers (or a trailers-only response) carry ``grpc-status`` and a percent-encoded
``grpc-message``; a response without them is mapped from its HTTP status; a
stream reset from its HTTP/2 error code, as gRPC's HTTP/2 protocol spec says.
GOAWAY and a lost connection are UNAVAILABLE, as grpc-core reports them, so
`_transport.errors_map` turns all of these into the same typed errors as on grpc.aio.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final
from urllib.parse import unquote_to_bytes

import grpc
from grpc import StatusCode
from h2.errors import ErrorCodes

__all__ = [
    "H2RpcError",
    "encode_timeout",
    "from_http_status",
    "from_reset",
    "status_error",
]

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
