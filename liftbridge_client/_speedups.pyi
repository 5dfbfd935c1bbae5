# The C accelerator's functions (_speedups.c); each mirrors a pure-Python twin.
from collections.abc import Callable, Mapping
from typing import TypeVar

_T = TypeVar("_T")
_E = TypeVar("_E")
# The Ack class the scans fill (models.Ack): a type variable, not an import, so that
# models (which imports this module) and this stub form no import cycle.
_A = TypeVar("_A")

def serve_routed(
    data: bytes,
    table: dict[int, Callable[[bytes], None]],
    counts: dict[str, int] | None,
    report: Callable[[int, Exception], object],
    /,
) -> tuple[int, bool]: ...

MAX_PLAIN_HEADERS: int
MAX_HEADER_KEY_BYTES: int

def scan_ack(data: bytes, ack_class: type[_A], /) -> tuple[str, str, str, int, int, _A] | None: ...
def pending_ack(
    data: bytes, ack_class: type[_A], entries: Mapping[str, _E], /
) -> tuple[_E, _A] | None: ...
def split_messages(data: bytes, max_length: int, /) -> tuple[list[bytes], int]: ...
def data_run(data: bytes, i: int, head: bytes, max_frame: int, /) -> tuple[bytes, int, int]: ...
def fnv1a_32(data: bytes, /) -> int: ...
def uuid_fields(raw: object, /) -> tuple[bytes, int, int] | None: ...
def uuid_bytes(producer: object, clock: object, flags: object, /) -> bytes | None: ...
def new_slotted(cls: type[_T], /, *values: object) -> _T: ...
def header_entries(headers: object, tag: int, /) -> bytes | None: ...
def publish_command(
    pub_head: bytes,
    msg_head: bytes,
    value: bytes,
    entries: bytes,
    inbox_field: bytes,
    cid: str,
    policy_field: bytes,
    limit: int,
    key: bytes = ...,
    /,
) -> bytes | None: ...
def plain_response(response: bytes, ack_class: type[_A], /) -> tuple[str, _A] | None: ...
def headers_of(raw: bytes, /) -> tuple[dict[str, bytes], bytes, bytes] | None: ...
def message_of(
    raw: bytes, message_class: type[_T], headers_class: type, empty: Mapping[str, bytes], /
) -> _T | None: ...
def plain_span(raws: list[bytes], /) -> tuple[int, int] | None: ...
def message_columns(
    raws: list[bytes], end: int, magic: bytes, ordered: bool = ..., /
) -> tuple[int, bytes, bytes, bytes, bytes, bytes, bytes, bytes, int, str | list[str]] | None: ...
def publish_request(
    value: bytes,
    stream: str,
    partition: int,
    correlation_id: str,
    ack_policy: int,
    key: bytes,
    header_entries: bytes,
    /,
) -> bytes | None: ...
def eo_fields(
    raw: bytes, uuid_name: bytes, clocks_name: bytes, /
) -> tuple[int, bytes | None, bytes | None, int] | None: ...
