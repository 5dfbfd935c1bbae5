"""The h2 transport's sans-IO layers: gRPC message splitting and status mapping."""

from __future__ import annotations

import itertools
import struct

import grpc
import pytest
from budget import examples
from h2.errors import ErrorCodes
from hypothesis import given, settings
from hypothesis import strategies as st

from liftbridge_client import errors
from liftbridge_client._transport.grpc import map_rpc_error
from liftbridge_client._transport.h2.framing import (
    H2RpcError,
    MessageSplitter,
    encode_message,
    encode_timeout,
    from_http_status,
    from_reset,
    status_error,
)


def cut(data: bytes, points: list[int]) -> list[bytes]:
    """``data`` cut at ``points`` (any positions, repeated or not)."""
    edges = sorted({p % (len(data) + 1) for p in points} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(edges)]


@settings(max_examples=examples(300), deadline=None)
@given(
    st.lists(st.binary(max_size=300), max_size=30),
    st.lists(st.integers(min_value=0), max_size=40),
)
def test_any_cut_of_a_message_stream_yields_the_messages_in_order(
    messages: list[bytes], points: list[int]
) -> None:
    stream = b"".join(encode_message(m) for m in messages)
    splitter = MessageSplitter()
    got: list[bytes] = []
    for piece in cut(stream, points):
        got += splitter.feed(piece)
    assert got == messages
    assert splitter.buffered == 0


def test_a_large_message_in_many_small_pieces_is_assembled_once() -> None:
    payload = bytes(range(256)) * 4096  # 1 MiB
    stream = encode_message(payload) + encode_message(b"next")
    splitter = MessageSplitter()
    got: list[bytes] = []
    for i in range(0, len(stream), 1000):
        got += splitter.feed(stream[i : i + 1000])
        if not got:
            assert splitter.buffered == min(i + 1000, len(stream))
    assert got == [payload, b"next"]


def test_a_compressed_message_is_refused_clearly() -> None:
    splitter = MessageSplitter()
    with pytest.raises(H2RpcError) as info:
        splitter.feed(encode_message(b"ok") + struct.pack(">BI", 1, 3) + b"abc")
    assert info.value.code() is grpc.StatusCode.INTERNAL
    assert "compressed" in info.value.details()
    mapped = map_rpc_error(info.value)
    assert isinstance(mapped, errors.InternalServerError)
    assert "compressed" in str(mapped)


def test_a_message_over_the_limit_is_refused_from_its_head() -> None:
    splitter = MessageSplitter(max_length=10)
    assert splitter.feed(encode_message(b"0123456789")) == [b"0123456789"]
    with pytest.raises(H2RpcError) as info:
        splitter.feed(struct.pack(">BI", 0, 11))  # the head alone is enough to refuse
    assert info.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED


@settings(max_examples=examples(500), deadline=None)
@given(st.lists(st.binary(max_size=64), max_size=20))
def test_fuzz_arbitrary_bytes_only_raise_typed_errors(pieces: list[bytes]) -> None:
    splitter = MessageSplitter(max_length=1 << 20)
    failure: H2RpcError | None = None
    try:
        for piece in pieces:
            for message in splitter.feed(piece):
                assert len(message) <= 1 << 20
    except H2RpcError as exc:  # anything else escapes and fails the test
        failure = exc
    if failure is not None:
        assert isinstance(map_rpc_error(failure), errors.ServerError)


# ---------------------------------------------------------------- statuses


def test_trailers_map_to_the_same_typed_errors_as_grpc_aio() -> None:
    assert status_error([(b"grpc-status", b"0")]) is None
    err = status_error([(b"grpc-status", b"9"), (b"grpc-message", b"Server%20not%20partition")])
    assert err is not None
    assert err.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert err.details() == "Server not partition"
    stop = status_error([(b"grpc-status", b"8"), (b"grpc-message", b"Stop offset reached")])
    assert stop is not None
    assert isinstance(map_rpc_error(stop), errors.ResourceExhaustedError)
    assert map_rpc_error(stop).details == "Stop offset reached"
    assert isinstance(
        map_rpc_error(
            H2RpcError(grpc.StatusCode.FAILED_PRECONDITION, "Server not partition leader")
        ),
        errors.NotLeaderError,
    )


def test_missing_or_bad_statuses() -> None:
    missing = status_error([(b":status", b"200")])
    assert missing is not None
    assert missing.code() is grpc.StatusCode.UNKNOWN
    http = status_error([(b":status", b"503")])
    assert http is not None
    assert http.code() is grpc.StatusCode.UNAVAILABLE
    bad = status_error([(b"grpc-status", b"x")])
    assert bad is not None
    assert bad.code() is grpc.StatusCode.UNKNOWN
    assert from_http_status(404) is grpc.StatusCode.UNIMPLEMENTED
    assert from_http_status(418) is grpc.StatusCode.UNKNOWN


def test_resets_map_as_the_grpc_http2_spec_says() -> None:
    assert from_reset(ErrorCodes.CANCEL).code() is grpc.StatusCode.CANCELLED
    assert from_reset(ErrorCodes.REFUSED_STREAM).code() is grpc.StatusCode.UNAVAILABLE
    assert from_reset(ErrorCodes.ENHANCE_YOUR_CALM).code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert from_reset(ErrorCodes.INTERNAL_ERROR).code() is grpc.StatusCode.INTERNAL
    assert from_reset(999).code() is grpc.StatusCode.INTERNAL


_UNIT_NS = {b"n": 1, b"u": 10**3, b"m": 10**6, b"S": 10**9, b"M": 60 * 10**9, b"H": 3600 * 10**9}


@given(st.floats(min_value=1e-9, max_value=1e9, allow_nan=False))
def test_grpc_timeout_never_asks_for_less_time_and_fits_8_digits(seconds: float) -> None:
    value = encode_timeout(seconds)
    digits, unit = value[:-1], value[-1:]
    assert digits.isdigit()
    assert 1 <= len(digits) <= 8
    assert int(digits) * _UNIT_NS[unit] >= round(seconds * 1e9)


def test_grpc_timeout_examples() -> None:
    assert encode_timeout(0.0000005) == b"500n"
    assert encode_timeout(2.5) == b"2500000u"
    assert encode_timeout(30.0) == b"30000000u"
    assert encode_timeout(1000.0) == b"1000000m"
