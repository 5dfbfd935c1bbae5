"""gRPC plumbing: one channel per broker address, error mapping, bounded retries."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

import grpc
import grpc.aio

from liftbridge_client import errors
from liftbridge_client._proto import api_pb2_grpc
from liftbridge_client._transport.errors_map import map_rpc_error
from liftbridge_client._transport.h2 import H2Pool
from liftbridge_client.options import ClientOptions, RetryPolicy

if TYPE_CHECKING:
    from liftbridge_client._proto.api_pb2_grpc import APIAsyncStub as Stub
else:
    Stub = api_pb2_grpc.APIStub

log = logging.getLogger(__name__)

__all__ = ["BrokerPool", "Stub", "call", "with_retries"]

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
