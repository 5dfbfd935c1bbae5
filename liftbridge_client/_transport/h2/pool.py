"""One h2 connection per broker address, opened on first use (TLS with ALPN "h2")."""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable
from typing import TypeVar

from grpc import StatusCode

from liftbridge_client import errors
from liftbridge_client._transport.h2.calls import (
    SEND_HIGH_WATER,
    BidiStreamCall,
    Decode,
    ServerStreamCall,
)
from liftbridge_client._transport.h2.connection import STREAM_WINDOW, Connection
from liftbridge_client._transport.h2.status import H2RpcError
from liftbridge_client._transport.sockets import detect_dead_peer
from liftbridge_client.options import ClientOptions, TLSConfig

log = logging.getLogger(__name__)

__all__ = ["H2Pool", "tls_context"]

T = TypeVar("T")


def tls_context(tls: TLSConfig) -> ssl.SSLContext:
    """The client TLS context for a `TLSConfig`: its CA (or the system's), its
    certificate for mutual TLS, and ALPN "h2" (gRPC needs HTTP/2)."""
    ctx = ssl.create_default_context(cafile=str(tls.ca_file) if tls.ca_file else None)
    if tls.cert_file is not None and tls.key_file is not None:
        ctx.load_cert_chain(str(tls.cert_file), str(tls.key_file))
    ctx.set_alpn_protocols(["h2"])
    return ctx


class H2Pool:
    """Connections for the h2 stream transport, shared by all calls to a broker."""

    def __init__(self, options: ClientOptions) -> None:
        self._options = options
        self._conns: dict[str, Connection] = {}
        self._opening: dict[str, asyncio.Future[Connection]] = {}
        self._ssl: ssl.SSLContext | None = None
        self._closed = False

    def server_stream(
        self,
        address: str,
        path: str,
        request: bytes,
        decode: Decode[T],
        *,
        timeout: float | None = None,
        window: int = STREAM_WINDOW,
    ) -> ServerStreamCall[T]:
        """A server-streaming call to ``address``; it connects and starts on its first read.
        ``window``: its receive window (at least `STREAM_WINDOW`; see `Connection.start_stream`)."""
        self._check_open()
        return ServerStreamCall(
            lambda: self.connection(address), path, request, decode, timeout=timeout, window=window
        )

    def bidi_stream(
        self,
        address: str,
        path: str,
        decode: Decode[T],
        *,
        timeout: float | None = None,
        sink: Callable[[list[bytes]], None] | None = None,
        send_high_water: int = SEND_HIGH_WATER,
    ) -> BidiStreamCall[T]:
        """A bidirectional call to ``address``; ``await call.start()`` opens it."""
        self._check_open()
        return BidiStreamCall(
            lambda: self.connection(address),
            path,
            decode,
            timeout=timeout,
            sink=sink,
            send_high_water=send_high_water,
        )

    def _check_open(self) -> None:
        if self._closed:
            raise errors.ConnectionClosedError("client is closed")

    async def connection(self, address: str) -> Connection:
        """The usable connection to ``address``, opened if needed (concurrent callers share it)."""
        conn = self._conns.get(address)
        if conn is not None and conn.usable:
            return conn
        if self._closed:
            raise H2RpcError(StatusCode.UNAVAILABLE, "client is closed")
        opening = self._opening.get(address)
        if opening is None:
            opening = self._opening[address] = asyncio.ensure_future(self._open(address))
            opening.add_done_callback(lambda f: self._opened(address, f))
        return await asyncio.shield(opening)

    def _opened(self, address: str, fut: asyncio.Future[Connection]) -> None:
        if self._opening.get(address) is fut:
            del self._opening[address]
        if fut.cancelled() or fut.exception() is not None:
            return
        conn = fut.result()
        if self._closed:
            conn.close()
            return
        # A connection it replaces is draining (GOAWAY): it closes once its streams end.
        self._conns[address] = conn

    async def _open(self, address: str) -> Connection:
        options = self._options
        target = options.resolve(address)
        host, _, port_text = target.rpartition(":")
        host = host.strip("[]")
        tls = options.tls
        ssl_ctx: ssl.SSLContext | None = None
        server_hostname: str | None = None
        authority = target
        if tls is not None:
            if self._ssl is None:
                self._ssl = tls_context(tls)
            ssl_ctx = self._ssl
            server_hostname = tls.server_name or host
            if tls.server_name:
                authority = tls.server_name
        loop = asyncio.get_running_loop()

        def factory() -> Connection:
            scheme = "https" if ssl_ctx is not None else "http"
            return Connection(address, authority, scheme, options.keepalive_time)

        try:
            async with asyncio.timeout(options.connect_timeout):
                transport, conn = await loop.create_connection(
                    factory, host, int(port_text), ssl=ssl_ctx, server_hostname=server_hostname
                )
        except (OSError, TimeoutError) as exc:  # ssl.SSLError is an OSError
            raise H2RpcError(
                StatusCode.UNAVAILABLE,
                f"failed to connect to all addresses; {target}: {exc or type(exc).__name__}",
            ) from exc
        if not conn.made:  # connection_made raised (asyncio logged it): nothing was set up
            transport.close()
            raise H2RpcError(
                StatusCode.UNAVAILABLE, f"setting up HTTP/2 with {target} failed (see the log)"
            )
        if ssl_ctx is not None:
            ssl_object = transport.get_extra_info("ssl_object")
            protocol = ssl_object.selected_alpn_protocol() if ssl_object is not None else None
            if protocol != "h2":
                transport.close()
                raise H2RpcError(
                    StatusCode.UNAVAILABLE,
                    f"{target} did not agree to HTTP/2 over TLS (ALPN chose {protocol!r})",
                )
        detect_dead_peer(transport.get_extra_info("socket"), options.dead_peer_timeout)
        log.debug("h2 connection to %s (%s) open", address, target)
        return conn

    async def forget(self, address: str) -> None:
        """Close the connection to a broker that left the cluster."""
        conn = self._conns.pop(address, None)
        if conn is not None:
            conn.close()

    async def close(self) -> None:
        self._closed = True
        conns = list(self._conns.values())
        self._conns.clear()
        for opening in list(self._opening.values()):
            opening.cancel()
        for conn in conns:
            conn.close()
        for conn in conns:
            try:
                async with asyncio.timeout(self._options.close_timeout):
                    await conn.lost
            except TimeoutError:
                log.warning("%r did not close in time", conn)
