"""PublishAsync's hot wire shapes, without building protobuf messages.

The request: the gRPC message of a plain PublishRequest, without building the
protobuf message.

Building ``api_pb2.PublishRequest`` and serializing it costs more per publish
than the rest of the gRPC publish hot path; a request with no key, headers or
offset check is a handful of fields in a fixed order, so it is joined from
cached pieces instead, behind the 5-byte gRPC message head (so the h2 stream
writes it as it is). The bytes are exactly protobuf's (property-tested against
``SerializeToString``), and anything out of the plain case returns None for the
caller to build the message.

The response: `plain_ack` picks the correlation id and the encoded Ack out of
the common PublishResponse (an ack without error, naming its publish), which is
all the dispatcher needs; anything else returns None for protobuf to decode.
"""

from __future__ import annotations

import struct

from liftbridge_client.envelope import _varint as varint

__all__ = ["plain_ack", "plain_publish_request"]

# Fields 8 (ackPolicy; 0, LEADER, is omitted) and 9 (expectedOffset = -1: the publisher
# always sends it without a check), the request's last bytes, by ack policy.
_NO_OFFSET_CHECK = b"\x48" + b"\xff" * 9 + b"\x01"
_TAILS = {0: _NO_OFFSET_CHECK, 1: b"\x40\x01" + _NO_OFFSET_CHECK, 2: b"\x40\x02" + _NO_OFFSET_CHECK}
# Field 4 (partition; 0 is omitted) for partitions below 128 (a one-byte varint).
_PARTITIONS = [b""] + [b"\x20" + bytes((p,)) for p in range(1, 0x80)]
_STREAM_FIELDS: dict[str, bytes] = {}  # field 3 by stream name
_STREAM_FIELDS_MAX = 1024  # the cache starts over beyond this many streams
_head = struct.Struct(">BI").pack  # gRPC: not compressed, then the length


def plain_publish_request(
    value: bytes, stream: str, partition: int, correlation_id: str, ack_policy: int
) -> bytes | None:
    """The gRPC message (head, then the bytes) of ``PublishRequest(value=, stream=,
    partition=, correlationId=, ackPolicy=, expectedOffset=-1)``, or None outside
    the plain case."""
    tail = _TAILS.get(ack_policy)
    if tail is None or not (value and stream and correlation_id) or not 0 <= partition < 0x80:
        return None
    stream_field = _STREAM_FIELDS.get(stream)
    if stream_field is None:
        name = stream.encode()
        stream_field = b"\x1a" + varint(len(name)) + name
        if len(_STREAM_FIELDS) >= _STREAM_FIELDS_MAX:
            _STREAM_FIELDS.clear()
        _STREAM_FIELDS[stream] = stream_field
    cid = correlation_id.encode()
    body = b"".join(
        (
            b"\x12",
            varint(len(value)),
            value,
            stream_field,
            _PARTITIONS[partition],
            b"\x3a",
            varint(len(cid)),
            cid,
            tail,
        )
    )
    return _head(0, len(body)) + body


def plain_ack(response: bytes) -> tuple[str, bytes] | None:
    """``(correlationId, encoded ack)`` of a PublishResponse that is exactly field 1 (the
    ack) then field 3 (the correlation id), each under 128 bytes, whose ack holds no
    0x50 byte: the tag of Ack.ackError (field 10), so no error can hide in it. None
    for anything else (an asyncError, an error ack, other shapes): decode it fully.
    """
    size = len(response)
    if size < 4 or response[0] != 0x0A or response[1] >= 0x80:
        return None
    end = response[1] + 2
    if (
        end + 2 > size
        or response[end] != 0x1A
        or response[end + 1] >= 0x80
        or response[end + 1] + end + 2 != size
        or response.find(b"\x50", 2, end) >= 0
    ):
        return None
    try:
        cid = response[end + 2 :].decode()
    except UnicodeDecodeError:
        return None
    return cid, response[2:end]
