"""Readiness probes over the server's own gRPC API (synchronous grpc is fine here).

An open TCP port is not readiness: Liftbridge binds it before its Raft group is set up, and
FetchMetadata answers before a metadata leader exists. A node is *serving* once it can
create a stream: the probe creates a throwaway stream with a deadline, retries until an
overall deadline, then deletes what it may have created.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Iterable

import grpc

from liftbridge_client._proto import api_pb2, api_pb2_grpc
from liftbridge_client.testing._errors import ServerStartError

__all__ = ["PROBE_STREAM_PREFIX", "broker_ids", "grpc_channel", "wait_brokers", "wait_serving"]

PROBE_STREAM_PREFIX = "lbtest-probe-"
"""Names of the throwaway streams readiness probes create (and delete)."""

_ATTEMPT_TIMEOUT = 1.0
_RETRY_PAUSE = 0.1
# Codes after which the probe stream may exist although the call failed.
_MAYBE_CREATED = frozenset(
    {grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED, grpc.StatusCode.UNKNOWN}
)

_CHANNEL_OPTIONS = [
    # Loopback only: never route through a proxy from the environment.
    ("grpc.enable_http_proxy", 0),
    # Reconnect quickly while a server starts instead of backing off for seconds.
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 500),
]


def _no_check() -> None:
    return None


def grpc_channel(address: str, credentials: grpc.ChannelCredentials | None = None) -> grpc.Channel:
    """A channel to ``host:port`` (TLS with ``credentials``) that ignores proxies."""
    if credentials is not None:
        return grpc.secure_channel(address, credentials, options=_CHANNEL_OPTIONS)
    return grpc.insecure_channel(address, options=_CHANNEL_OPTIONS)


def _describe(exc: grpc.RpcError) -> str:
    if isinstance(exc, grpc.Call):
        return f"{exc.code().name}: {exc.details()}"
    return repr(exc)


def _code(exc: grpc.RpcError) -> grpc.StatusCode | None:
    return exc.code() if isinstance(exc, grpc.Call) else None


def wait_serving(
    address: str,
    *,
    replication_factor: int = 1,
    timeout: float = 30.0,
    check_alive: Callable[[], None] = _no_check,
    credentials: grpc.ChannelCredentials | None = None,
    applied_on: Iterable[str] = (),
) -> None:
    """Block until a stream with ``replication_factor`` can be created through ``address``.

    With ``applied_on``, also wait until each of those nodes lists the probe stream in its
    own metadata: it has applied the Raft log up to the creation, so a restarted node has
    finished recovering its partitions (v1.9.0 panics if recovery fails, e.g. when NATS is
    down at that moment, so a test must not stop NATS before).
    ``check_alive`` is called before every attempt and should raise when the server process
    is gone. Raises :class:`ServerStartError` after ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    maybe_created: list[str] = []
    last_error = "no attempt was made"
    with grpc_channel(address, credentials) as channel:
        stub = api_pb2_grpc.APIStub(channel)
        try:
            while True:
                check_alive()
                token = uuid.uuid4().hex
                name = PROBE_STREAM_PREFIX + token
                request = api_pb2.CreateStreamRequest(
                    name=name,
                    subject=f"lbtest.probe.{token}",
                    replicationFactor=replication_factor,
                )
                remaining = deadline - time.monotonic()
                try:
                    stub.CreateStream(request, timeout=max(0.05, min(_ATTEMPT_TIMEOUT, remaining)))
                except grpc.RpcError as exc:
                    last_error = _describe(exc)
                    if _code(exc) in _MAYBE_CREATED:
                        maybe_created.append(name)
                else:
                    maybe_created.append(name)
                    for node in applied_on:
                        _wait_listed(node, name, deadline, check_alive)
                    return
                if time.monotonic() >= deadline:
                    raise ServerStartError(
                        f"{address} could not create a stream with replication factor "
                        f"{replication_factor} within {timeout:.0f} s; last error: {last_error}"
                    )
                time.sleep(_RETRY_PAUSE)
        finally:
            _delete_streams(stub, maybe_created)


def _wait_listed(
    address: str, stream: str, deadline: float, check_alive: Callable[[], None]
) -> None:
    """Block until FetchMetadata on ``address`` knows ``stream`` (answered from local state)."""
    request = api_pb2.FetchMetadataRequest(streams=[stream])
    last = "no answer yet"
    with grpc_channel(address) as channel:
        stub = api_pb2_grpc.APIStub(channel)
        while True:
            check_alive()
            remaining = deadline - time.monotonic()
            try:
                response = stub.FetchMetadata(request, timeout=max(0.2, min(3.0, remaining)))
            except grpc.RpcError as exc:
                last = _describe(exc)
            else:
                known = [s for s in response.streamMetadata if s.name == stream]
                if known and known[0].error == api_pb2.StreamMetadata.Error.OK:
                    return
                last = "stream not known yet"
            if time.monotonic() >= deadline:
                raise ServerStartError(
                    f"{address} did not apply the creation of probe stream {stream} in time; "
                    f"last answer: {last}"
                )
            time.sleep(_RETRY_PAUSE)


def _delete_streams(stub: api_pb2_grpc.APIStub, names: Iterable[str]) -> None:
    """Delete probe streams, ignoring every error (most of them never existed)."""
    for name in names:
        with contextlib.suppress(grpc.RpcError):
            stub.DeleteStream(api_pb2.DeleteStreamRequest(name=name), timeout=5.0)


def broker_ids(address: str, *, timeout: float = 5.0) -> set[str]:
    """The broker ids FetchMetadata on ``address`` reports (raises ``grpc.RpcError``)."""
    with grpc_channel(address) as channel:
        stub = api_pb2_grpc.APIStub(channel)
        response = stub.FetchMetadata(api_pb2.FetchMetadataRequest(), timeout=timeout)
    return {broker.id for broker in response.brokers}


def wait_brokers(
    address: str,
    expected: set[str],
    *,
    timeout: float = 30.0,
    check_alive: Callable[[], None] = _no_check,
) -> None:
    """Block until FetchMetadata on ``address`` lists exactly the ``expected`` broker ids.

    Liftbridge caches the broker list (``metadata.cache.max.age``, 2 minutes by default)
    while the Raft membership is unchanged, so a list fetched while a peer was down can stay
    short for that long.
    """
    deadline = time.monotonic() + timeout
    seen: set[str] | str = "no answer yet"
    while True:
        check_alive()
        try:
            seen = broker_ids(address, timeout=max(0.5, min(3.0, deadline - time.monotonic())))
        except grpc.RpcError as exc:
            seen = _describe(exc)
        if seen == expected:
            return
        if time.monotonic() >= deadline:
            raise ServerStartError(
                f"FetchMetadata on {address} did not list brokers {sorted(expected)} within "
                f"{timeout:.0f} s; last answer: {sorted(seen) if isinstance(seen, set) else seen}"
            )
        time.sleep(_RETRY_PAUSE * 2)
