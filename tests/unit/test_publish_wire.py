"""plain_publish_request and its C twin give protobuf's own bytes for the plain
PublishRequest, framed;
the one-step paths' header encoding (`envelope.plain_header_entries`) gives protobuf's map
bytes, and takes exactly the headers whose general-path check cannot fail."""

from __future__ import annotations

import os
import types
from collections.abc import Callable, Mapping
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from liftbridge_client import envelope, errors
from liftbridge_client._proto import api_pb2
from liftbridge_client._publish.wire import plain_ack, plain_publish_request
from liftbridge_client._publish_args import headers_arg
from liftbridge_client.envelope import (
    MAX_HEADER_KEY_BYTES,
    MAX_PLAIN_HEADERS,
    MESSAGE_HEADERS_TAG,
    REQUEST_HEADERS_TAG,
    plain_header_entries,
)
from liftbridge_client.envelope import _varint as varint

_text = st.text(alphabet=st.characters(codec="utf-8"), max_size=300)


try:  # the C twin as built (liftbridge_client/_speedups.c)
    from liftbridge_client import _speedups as compiled
except ImportError:
    compiled = None  # type: ignore[assignment]


def _c_publish_request(*args: Any) -> bytes | None:
    if compiled is None:
        assert not os.environ.get("CI"), "the C accelerator is not built (test_speedups.py)"
        pytest.skip("the C accelerator is not built")
    return compiled.publish_request(*args)


# Each builder, and the partitions it encodes itself (the Python one leaves those from 128
# to protobuf's general path).
BUILDERS = [
    pytest.param(plain_publish_request, 0x80, id="python"),
    pytest.param(_c_publish_request, 2**31, id="c"),
]


@pytest.mark.parametrize(("build", "partitions"), BUILDERS)
@given(
    value=st.binary(max_size=20_000),
    stream=_text,
    partition=st.integers(0, 2**31 - 1),
    cid=_text,
    policy=st.integers(-1, 4),
    key=st.binary(max_size=300),
    headers=st.dictionaries(_text, st.binary(max_size=300), max_size=MAX_PLAIN_HEADERS),
)
def test_the_bytes_are_protobufs(
    build: Callable[..., bytes | None],
    partitions: int,
    value: bytes,
    stream: str,
    partition: int,
    cid: str,
    policy: int,
    key: bytes,
    headers: dict[str, bytes],
) -> None:
    entries = plain_header_entries(headers, REQUEST_HEADERS_TAG)
    assert entries is not None  # exact str names and bytes values, few: plain
    got = build(value, stream, partition, cid, policy, key, entries)
    plain = bool(value and stream and cid) and partition < partitions and policy in (0, 1, 2)
    assert (got is not None) == plain  # else the caller builds the message
    if got is None:
        return
    req = api_pb2.PublishRequest(
        key=key,
        value=value,
        stream=stream,
        partition=partition,
        correlationId=cid,
        ackPolicy=policy,  # type: ignore[arg-type]
        expectedOffset=-1,
    )
    req.headers.update(headers)
    body = req.SerializeToString()
    assert got[:5] == b"\x00" + len(body).to_bytes(4, "big")  # uncompressed, its length
    assert api_pb2.PublishRequest.FromString(got[5:]) == req
    if len(headers) <= 1:  # one order only: the general path's exact bytes
        assert got[5:] == body
    # Protobuf's bytes with the map's entries in the dict's order (protobuf writes
    # fields in number order: 1-4, the map (5), then 6-9).
    head = api_pb2.PublishRequest(key=key, value=value, stream=stream, partition=partition)
    tail = api_pb2.PublishRequest(
        correlationId=cid,
        ackPolicy=policy,  # type: ignore[arg-type]
        expectedOffset=-1,
    )
    expected = head.SerializeToString() + _entries(headers, 5) + tail.SerializeToString()
    assert got[5:] == expected


def _entries(headers: dict[str, bytes], field: int) -> bytes:
    """Protobuf's bytes of each entry alone, in the dict's order."""
    msg_type = api_pb2.PublishRequest if field == 5 else api_pb2.Message
    return b"".join(msg_type(headers={n: v}).SerializeToString() for n, v in headers.items())


@given(
    value=st.binary(max_size=3000),
    key=st.binary(max_size=300),
    headers=st.dictionaries(_text, st.binary(max_size=300), max_size=MAX_PLAIN_HEADERS),
    inbox=st.sampled_from(["", "_INBOX.abc.ack"]),
    cid=st.text(alphabet="0123456789abcdef-", min_size=1, max_size=40),
    policy=st.sampled_from([api_pb2.LEADER, api_pb2.ALL, api_pb2.NONE]),
)
def test_the_nats_envelope_with_headers_is_the_general_one(
    value: bytes, key: bytes, headers: dict[str, bytes], inbox: str, cid: str, policy: int
) -> None:
    entries = plain_header_entries(headers, MESSAGE_HEADERS_TAG)
    assert entries is not None
    got = envelope.encode_message_plain(value, inbox, cid, policy, key, entries, headers)
    general = envelope.encode_message(
        value, key=key, headers=headers, ack_inbox=inbox, correlation_id=cid, ack_policy=policy
    )
    assert envelope.decode_message(got) == envelope.decode_message(general)
    if len(headers) <= 1:  # one order only: the general path's exact bytes
        assert got == general
    if not value:
        return  # not plain: encode_message made it (its own map order)
    head = api_pb2.Message(offset=-1, key=key, value=value)
    tail = api_pb2.Message(ackInbox=inbox, correlationId=cid, ackPolicy=policy)  # type: ignore[arg-type]
    payload = head.SerializeToString() + _entries(headers, 9) + tail.SerializeToString()
    assert got == envelope.encode(envelope.MsgType.PUBLISH, payload)


_names = st.one_of(
    _text,
    st.text(max_size=5),  # lone surrogates: not UTF-8
    st.just("n" * (MAX_HEADER_KEY_BYTES + 1)),
    st.binary(max_size=5),
    st.integers(),
    st.none(),
)


def _view(data: bytes) -> memoryview:
    return memoryview(data)


_values = st.one_of(
    st.binary(max_size=50),
    st.binary(max_size=50).map(bytearray),
    st.binary(max_size=50).map(_view),
    st.text(max_size=5),
    st.none(),
)


class _StrName(str):
    pass


@given(
    items=st.lists(st.tuples(_names, _values), max_size=MAX_PLAIN_HEADERS + 3),
    kind=st.sampled_from(["dict", "proxy", "subclass names"]),
)
def test_headers_take_the_one_step_path_only_when_their_check_cannot_fail(
    items: list[tuple[object, object]], kind: str
) -> None:
    """What `plain_header_entries` refuses goes to the general path, which converts it or
    says what is wrong; what it takes, the general check passes unchanged."""
    headers: Mapping[object, object] = dict(items)
    if kind == "proxy":
        headers = types.MappingProxyType(dict(items))
    elif kind == "subclass names":
        headers = {_StrName(n) if type(n) is str else n: v for n, v in items}
    got = plain_header_entries(headers, REQUEST_HEADERS_TAG)
    plain = (
        type(headers) is dict
        and len(headers) <= MAX_PLAIN_HEADERS
        and all(
            type(n) is str
            and type(v) is bytes
            and n.encode(errors="surrogatepass") == n.encode(errors="replace")
            and len(n.encode(errors="replace")) <= MAX_HEADER_KEY_BYTES
            for n, v in headers.items()
        )
    )
    assert (got is not None) == plain
    if got is None:
        return
    assert headers_arg(headers) == (headers or None)  # the general check passes, unchanged
    assert got == _entries(headers, 5)  # type: ignore[arg-type]


def test_the_general_path_says_what_is_wrong_with_headers_the_one_step_path_refuses() -> None:
    for bad, says in [
        ({b"name": b"v"}, "header names must be str"),
        ({"name": "text"}, "must be bytes"),
        ({"\ud800": b"v"}, "UTF-8"),
        ({"n" * (MAX_HEADER_KEY_BYTES + 1): b"v"}, f"exceeds {MAX_HEADER_KEY_BYTES}"),
    ]:
        assert plain_header_entries(bad, MESSAGE_HEADERS_TAG) is None
        with pytest.raises(errors.InvalidInputError, match=says):
            headers_arg(bad)
    # Refused here but valid: converted by the general path.
    for fine in [{"a": bytearray(b"v")}, types.MappingProxyType({"a": b"v"})]:
        assert plain_header_entries(fine, MESSAGE_HEADERS_TAG) is None
        assert headers_arg(fine) == {"a": b"v"}
    many = {str(i): b"" for i in range(MAX_PLAIN_HEADERS + 1)}
    assert plain_header_entries(many, MESSAGE_HEADERS_TAG) is None
    # Empty: no headers on either path.
    assert plain_header_entries({}, MESSAGE_HEADERS_TAG) == b""
    assert headers_arg({}) is None


_acks = st.builds(
    api_pb2.Ack,
    stream=_text,
    partitionSubject=_text,
    msgSubject=_text,
    offset=st.integers(-(2**63), 2**63 - 1),
    ackInbox=_text,
    correlationId=_text,
    ackPolicy=st.integers(0, 3),
    receptionTimestamp=st.integers(0, 2**63 - 1),
    commitTimestamp=st.integers(0, 2**63 - 1),
    ackError=st.sampled_from([0, 0, 0, 1, 2, 3, 4]),
)


@given(
    ack=st.none() | _acks,
    async_error=st.none() | st.builds(api_pb2.PublishAsyncError, message=_text),
    cid=_text,
    same_cid=st.booleans(),
)
def test_plain_ack_is_taken_only_from_a_response_it_reads_right(
    ack: api_pb2.Ack | None,
    async_error: api_pb2.PublishAsyncError | None,
    cid: str,
    same_cid: bool,
) -> None:
    resp = api_pb2.PublishResponse(correlationId=cid)
    if ack is not None:
        resp.ack.CopyFrom(ack)
        if same_cid:  # as the server answers: the ack names the publish too
            resp.ack.correlationId = cid
    if async_error is not None:
        resp.asyncError.CopyFrom(async_error)
    raw = resp.SerializeToString()
    got = plain_ack(raw)
    if got is None:
        return  # protobuf decodes it: always right
    decoded = api_pb2.PublishResponse.FromString(raw)
    assert not decoded.HasField("asyncError")
    assert decoded.ack.ackError == api_pb2.Ack.OK
    assert got == (decoded.correlationId, decoded.ack.SerializeToString())
    assert got[0]  # an ack names its publish


def test_plain_ack_takes_the_servers_common_ack() -> None:
    """What v1.9.0 sends for a publish of this client (tests/integration runs it for real)."""
    ack = api_pb2.Ack(
        stream="orders",
        partitionSubject="orders",
        msgSubject="orders",
        offset=123_456,
        correlationId="0123456789abcdef-42",
        receptionTimestamp=1_763_900_000_123_456_789,
        commitTimestamp=1_763_900_000_223_456_789,
    )
    raw = api_pb2.PublishResponse(ack=ack, correlationId=ack.correlationId).SerializeToString()
    assert plain_ack(raw) == ("0123456789abcdef-42", ack.SerializeToString())
    # The server's ack inbox may hold any byte (here 0x50, the ackError tag, as "P").
    ack.ackInbox = "lbtest-ccd37b69eb.ack.mHXHtPNjOVwcs54nk2Q3D32" + "x" * 100  # 2-byte length
    raw = api_pb2.PublishResponse(ack=ack, correlationId=ack.correlationId).SerializeToString()
    assert plain_ack(raw) == ("0123456789abcdef-42", ack.SerializeToString())
    # An error ack, even with a field this client does not know after the error.
    errored_ack = ack.SerializeToString() + b"\x50\x03" + b"\x58\x01"
    cid = ack.correlationId.encode()
    raw = b"\x0a" + varint(len(errored_ack)) + errored_ack + b"\x1a" + varint(len(cid)) + cid
    assert api_pb2.PublishResponse.FromString(raw).ack.ackError == api_pb2.Ack.TOO_LARGE
    assert plain_ack(raw) is None
    # The ack naming another publish than the response: decoded fully.
    other = api_pb2.PublishResponse(ack=ack, correlationId="other").SerializeToString()
    assert plain_ack(other) is None
    failed = api_pb2.PublishResponse(correlationId="c")
    failed.ack.CopyFrom(ack)
    failed.ack.ackError = api_pb2.Ack.INCORRECT_OFFSET
    assert plain_ack(failed.SerializeToString()) is None
    errored = api_pb2.PublishResponse(correlationId="c")
    errored.asyncError.message = "no"
    assert plain_ack(errored.SerializeToString()) is None
