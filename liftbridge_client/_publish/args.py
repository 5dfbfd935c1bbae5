"""Publish arguments: the per-call keyword types, their checks, and the queued item.

Pure: no IO. `Publisher` (in `_publish.publisher`) validates every call with these before
anything is queued, so bad input raises `InvalidInputError` and nothing is sent.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import TypedDict

from liftbridge_client import errors
from liftbridge_client._publish.item import Item
from liftbridge_client._util import validate as _validate
from liftbridge_client.envelope import check_header_keys
from liftbridge_client.models import AckPolicy
from liftbridge_client.options import Transport
from liftbridge_client.partitioning import Partitioner

__all__ = [
    "FAST_KEYS",
    "INT32_MAX",
    "INT64_MAX",
    "PUBLISH_KEYS",
    "SUBJECT_KEYS",
    "Item",
    "PublishArgs",
    "PublishOptions",
    "SubjectOptions",
    "SubjectPublishArgs",
    "ack_policy_arg",
    "as_bytes",
    "correlation_id_arg",
    "headers_arg",
    "reject_unknown",
    "seconds_arg",
]

INT32_MAX = _validate.INT32_MAX
INT64_MAX = _validate.INT64_MAX


class PublishOptions(TypedDict, total=False):
    """Per-call publish options but ``ack_policy`` (which decides the result type)."""

    key: bytes | None
    headers: Mapping[str, bytes] | None
    partition: int | None  # explicit partition wins over the partitioner
    partitioner: Partitioner | None  # default: ClientOptions.partitioner; None: partition 0
    expected_offset: int  # optimistic concurrency; -1 (default) = no check
    correlation_id: str | None  # default: a fresh unique id
    transport: Transport | None  # default: the client's
    ack_wait: float | datetime.timedelta | None  # default: ClientOptions.ack_wait


class PublishArgs(PublishOptions, total=False):
    """Per-call publish options (all keyword-only, all optional)."""

    ack_policy: AckPolicy


class SubjectOptions(TypedDict, total=False):
    """Per-call options of `Client.publish_to_subject` but ``ack_policy``."""

    key: bytes | None
    headers: Mapping[str, bytes] | None
    correlation_id: str | None
    ack_wait: float | datetime.timedelta | None


class SubjectPublishArgs(TypedDict, total=False):
    """Per-call options of `Client.publish_to_subject` (always gRPC)."""

    key: bytes | None
    headers: Mapping[str, bytes] | None
    ack_policy: AckPolicy
    correlation_id: str | None
    ack_wait: float | datetime.timedelta | None


PUBLISH_KEYS = frozenset(PublishArgs.__optional_keys__)
SUBJECT_KEYS = frozenset(SubjectPublishArgs.__optional_keys__)
FAST_KEYS = frozenset({"partition", "ack_policy"})


# ---------------------------------------------------------------- validation


def as_bytes(name: str, value: object) -> bytes:
    if type(value) is bytes:
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    raise errors.InvalidInputError(f"{name} must be bytes, got {type(value).__name__}")


def headers_arg(headers: object) -> dict[str, bytes] | None:
    if headers is None:
        return None
    if not isinstance(headers, Mapping):
        raise errors.InvalidInputError(f"headers must be a mapping, got {type(headers).__name__}")
    out: dict[str, bytes] = {}
    for name, value in headers.items():
        if not isinstance(name, str):
            raise errors.InvalidInputError(f"header names must be str, got {name!r}")
        _validate.text("header name", name, empty_ok=True)
        out[name] = as_bytes(f"header {name[:40]!r}", value)
    check_header_keys(out)  # the server crashes on keys over 32767 bytes
    return out or None


def ack_policy_arg(value: object) -> AckPolicy:
    if isinstance(value, AckPolicy):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return AckPolicy(value)
        except ValueError:
            pass
    raise errors.InvalidInputError(f"ack_policy must be an AckPolicy, got {value!r}")


def seconds_arg(name: str, value: object, default: float) -> float:
    """Seconds > 0 (a number or a timedelta, see `_util.validate.seconds`); ``default`` for None."""
    if value is None:
        return default
    return _validate.seconds(name, value)


def correlation_id_arg(value: object) -> str:
    return _validate.text("correlation_id", value)


def reject_unknown(kw: Mapping[str, object], known: frozenset[str]) -> None:
    unknown = kw.keys() - known
    if unknown:
        raise errors.InvalidInputError(f"unknown publish argument(s): {', '.join(sorted(unknown))}")
