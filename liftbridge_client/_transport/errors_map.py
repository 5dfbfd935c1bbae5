"""The one place where what the server (or a transport) reports becomes a typed error.

Four inputs, four tables, no IO:

- a gRPC status (code + details) -> `STATUS_CLASSES`, refined by `STATUS_REFINEMENTS`
  where the server says something specific through a generic code;
- an ``Ack.ackError`` (NATS acks, PublishAsync acks, PublishToSubject acks) -> `ACK_ERRORS`;
- a ``PublishAsyncError`` code -> `ASYNC_ERRORS`;
- a failed PublishToSubject / unary publish status -> `PUBLISH_STATUS_REFINEMENTS`
  (the server folds ack errors into status texts there).

Transport failures are retriable whatever code carries them: grpc-core reports a
connection torn down mid-call as INTERNAL "Internal error from Core" or UNKNOWN
"Stream removed" during a failover, and those become `UnavailableError` (retriable,
``invalid_metadata``), as UNAVAILABLE itself does. Each row was seen against a real
server (see tests/unit/test_errors_map.py for where each comes from).
"""

from __future__ import annotations

from typing import Final

import grpc
import grpc.aio

from liftbridge_client import errors
from liftbridge_client._proto import api_pb2

__all__ = [
    "ACK_ERRORS",
    "ASYNC_ERRORS",
    "STATUS_CLASSES",
    "ack_error",
    "async_error",
    "is_no_metadata_leader",
    "map_rpc_error",
    "map_status",
    "publish_status_error",
]

STATUS_CLASSES: Final[dict[grpc.StatusCode, type[errors.ServerError]]] = {
    grpc.StatusCode.INVALID_ARGUMENT: errors.InvalidArgumentError,
    grpc.StatusCode.NOT_FOUND: errors.NotFoundError,
    grpc.StatusCode.ALREADY_EXISTS: errors.AlreadyExistsError,
    grpc.StatusCode.FAILED_PRECONDITION: errors.FailedPreconditionError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: errors.ResourceExhaustedError,
    grpc.StatusCode.PERMISSION_DENIED: errors.PermissionDeniedError,
    grpc.StatusCode.UNAUTHENTICATED: errors.UnauthenticatedError,
    grpc.StatusCode.UNAVAILABLE: errors.UnavailableError,
    grpc.StatusCode.DEADLINE_EXCEEDED: errors.DeadlineExceededError,
    grpc.StatusCode.CANCELLED: errors.RequestCancelledError,
    grpc.StatusCode.INTERNAL: errors.InternalServerError,
    grpc.StatusCode.UNKNOWN: errors.UnknownServerError,
}

# (code, lower-case fragment of the details, class): first match wins.
STATUS_REFINEMENTS: Final[tuple[tuple[grpc.StatusCode, str, type[errors.ServerError]], ...]] = (
    # The server reports authorization failures as Unknown "... not authorized ...".
    (grpc.StatusCode.UNKNOWN, "not authorized", errors.PermissionDeniedError),
    # Transport failures that grpc-core reports through other codes (failover runs).
    (grpc.StatusCode.INTERNAL, "internal error from core", errors.UnavailableError),
    (grpc.StatusCode.UNKNOWN, "stream removed", errors.UnavailableError),
    (grpc.StatusCode.UNKNOWN, "failed to connect to remote host", errors.UnavailableError),
    (grpc.StatusCode.UNKNOWN, "socket closed", errors.UnavailableError),
    # FailedPrecondition texts that mean "ask the current leader instead".
    (grpc.StatusCode.FAILED_PRECONDITION, "not partition leader", errors.NotLeaderError),
    (
        grpc.StatusCode.FAILED_PRECONDITION,
        "should be sent to partition leader",
        errors.NotLeaderError,
    ),
    (grpc.StatusCode.FAILED_PRECONDITION, "not cursor partition leader", errors.NotLeaderError),
    (
        grpc.StatusCode.FAILED_PRECONDITION,
        "not leader for cursors partition",
        errors.NotLeaderError,
    ),
    (grpc.StatusCode.INTERNAL, "cursors stream does not exist", errors.CursorsDisabledError),
)

ACK_ERRORS: Final[dict[int, tuple[type[errors.PublishError], str]]] = {
    api_pb2.Ack.UNKNOWN: (errors.PublishError, "the server refused the message (UNKNOWN)"),
    api_pb2.Ack.INCORRECT_OFFSET: (
        errors.IncorrectOffsetError,
        "incorrect expected offset (optimistic concurrency check failed)",
    ),
    api_pb2.Ack.TOO_LARGE: (
        errors.MessageTooLargeError,
        "message exceeds the server's clustering.replication.max.bytes",
    ),
    api_pb2.Ack.ENCRYPTION: (errors.EncryptionFailedError, "encryption failed on partition"),
}

_Async = api_pb2.PublishAsyncError
ASYNC_ERRORS: Final[dict[int, type[errors.LiftbridgeError]]] = {
    _Async.NOT_FOUND: errors.NotFoundError,
    _Async.BAD_REQUEST: errors.InvalidArgumentError,
    _Async.READONLY: errors.ReadonlyPartitionError,
    _Async.INCORRECT_OFFSET: errors.IncorrectOffsetError,
    _Async.ENCRYPTION_FAILED: errors.EncryptionFailedError,
    _Async.PERMISSION_DENIED: errors.PermissionDeniedError,
    _Async.INTERNAL: errors.InternalServerError,
}

# The server says "too large" in these words through BAD_REQUEST, INTERNAL or a status.
_TOO_LARGE_MARKERS: Final = ("exceeds max replication size", "maximum payload")

# Unary Publish / PublishToSubject: ack errors folded into status texts.
PUBLISH_STATUS_REFINEMENTS: Final[tuple[tuple[str, type[errors.LiftbridgeError]], ...]] = (
    ("incorrect expected offset", errors.IncorrectOffsetError),
    *((m, errors.MessageTooLargeError) for m in _TOO_LARGE_MARKERS),
    ("readonly partition", errors.ReadonlyPartitionError),
    ("encryption failed", errors.EncryptionFailedError),
)


def map_status(code: grpc.StatusCode, details: str) -> errors.ServerError:
    """The typed error for a status code and its details text."""
    lowered = details.lower()
    cls = STATUS_CLASSES.get(code, errors.UnknownServerError)
    for r_code, marker, r_cls in STATUS_REFINEMENTS:
        if r_code is code and marker in lowered:
            cls = r_cls
            break
    return cls(f"{code.name}: {details}" if details else code.name, details=details)


def map_rpc_error(exc: grpc.RpcError) -> errors.ServerError:
    """Turn a gRPC failure into the matching `ServerError` subclass (chain ``exc``)."""
    if isinstance(exc, grpc.aio.AioRpcError):
        return map_status(exc.code(), exc.details() or "")
    code = getattr(exc, "code", None)
    result = code() if callable(code) else None
    status = result if isinstance(result, grpc.StatusCode) else grpc.StatusCode.UNKNOWN
    details = getattr(exc, "details", None)  # the h2 stream transport's errors have them
    text = details() if callable(details) else ""
    return map_status(status, text if isinstance(text, str) else "")


def is_no_metadata_leader(exc: errors.LiftbridgeError) -> bool:
    """True for the transient error the server gives while no metadata leader exists."""
    return isinstance(exc, errors.ServerError) and "no known metadata leader" in exc.details


def ack_error(ack: api_pb2.Ack) -> errors.PublishError | None:
    """The typed error an ``Ack.ackError`` stands for; None for OK."""
    code = ack.ackError
    if code == api_pb2.Ack.OK:
        return None
    cls, text = ACK_ERRORS.get(code, (errors.PublishError, f"unknown ack error {code}"))
    where = f"stream {ack.stream!r} subject {ack.msgSubject!r}" if ack.stream else "publish"
    return cls(f"{where}: {text} (correlation id {ack.correlationId!r})")


def async_error(pb: api_pb2.PublishAsyncError, correlation_id: str) -> errors.LiftbridgeError:
    """The typed error a PublishAsync ``asyncError`` stands for."""
    code, text = pb.code, pb.message
    try:
        name = _Async.Code.Name(code)
    except ValueError:
        name = str(code)
    message = f"{name}: {text} (correlation id {correlation_id!r})"
    if any(m in text.lower() for m in _TOO_LARGE_MARKERS):
        return errors.MessageTooLargeError(message)  # BAD_REQUEST or INTERNAL from NATS
    cls = ASYNC_ERRORS.get(code, errors.PublishError)
    if issubclass(cls, errors.ServerError):
        return cls(message, details=text)
    return cls(message)


def publish_status_error(exc: grpc.RpcError) -> errors.LiftbridgeError:
    """A failed PublishToSubject (unary publish) as a typed error (chain ``exc``).

    A deadline exceeded means no ack came within the ack wait.
    """
    mapped = map_rpc_error(exc)
    if isinstance(mapped, errors.DeadlineExceededError) or (
        # v1.7.1 reports its own wait for the ack running out as UNKNOWN.
        isinstance(mapped, errors.UnknownServerError)
        and mapped.details == "context deadline exceeded"
    ):
        return errors.AckTimeoutError(f"no ack within the deadline ({mapped})")
    text = mapped.details.lower()
    for marker, cls in PUBLISH_STATUS_REFINEMENTS:
        if marker in text:
            return cls(str(mapped))
    return mapped
