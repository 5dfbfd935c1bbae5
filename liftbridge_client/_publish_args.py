"""A publish's arguments, checked: the general publish path's one call into the checks.

Pure: no IO. Beside `_validate` (whose checks these use): `_publish.publisher.Publisher`
runs every publish that does not take the one-step path through `stream_publish` (or
`subject_publish`) before anything is queued, so bad input raises `InvalidInputError`
naming the argument and nothing is sent. Each check returns the value in the form the
publisher uses (exact bytes, a plain dict of headers, float seconds, an `AckPolicy`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple, cast

from liftbridge_client import _validate, errors
from liftbridge_client.envelope import check_header_keys
from liftbridge_client.models import AckPolicy
from liftbridge_client.options import Transport
from liftbridge_client.partitioning import Partitioner

__all__ = [
    "INT32_MAX",
    "INT64_MAX",
    "PublishArgs",
    "SubjectArgs",
    "ack_policy_arg",
    "as_bytes",
    "correlation_id_arg",
    "headers_arg",
    "seconds_arg",
    "stream_publish",
    "subject_publish",
]

INT32_MAX = _validate.INT32_MAX
INT64_MAX = _validate.INT64_MAX


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
    """Seconds > 0 (a number or a timedelta, see `_validate.seconds`); ``default`` for None."""
    if value is None:
        return default
    return _validate.seconds(name, value)


def correlation_id_arg(value: object) -> str:
    return _validate.text("correlation_id", value)


class PublishArgs(NamedTuple):
    """A stream publish's arguments, checked and converted (None: the publisher's default)."""

    stream: str
    value: bytes
    key: bytes | None
    headers: dict[str, bytes] | None
    partition: int | None  # explicit partition wins over the partitioner
    partitioner: Partitioner | None  # None: ClientOptions.partitioner
    ack_policy: AckPolicy
    expected_offset: int  # optimistic concurrency; -1 = no check
    correlation_id: str | None  # None: a fresh unique id
    transport: Transport | None  # None: the client's
    ack_wait: float | None  # seconds; None: ClientOptions.ack_wait


def stream_publish(
    stream: object,
    value: object,
    key: object,
    headers: object,
    partition: object,
    partitioner: object,
    ack_policy: object,
    expected_offset: object,
    correlation_id: object,
    transport: object,
    ack_wait: object,
) -> PublishArgs:
    """Every argument of `Client.publish` (send, publish_nowait) checked, in this order."""
    checked_stream = _validate.text("stream", stream)
    checked_value = as_bytes("value", value)
    checked_key = None if key is None else as_bytes("key", key)
    checked_headers = headers_arg(headers)
    checked_partition = (
        None if partition is None else _validate.int_arg("partition", partition, 0, INT32_MAX)
    )
    if partitioner is not None and not callable(partitioner):
        raise errors.InvalidInputError(f"partitioner must be callable, got {partitioner!r}")
    policy = ack_policy_arg(ack_policy)
    offset = -1
    if expected_offset is not None:
        offset = _validate.int_arg("expected_offset (-1: no check)", expected_offset, -1, INT64_MAX)
        if offset != -1 and policy is AckPolicy.NONE:
            raise errors.InvalidInputError(
                "expected_offset needs an ack (ack_policy LEADER or ALL): with NONE "
                "the outcome of the check could never be reported"
            )
    if transport is not None and not isinstance(transport, Transport):
        raise errors.InvalidInputError(f"transport must be a Transport, got {transport!r}")
    cid = None if correlation_id is None else correlation_id_arg(correlation_id)
    return PublishArgs(
        checked_stream,
        checked_value,
        checked_key,
        checked_headers,
        checked_partition,
        cast("Partitioner | None", partitioner),
        policy,
        offset,
        cid,
        transport,
        None if ack_wait is None else _validate.seconds("ack_wait", ack_wait),
    )


class SubjectArgs(NamedTuple):
    """`Client.publish_to_subject`'s arguments, checked and converted."""

    subject: str
    value: bytes
    key: bytes  # b"": none
    headers: dict[str, bytes] | None
    ack_policy: AckPolicy
    correlation_id: str | None  # None: a fresh unique id
    ack_wait: float | None  # seconds; None: ClientOptions.ack_wait


def subject_publish(
    subject: object,
    value: object,
    key: object,
    headers: object,
    ack_policy: object,
    correlation_id: object,
    ack_wait: object,
) -> SubjectArgs:
    """Every argument of `Client.publish_to_subject` checked, in this order."""
    checked_subject = _validate.publish_subject(subject)
    checked_value = as_bytes("value", value)
    checked_key = b"" if key is None else as_bytes("key", key)
    checked_headers = headers_arg(headers)
    policy = ack_policy_arg(ack_policy)
    cid = None if correlation_id is None else correlation_id_arg(correlation_id)
    return SubjectArgs(
        checked_subject,
        checked_value,
        checked_key,
        checked_headers,
        policy,
        cid,
        None if ack_wait is None else _validate.seconds("ack_wait", ack_wait),
    )
