"""gRPC: one channel per broker, and what brokers report as typed errors.

In order: the error tables (pure), then `BrokerPool`.

Errors
------

The one place where what the server (or a transport) reports becomes a typed error.

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
server (see tests/unit/test_grpc_errors.py for where each comes from).

Channels
--------

gRPC plumbing: one channel per broker address, error mapping, bounded retries.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Final, TypeVar

import grpc
import grpc.aio

from liftbridge_client import errors
from liftbridge_client._proto import api_pb2, api_pb2_grpc
from liftbridge_client._transport.h2 import H2Pool
from liftbridge_client.options import ClientOptions, RetryPolicy

__all__ = [
    "ACK_ERRORS",
    "ASYNC_ERRORS",
    "STATUS_CLASSES",
    "BrokerPool",
    "Stub",
    "ack_error",
    "async_error",
    "call",
    "is_no_metadata_leader",
    "map_rpc_error",
    "map_status",
    "publish_status_error",
    "readonly_partition_error",
    "with_retries",
]

# ---- Errors ----------------------------------------------------------------------------

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


def readonly_partition_error(stream: str, partition: int | str) -> errors.ReadonlyPartitionError:
    """A publish to a read-only partition, in the same words over gRPC and NATS.

    Over gRPC the server refuses it at once; over NATS it drops it without an answer and
    the client finds out from the metadata once the ack wait ran out (that error is
    chained to the `AckTimeoutError`).
    """
    return errors.ReadonlyPartitionError(
        f"stream {stream!r} partition {partition} is read-only: it takes no new messages"
    )


# The server's PublishAsync text for a read-only partition: "readonly partition: <id>".
_READONLY_TEXT: Final = re.compile(r"readonly partition: (\d+)")


def async_error(
    pb: api_pb2.PublishAsyncError, correlation_id: str, stream: str | None = None
) -> errors.LiftbridgeError:
    """The typed error a PublishAsync ``asyncError`` stands for.

    ``stream`` is the stream the publish went to, when the caller knows it: the server's
    text names only the partition.
    """
    code, text = pb.code, pb.message
    if code == _Async.READONLY and stream is not None:
        found = _READONLY_TEXT.search(text)
        if found is not None:
            return readonly_partition_error(stream, found.group(1))
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


if TYPE_CHECKING:
    from liftbridge_client._proto.api_pb2_grpc import APIAsyncStub as Stub
else:
    Stub = api_pb2_grpc.APIStub

log = logging.getLogger(__name__)


# ---- Channels --------------------------------------------------------------------------

T = TypeVar("T")


class BrokerPool:
    """Lazily opened grpc.aio channels, one per reachable broker address."""

    def __init__(self, options: ClientOptions) -> None:
        self._options = options
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._stubs: dict[str, Stub] = {}
        self._credentials: grpc.ChannelCredentials | None = None
        self._h2: H2Pool | None = None
        self._closed = False

    def stub(self, address: str) -> Stub:
        """The stub for an advertised address (overrides applied)."""
        if self._closed:
            raise errors.ConnectionClosedError("client is closed")
        stub = self._stubs.get(address)
        if stub is None:
            channel = self._open(self._options.resolve(address))
            self._channels[address] = channel
            stub = self._stubs[address] = api_pb2_grpc.APIStub(channel)
        return stub

    def h2(self) -> H2Pool:
        """The h2 connections for streaming calls (``StreamTransport.H2``)."""
        if self._closed:
            raise errors.ConnectionClosedError("client is closed")
        if self._h2 is None:
            self._h2 = H2Pool(self._options)
        return self._h2

    def addresses(self) -> set[str]:
        """Advertised addresses with an open channel."""
        return set(self._channels)

    def _open(self, target: str) -> grpc.aio.Channel:
        opts: list[tuple[str, int | str]] = [
            ("grpc.max_receive_message_length", 64 * 1024 * 1024),
            # Fail fast on a dead broker instead of waiting for the call deadline.
            ("grpc.enable_retries", 0),
        ]
        if self._options.keepalive_time is not None:
            opts += [
                ("grpc.keepalive_time_ms", int(self._options.keepalive_time * 1000)),
                ("grpc.keepalive_timeout_ms", 10_000),
                # Only while calls are open: the server counts idle pings as abuse.
                ("grpc.keepalive_permit_without_calls", 0),
                # A quiet subscription gets no data for hours; keep pinging it anyway.
                ("grpc.http2.max_pings_without_data", 0),
            ]
        tls = self._options.tls
        if tls is None:
            return grpc.aio.insecure_channel(target, options=opts)
        if tls.server_name:
            opts.append(("grpc.ssl_target_name_override", tls.server_name))
        if self._credentials is None:
            self._credentials = grpc.ssl_channel_credentials(
                root_certificates=tls.ca_file.read_bytes() if tls.ca_file else None,
                private_key=tls.key_file.read_bytes() if tls.key_file else None,
                certificate_chain=tls.cert_file.read_bytes() if tls.cert_file else None,
            )
        return grpc.aio.secure_channel(target, self._credentials, options=opts)

    async def forget(self, address: str) -> None:
        """Close the channel to a broker that left the cluster."""
        self._stubs.pop(address, None)
        if self._h2 is not None:
            await self._h2.forget(address)
        channel = self._channels.pop(address, None)
        if channel is not None:
            await channel.close()

    async def close(self) -> None:
        self._closed = True
        channels = list(self._channels.values())
        self._channels.clear()
        self._stubs.clear()
        h2_pool, self._h2 = self._h2, None
        closing = [c.close() for c in channels]
        if h2_pool is not None:
            closing.append(h2_pool.close())
        await asyncio.gather(*closing, return_exceptions=True)


async def call(fn: Callable[[], Awaitable[T]]) -> T:
    """Await one RPC, mapping gRPC failures to our errors."""
    try:
        return await fn()
    except grpc.RpcError as exc:
        raise map_rpc_error(exc) from exc


async def with_retries(
    attempt: Callable[[], Awaitable[T]],
    policy: RetryPolicy,
    *,
    what: str,
    retry_if: Callable[[errors.LiftbridgeError], bool] = lambda e: e.retriable,
    on_retry: Callable[[errors.LiftbridgeError], Awaitable[None]] | None = None,
    deadline: float | None = None,
) -> T:
    """Run ``attempt`` until it succeeds, fails for good, or retries run out.

    ``deadline`` (event-loop time) bounds the whole thing, whatever the policy.
    """
    loop = asyncio.get_running_loop()
    n = 0
    while True:
        n += 1
        try:
            return await attempt()
        except errors.LiftbridgeError as exc:
            delay = policy.backoff(n)
            out_of_time = deadline is not None and loop.time() + delay > deadline
            if not retry_if(exc) or (n >= policy.attempts and deadline is None) or out_of_time:
                raise
            log.debug("%s failed (%s); retry %d in %.3fs", what, exc, n, delay)
            if on_retry is not None:
                await on_retry(exc)
            await asyncio.sleep(delay)
