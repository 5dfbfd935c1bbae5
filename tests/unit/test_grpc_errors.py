"""gRPC status codes map to the error tree, refined by the server's message text."""

from __future__ import annotations

import grpc
import grpc.aio
import pytest

from liftbridge_client import errors
from liftbridge_client._transport.grpc import is_no_metadata_leader, map_rpc_error


def rpc_error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details=details)


@pytest.mark.parametrize(
    ("code", "details", "expected"),
    [
        (grpc.StatusCode.INVALID_ARGUMENT, "bad subject", errors.InvalidArgumentError),
        (grpc.StatusCode.NOT_FOUND, "No such stream: x", errors.NotFoundError),
        (grpc.StatusCode.ALREADY_EXISTS, "stream exists", errors.AlreadyExistsError),
        (
            grpc.StatusCode.FAILED_PRECONDITION,
            "partition is paused",
            errors.FailedPreconditionError,
        ),
        (grpc.StatusCode.FAILED_PRECONDITION, "Server not partition leader", errors.NotLeaderError),
        (
            grpc.StatusCode.FAILED_PRECONDITION,
            "The request should be sent to partition leader",
            errors.NotLeaderError,
        ),
        (
            grpc.StatusCode.FAILED_PRECONDITION,
            "Server not leader for cursors partition 1",
            errors.NotLeaderError,
        ),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, "Stop offset reached", errors.ResourceExhaustedError),
        (grpc.StatusCode.UNAVAILABLE, "connection refused", errors.UnavailableError),
        (grpc.StatusCode.DEADLINE_EXCEEDED, "", errors.DeadlineExceededError),
        (grpc.StatusCode.INTERNAL, "Cursors stream does not exist", errors.CursorsDisabledError),
        (grpc.StatusCode.INTERNAL, "disk full", errors.InternalServerError),
        # Transport failures grpc-core reports through other codes (seen in failover runs):
        # retriable after a metadata refresh, like UNAVAILABLE.
        (grpc.StatusCode.INTERNAL, "Internal error from Core", errors.UnavailableError),
        (grpc.StatusCode.UNKNOWN, "Stream removed", errors.UnavailableError),
        (
            grpc.StatusCode.UNKNOWN,
            "ipv4:127.0.0.1:55403: Failed to connect to remote host: Connection refused",
            errors.UnavailableError,
        ),
        (grpc.StatusCode.UNKNOWN, "EOF", errors.UnknownServerError),
        (
            grpc.StatusCode.UNKNOWN,
            "The client is not authorized to call Publish on resource foo",
            errors.PermissionDeniedError,
        ),
        (grpc.StatusCode.PERMISSION_DENIED, "no", errors.PermissionDeniedError),
        (grpc.StatusCode.UNAUTHENTICATED, "no", errors.UnauthenticatedError),
        (grpc.StatusCode.CANCELLED, "", errors.RequestCancelledError),
        (grpc.StatusCode.UNIMPLEMENTED, "", errors.UnknownServerError),
    ],
)
def test_mapping(code: grpc.StatusCode, details: str, expected: type[errors.ServerError]) -> None:
    err = map_rpc_error(rpc_error(code, details))
    assert type(err) is expected
    assert err.details == details
    assert code.name in str(err)


def test_retriable_flags() -> None:
    unavailable = map_rpc_error(rpc_error(grpc.StatusCode.UNAVAILABLE, "down"))
    not_leader = map_rpc_error(
        rpc_error(grpc.StatusCode.FAILED_PRECONDITION, "not partition leader")
    )
    bad = map_rpc_error(rpc_error(grpc.StatusCode.INVALID_ARGUMENT, "bad"))
    assert unavailable.retriable
    assert unavailable.invalid_metadata
    assert not_leader.retriable
    assert not_leader.invalid_metadata
    assert not bad.retriable
    timeout = map_rpc_error(rpc_error(grpc.StatusCode.DEADLINE_EXCEEDED, ""))
    assert isinstance(timeout, TimeoutError)


def test_no_metadata_leader_detection() -> None:
    err = map_rpc_error(rpc_error(grpc.StatusCode.INTERNAL, "no known metadata leader"))
    assert is_no_metadata_leader(err)
    assert not is_no_metadata_leader(map_rpc_error(rpc_error(grpc.StatusCode.INTERNAL, "disk")))


def test_transport_failures_are_retriable_after_a_metadata_refresh() -> None:
    for code, details in [
        (grpc.StatusCode.INTERNAL, "Internal error from Core"),
        (grpc.StatusCode.UNKNOWN, "Stream removed"),
        (grpc.StatusCode.UNAVAILABLE, "connection refused"),
    ]:
        err = map_rpc_error(rpc_error(code, details))
        assert err.retriable, (code, details)
        assert err.invalid_metadata, (code, details)
    for code, details in [
        (grpc.StatusCode.INTERNAL, "disk full"),
        (grpc.StatusCode.UNKNOWN, "EOF"),
        (grpc.StatusCode.INVALID_ARGUMENT, "bad"),
    ]:
        assert not map_rpc_error(rpc_error(code, details)).retriable, (code, details)
