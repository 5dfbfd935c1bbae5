"""plain_publish_request gives protobuf's own bytes for the plain PublishRequest, framed."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from liftbridge_client._proto import api_pb2
from liftbridge_client._publish.wire import plain_ack, plain_publish_request
from liftbridge_client.envelope import _varint as varint

_text = st.text(alphabet=st.characters(codec="utf-8"), max_size=300)


@given(
    value=st.binary(max_size=20_000),
    stream=_text,
    partition=st.integers(0, 2**31 - 1),
    cid=_text,
    policy=st.integers(-1, 4),
    key=st.binary(max_size=300),
)
def test_the_bytes_are_protobufs(
    value: bytes, stream: str, partition: int, cid: str, policy: int, key: bytes
) -> None:
    got = plain_publish_request(value, stream, partition, cid, policy, key)
    if got is None:  # outside the plain case: the caller builds the message
        assert not (value and stream and cid) or partition >= 0x80 or policy not in (0, 1, 2)
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
    body = req.SerializeToString()
    assert got[:5] == b"\x00" + len(body).to_bytes(4, "big")  # uncompressed, its length
    assert got[5:] == body
    assert api_pb2.PublishRequest.FromString(got[5:]) == req


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
