"""The gRPC message of a plain PublishRequest, without building the protobuf message.

Building ``api_pb2.PublishRequest`` and serializing it costs more per publish
than the rest of the gRPC publish hot path; a request with no key, headers or
offset check is a handful of fields in a fixed order, so it is joined from
cached pieces instead, behind the 5-byte gRPC message head (so the h2 stream
writes it as it is). The bytes are exactly protobuf's (property-tested against
``SerializeToString``), and anything out of the plain case returns None for the
caller to build the message.
"""

from __future__ import annotations

import struct

from liftbridge_client.envelope import _varint as varint

__all__ = ["plain_publish_request"]

# Field 9 (expectedOffset) = -1, which the publisher always sends without a check.
_NO_OFFSET_CHECK = b"\x48" + b"\xff" * 9 + b"\x01"
_POLICY = {0: b"", 1: b"\x40\x01", 2: b"\x40\x02"}  # field 8; 0 (LEADER) is omitted
_STREAM_FIELDS: dict[str, bytes] = {}  # field 3 by stream name
_STREAM_FIELDS_MAX = 1024  # the cache starts over beyond this many streams
_head = struct.Struct(">BI").pack  # gRPC: not compressed, then the length


def plain_publish_request(
    value: bytes, stream: str, partition: int, correlation_id: str, ack_policy: int
) -> bytes | None:
    """The gRPC message (head, then the bytes) of ``PublishRequest(value=, stream=,
    partition=, correlationId=, ackPolicy=, expectedOffset=-1)``, or None outside
    the plain case."""
    policy = _POLICY.get(ack_policy)
    if policy is None or not (value and stream and correlation_id) or not 0 <= partition < 0x80:
        return None
    stream_field = _STREAM_FIELDS.get(stream)
    if stream_field is None:
        name = stream.encode()
        stream_field = b"\x1a" + varint(len(name)) + name
        if len(_STREAM_FIELDS) >= _STREAM_FIELDS_MAX:
            _STREAM_FIELDS.clear()
        _STREAM_FIELDS[stream] = stream_field
    cid = correlation_id.encode()
    value_len = varint(len(value))
    cid_len = varint(len(cid))
    part = b"\x20" + bytes((partition,)) if partition else b""
    size = (
        len(value_len) + len(value) + len(stream_field) + len(part)
        + len(cid_len) + len(cid) + len(policy) + 2 + len(_NO_OFFSET_CHECK)
    )  # fmt: skip
    return b"".join(
        (
            _head(0, size),
            b"\x12",
            value_len,
            value,
            stream_field,
            part,
            b"\x3a",
            cid_len,
            cid,
            policy,
            _NO_OFFSET_CHECK,
        )
    )
