"""plain_publish_request gives protobuf's own bytes for the plain PublishRequest, framed."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from liftbridge_client._proto import api_pb2
from liftbridge_client._publish_wire import plain_publish_request

_text = st.text(alphabet=st.characters(codec="utf-8"), max_size=300)


@given(
    value=st.binary(max_size=20_000),
    stream=_text,
    partition=st.integers(0, 2**31 - 1),
    cid=_text,
    policy=st.integers(-1, 4),
)
def test_the_bytes_are_protobufs(
    value: bytes, stream: str, partition: int, cid: str, policy: int
) -> None:
    got = plain_publish_request(value, stream, partition, cid, policy)
    if got is None:  # outside the plain case: the caller builds the message
        assert not (value and stream and cid) or partition >= 0x80 or policy not in (0, 1, 2)
        return
    req = api_pb2.PublishRequest(
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
