# The C accelerator's functions (_speedups.c); each mirrors a pure-Python twin.
from collections.abc import Callable, Mapping
from typing import TypeVar

from liftbridge_client.models import Ack

_T = TypeVar("_T")
_E = TypeVar("_E")

def serve_routed(
    data: bytes,
    table: dict[int, Callable[[bytes], None]],
    counts: dict[str, int] | None,
    report: Callable[[int, Exception], object],
    /,
) -> tuple[int, bool]: ...

MAX_PLAIN_HEADERS: int
MAX_HEADER_KEY_BYTES: int

def scan_ack(
    data: bytes, ack_class: type[Ack], /
) -> tuple[str, str, str, int, int, Ack] | None: ...
def pending_ack(
    data: bytes, ack_class: type[Ack], entries: Mapping[str, _E], /
) -> tuple[_E, Ack] | None: ...
def split_messages(data: bytes, max_length: int, /) -> tuple[list[bytes], int]: ...
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
def plain_response(response: bytes, ack_class: type[Ack], /) -> tuple[str, Ack] | None: ...
def headers_of(raw: bytes, /) -> tuple[dict[str, bytes], bytes, bytes] | None: ...
def message_of(
    raw: bytes, message_class: type[_T], headers_class: type, empty: Mapping[str, bytes], /
) -> _T | None: ...
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
