"""`Client`: the public facade. It composes the pieces and holds no protocol logic.

- `_grpc.BrokerPool`: channels to brokers; `_metadata.MetadataCache`: routing.
- `_admin`: stream administration RPCs.
- `_publisher.Publisher`: publishing over NATS envelopes or gRPC, ack correlation.
- `subscription.Subscription`: reading a partition.
- `_cursors`: cursor storage.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Sequence
from types import TracebackType
from typing import Any, Self, Unpack

import nats
import nats.aio.client

from liftbridge_client import _admin, _cursors, errors
from liftbridge_client._grpc import BrokerPool
from liftbridge_client._metadata import MetadataCache
from liftbridge_client._publisher import PublishArgs, Publisher, SubjectPublishArgs
from liftbridge_client.models import Ack, Metadata, PartitionInfo
from liftbridge_client.options import ClientOptions, StreamConfig
from liftbridge_client.subscription import SubscribeArgs, Subscription

log = logging.getLogger("liftbridge_client")

__all__ = ["Client"]


class Client:
    """An asyncio Liftbridge client.

    ``brokers`` are seed ``host:port`` addresses of the gRPC API; any one that
    answers is enough. ``nats_servers`` enables publishing enveloped messages
    straight over NATS (the default transport when given)::

        async with Client(["127.0.0.1:9292"], nats_servers=["nats://127.0.0.1:4222"]) as c:
            await c.create_stream("orders.events", "orders", partitions=3)
            ack = await c.publish("orders", b"payload", key=b"customer-7")
    """

    def __init__(
        self,
        brokers: Sequence[str],
        *,
        nats_servers: Sequence[str] | None = None,
        options: ClientOptions | None = None,
    ) -> None:
        if isinstance(brokers, str):
            brokers = [brokers]
        self._options = options or ClientOptions()
        for address in brokers:
            self._options.resolve(address)
        self._nats_servers = list(nats_servers or ())
        self._pool = BrokerPool(self._options)
        self._metadata = MetadataCache(self._pool, brokers, self._options)
        self._nats: nats.aio.client.Client | None = None
        self._publisher: Publisher | None = None
        self._subscriptions: set[Subscription] = set()
        self._nats_error: Exception | None = None
        self._closed = False

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("connected" if self._publisher else "new")
        return f"<Client {state} brokers={self._metadata.addresses()}>"

    @property
    def options(self) -> ClientOptions:
        return self._options

    # ------------------------------------------------------------ lifecycle

    async def connect(self) -> None:
        """Reach the cluster (first reachable seed wins) and, if configured, NATS."""
        if self._closed:
            raise errors.ConnectionClosedError("client is closed")
        if self._publisher is not None:
            return
        try:
            async with asyncio.timeout(self._options.connect_timeout):
                await self._metadata.refresh()
                if self._nats_servers:
                    self._nats = await nats.connect(**self._nats_connect_args())
        except TimeoutError as exc:
            await self._teardown(exc)
            where = "NATS" if self._metadata.current.brokers else "the cluster"
            last = f" (last NATS error: {self._nats_error})" if self._nats_error else ""
            raise errors.NoBrokerAvailableError(
                f"could not connect to {where} within {self._options.connect_timeout}s{last}"
            ) from (self._nats_error or exc)
        except BaseException as exc:
            await self._teardown(exc)
            raise
        self._publisher = Publisher(
            metadata=self._metadata, pool=self._pool, options=self._options, nats=self._nats
        )
        await self._publisher.start()
        self._metadata.start()

    def _nats_connect_args(self) -> dict[str, Any]:
        args: dict[str, Any] = {
            "servers": self._nats_servers,
            "connect_timeout": self._options.connect_timeout,
            "allow_reconnect": True,
            "max_reconnect_attempts": -1,
            "error_cb": self._on_nats_error,
            "disconnected_cb": self._on_nats_disconnected,
            "reconnected_cb": self._on_nats_reconnected,
        }
        auth = self._options.nats_auth
        if auth is not None:
            args.update({k: v for k, v in dataclasses.asdict(auth).items() if v is not None})
        return args

    # nats-py reports through callbacks; by default it prints tracebacks. Log instead, and
    # keep the last error so a failed connect can say why (auth, TLS, refused).
    async def _on_nats_error(self, exc: Exception) -> None:
        self._nats_error = exc
        log.warning("NATS: %s", exc)

    async def _on_nats_disconnected(self) -> None:
        log.warning("NATS connection lost; reconnecting")

    async def _on_nats_reconnected(self) -> None:
        log.info("NATS connection re-established")

    async def close(self) -> None:
        """Fail every pending publish, end subscriptions, close connections. Idempotent."""
        if self._closed:
            return
        self._closed = True
        await self._teardown(None)

    async def _teardown(self, cause: BaseException | None) -> None:
        self._closed = True
        await self._metadata.stop()
        for sub in list(self._subscriptions):
            await sub.close()
        if self._publisher is not None:
            await self._publisher.close(cause)
        if self._nats is not None:
            try:
                await self._nats.close()
            except Exception as exc:  # closing must go on; report why
                log.warning("closing NATS connection failed: %s", exc)
        await self._pool.close()

    async def __aenter__(self) -> Self:
        await self.connect()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def _require_open(self) -> Publisher:
        if self._closed:
            raise errors.ConnectionClosedError("client is closed")
        if self._publisher is None:
            raise errors.ConnectionClosedError("client is not connected: use connect() first")
        return self._publisher

    # ------------------------------------------------------------ admin

    async def create_stream(
        self,
        subject: str,
        name: str,
        *,
        config: StreamConfig | None = None,
        **settings: Any,
    ) -> None:
        """Create a stream on ``subject``; settings are `StreamConfig` fields.

        Raises `AlreadyExistsError` if the name is taken. While the cluster
        has no metadata leader, retries until ``create_stream_timeout``.
        """
        self._require_open()
        await _admin.create_stream(self._metadata, self._options, subject, name, config, settings)

    async def delete_stream(self, name: str) -> None:
        self._require_open()
        await _admin.delete_stream(self._metadata, self._options, name)

    async def pause_stream(
        self, name: str, *, partitions: Sequence[int] = (), resume_all: bool = False
    ) -> None:
        """Pause partitions (all if none given); publishing resumes a partition."""
        self._require_open()
        await _admin.pause_stream(self._metadata, self._options, name, partitions, resume_all)

    async def set_stream_readonly(
        self, name: str, *, partitions: Sequence[int] = (), readonly: bool = True
    ) -> None:
        self._require_open()
        await _admin.set_stream_readonly(self._metadata, self._options, name, partitions, readonly)

    async def fetch_metadata(self, *streams: str) -> Metadata:
        """Cluster metadata for the given streams (all streams if none given)."""
        self._require_open()
        return await _admin.fetch_metadata(self._metadata, streams)

    async def fetch_partition_metadata(self, stream: str, partition: int = 0) -> PartitionInfo:
        """Offsets and state of one partition, asked of its leader."""
        self._require_open()
        return await _admin.fetch_partition_metadata(
            self._metadata, self._options, stream, partition
        )

    # ------------------------------------------------------------ publish

    async def publish(self, stream: str, value: bytes, **kw: Unpack[PublishArgs]) -> Ack | None:
        """Publish and wait for the ack (None when ``ack_policy`` is NONE)."""
        return await self._require_open().publish(stream, value, **kw)

    async def send(
        self, stream: str, value: bytes, **kw: Unpack[PublishArgs]
    ) -> asyncio.Future[Ack | None]:
        """Wait for room in the in-flight window, send, and return the ack's future."""
        return await self._require_open().send(stream, value, **kw)

    def publish_nowait(
        self, stream: str, value: bytes, **kw: Unpack[PublishArgs]
    ) -> asyncio.Future[Ack | None]:
        """Queue a publish without waiting; the future resolves with the ack.

        Raises `InflightLimitError` at once when ``max_inflight`` publishes are pending.
        """
        return self._require_open().publish_nowait(stream, value, **kw)

    async def publish_to_subject(
        self, subject: str, value: bytes, **kw: Unpack[SubjectPublishArgs]
    ) -> Ack | None:
        """Publish to a NATS subject through the server (every stream on it stores it)."""
        return await self._require_open().publish_to_subject(subject, value, **kw)

    async def flush(self, timeout: float | None = None) -> None:
        """Wait until every publish sent so far is acked or failed."""
        await self._require_open().flush(timeout)

    # ------------------------------------------------------------ subscribe

    def subscribe(
        self, stream: str, partition: int = 0, **kw: Unpack[SubscribeArgs]
    ) -> Subscription:
        """A subscription to one partition: ``async with`` it and ``async for`` over it.

        Options (`SubscribeArgs`, keyword-only): ``start`` / ``start_offset`` /
        ``start_timestamp_ns`` / ``start_time_delta``, ``stop`` / ``stop_offset`` /
        ``stop_timestamp_ns``, ``read_isr_replica``, ``resume``, ``reverse``. They are
        validated here (`InvalidInputError`); see `Subscription` for how it ends and
        how it survives a leader failover.
        """
        self._require_open()
        sub = Subscription(
            self._metadata,
            self._pool,
            self._options,
            stream,
            partition,
            on_close=self._subscriptions.discard,
            **kw,
        )
        self._subscriptions.add(sub)
        return sub

    # ------------------------------------------------------------ cursors

    async def set_cursor(self, cursor_id: str, stream: str, partition: int, offset: int) -> None:
        """Store ``offset`` as the cursor's position for a partition."""
        self._require_open()
        await _cursors.set_cursor(
            self._metadata, self._options, cursor_id, stream, partition, offset
        )

    async def fetch_cursor(self, cursor_id: str, stream: str, partition: int) -> int:
        """The cursor's stored offset, or -1 if it has none."""
        self._require_open()
        return await _cursors.fetch_cursor(
            self._metadata, self._options, cursor_id, stream, partition
        )
