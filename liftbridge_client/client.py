"""`Client`: the public facade. It composes the pieces and holds no protocol logic.

- `_transport.grpc.BrokerPool`: channels to brokers; `_cluster.metadata.MetadataCache`: routing.
- `_cluster.admin`: stream administration RPCs.
- `_publish.publisher.Publisher`: publishing over NATS envelopes or gRPC, ack correlation;
  each publish verb is one typed call into it.
- `subscription.Subscription`: reading a partition.
- `_cluster.admin`: cursor storage.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, Self, overload

import anyio

from liftbridge_client import _validate, errors
from liftbridge_client._cluster import admin as _admin
from liftbridge_client._cluster import cursor_log as _cursor_log
from liftbridge_client._cluster.feature_probe import FeatureDetector
from liftbridge_client._cluster.metadata import MetadataCache
from liftbridge_client._publish.acks import PublishFuture
from liftbridge_client._publish.publisher import Publisher
from liftbridge_client._tasks import TaskSupervisor
from liftbridge_client._transport import probe as _probe
from liftbridge_client._transport.grpc import BrokerPool
from liftbridge_client.activity import ACTIVITY_STREAM, ActivityStream
from liftbridge_client.features import ServerFeatures
from liftbridge_client.groups import Consumer, ConsumerOptions
from liftbridge_client.models import (
    Ack,
    AckPolicy,
    Metadata,
    PartitionInfo,
    PublishStats,
    StartPosition,
    StopPosition,
)
from liftbridge_client.options import ClientOptions, StreamConfig, Transport
from liftbridge_client.partitioning import Partitioner
from liftbridge_client.subscription import SubscribeArgs, Subscription

if TYPE_CHECKING:
    import nats.aio.client

    from liftbridge_client.tracing import Tracer

log = logging.getLogger(__name__)

__all__ = ["Client"]

_NATS = _probe.Protocol.NATS
_GRPC = _probe.Protocol.GRPC
_NATS_CLOSE_WAIT = 0.5  # seconds nats-py's close() gets before its socket is aborted


def _tracer(options: ClientOptions) -> Tracer | None:
    """The tracing wrapper when ``options.tracing`` is set; the [otel] extra is imported then."""
    if options.tracing is None:
        return None
    try:
        from liftbridge_client.tracing import Tracer
    except ImportError as exc:
        raise errors.InvalidInputError(
            f"tracing needs OpenTelemetry: install the [otel] extra ({exc})"
        ) from exc
    return Tracer(options.tracing)


def _check_brokers(brokers: object) -> list[str]:
    """The seed addresses, each ``host:port``; at least one (rejected here, naming it)."""
    try:
        addresses: list[str] = list(brokers)  # type: ignore[call-overload]
    except TypeError:
        raise errors.InvalidInputError(
            f"brokers must be a list of host:port strings, got {brokers!r}"
        ) from None
    if not addresses:
        raise errors.InvalidInputError("brokers must name at least one host:port address")
    for address in addresses:
        _validate.broker_address(address)
    return addresses


def _kw(
    key: bytes | None,
    headers: Mapping[str, bytes] | None,
    partition: int | None,
    partitioner: Partitioner | None,
    ack_policy: AckPolicy,
    expected_offset: int | None,
    correlation_id: str | None,
    transport: Transport | None,
    ack_wait: float | datetime.timedelta | None,
) -> dict[str, Any]:
    """A publish's options by name, for the tracer (which adds its context's header)."""
    return {
        "key": key,
        "headers": headers,
        "partition": partition,
        "partitioner": partitioner,
        "ack_policy": ack_policy,
        "expected_offset": expected_offset,
        "correlation_id": correlation_id,
        "transport": transport,
        "ack_wait": ack_wait,
    }


def _subscribe_kw(
    start: StartPosition | None,
    start_offset: int | None,
    start_timestamp_ns: int | None,
    start_time: datetime.datetime | None,
    start_time_delta: float | datetime.timedelta | None,
    stop: StopPosition | None,
    stop_offset: int | None,
    stop_timestamp_ns: int | None,
    stop_time: datetime.datetime | None,
    read_isr_replica: bool,
    resume: bool,
    reverse: bool,
) -> SubscribeArgs:
    """The subscription's keywords for what the call set (presence implies positions)."""
    kw: SubscribeArgs = {}
    if start is not None:
        kw["start"] = start
    if start_offset is not None:
        kw["start_offset"] = start_offset
    if start_timestamp_ns is not None:
        kw["start_timestamp_ns"] = start_timestamp_ns
    if start_time is not None:
        kw["start_time"] = start_time
    if start_time_delta is not None:
        kw["start_time_delta"] = start_time_delta
    if stop is not None:
        kw["stop"] = stop
    if stop_offset is not None:
        kw["stop_offset"] = stop_offset
    if stop_timestamp_ns is not None:
        kw["stop_timestamp_ns"] = stop_timestamp_ns
    if stop_time is not None:
        kw["stop_time"] = stop_time
    if read_isr_replica is not False:
        kw["read_isr_replica"] = read_isr_replica
    if resume is not False:
        kw["resume"] = resume
    if reverse is not False:
        kw["reverse"] = reverse
    return kw


def _connection_loss(exc: BaseException) -> bool:
    """nats-py's words for a lost connection (reported just before its disconnect)."""
    import nats.errors  # loaded: only a NATS connection reports these

    return isinstance(
        exc, nats.errors.UnexpectedEOF | nats.errors.StaleConnectionError | ConnectionError
    )


class Client:
    """An asyncio Liftbridge client.

    ``brokers`` are seed ``host:port`` addresses of the gRPC API; any one that
    answers is enough. ``nats_servers`` enables publishing enveloped messages
    straight over NATS (the default transport when given)::

        async with Client(
            ["127.0.0.1:9292"], nats_servers=["nats://127.0.0.1:4222"]
        ) as c:
            config = StreamConfig(partitions=3)
            await c.create_stream("orders.events", "orders", config)
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
        if options is not None and not isinstance(options, ClientOptions):
            raise errors.InvalidInputError(f"options must be a ClientOptions, got {options!r}")
        self._options = options or ClientOptions()
        brokers = _check_brokers(brokers)
        for address in brokers:
            _validate.broker_address(self._options.resolve(address))
        if isinstance(nats_servers, str):
            nats_servers = [nats_servers]
        self._nats_servers = [
            _validate.nats_server_url(s, "nats_servers entry") for s in nats_servers or ()
        ]
        self._pool = BrokerPool(self._options)
        self._metadata = MetadataCache(self._pool, brokers, self._options)
        self._features = FeatureDetector(self._metadata, self._pool, self._options)
        self._nats: nats.aio.client.Client | None = None
        self._publisher: Publisher | None = None
        self._subscriptions: set[Subscription] = set()
        self._consumers: set[Consumer] = set()
        self._nats_error: Exception | None = None
        self._nats_errors: dict[str, None] = {}  # distinct texts while connecting, in order
        self._tasks = TaskSupervisor()
        self._closing = False  # close() began: NATS callbacks stay quiet
        # One connect attempt and one close, each a task every caller waits for: a caller
        # cancelled while closing cannot abort the teardown, and close() can stop a connect.
        self._connecting: asyncio.Task[None] | None = None
        self._closer: asyncio.Task[None] | None = None
        self._drain_scope: anyio.CancelScope | None = None
        self._nats_down = False  # between a NATS disconnect and the reconnect
        self._closed = False
        self._tracer = _tracer(self._options)  # None unless tracing is on

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("connected" if self._publisher else "new")
        return f"<Client {state} brokers={self._metadata.addresses()}>"

    @property
    def options(self) -> ClientOptions:
        return self._options

    @property
    def features(self) -> ServerFeatures:
        """What the brokers support (docs/compatibility.md): probed once per broker, on
        first need. ``await client.features.require("consumer_groups")`` raises
        `FeatureNotSupportedError` naming the feature and the broker that lacks it."""
        return self._features

    # ------------------------------------------------------------ lifecycle

    async def connect(self) -> None:
        """Reach the cluster (first reachable seed wins) and, if configured, NATS.

        Concurrent calls share one attempt. Cancelling a caller cancels the attempt
        (the client is then closed, as after a failed connect); `close` during the
        attempt stops it, and connect() raises `ConnectionClosedError`.
        """
        if self._closing:
            raise errors.ConnectionClosedError("client is closed")
        if self._publisher is not None:
            return
        task = self._connecting
        if task is None:
            task = asyncio.create_task(self._connect(), name="liftbridge-client-connect")
            self._connecting = task
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError:
            task.cancel()
            await asyncio.wait({task})  # its teardown is bounded by close_timeout
            raise
        if task.cancelled():
            raise errors.ConnectionClosedError("the client was closed while connecting")
        task.result()  # the attempt's error, if any

    async def _connect(self) -> None:
        timeout = self._options.connect_timeout
        try:
            await self._tasks.start()
            async with asyncio.timeout(timeout):
                await self._metadata.refresh()
                if self._nats_servers:
                    # nats-py (a tenth of a second to import) only for a client that uses it.
                    from liftbridge_client._transport.nats import connect_nats

                    self._nats = await connect_nats(self._nats_connect_args(), timeout)
        except TimeoutError as exc:
            await self._teardown(exc)
            # Name the cause the libraries do not: probe the addresses that failed.
            nats_stage = bool(self._metadata.current.brokers)
            findings = await (
                _probe.explain([_probe.nats_address(s) for s in self._nats_servers], _NATS)
                if nats_stage
                else _probe.explain(self._seed_targets(), _GRPC)
            )
            where = "NATS" if nats_stage else "the cluster"
            seen = "; ".join(list(self._nats_errors)[-3:])
            why = f": {_probe.describe(findings)}" if findings else ""
            last = f" (NATS errors: {seen})" if seen and not findings else ""
            cause = findings[0].cause if findings and findings[0].cause else None
            unreachable = (
                errors.NatsUnreachableError if nats_stage else errors.NoBrokerAvailableError
            )
            raise unreachable(f"could not connect to {where} within {timeout}s{why}{last}") from (
                cause or self._nats_error or exc
            )
        except errors.NoBrokerAvailableError as exc:
            await self._teardown(exc)
            if isinstance(exc, errors.NatsUnreachableError) or not isinstance(
                exc.__cause__, errors.ServerError
            ):
                raise  # connect_nats said why already
            # Every seed failed at once; grpc-core's words rarely say why: look ourselves.
            findings = await _probe.explain(self._seed_targets(), _GRPC)
            if not findings:
                raise
            raise errors.NoBrokerAvailableError(f"{exc}: {_probe.describe(findings)}") from (
                findings[0].cause or exc.__cause__
            )
        except BaseException as exc:
            await self._teardown(exc)
            raise
        publisher: Publisher | None = None
        try:
            publisher = Publisher(
                metadata=self._metadata,
                pool=self._pool,
                options=self._options,
                nats=self._nats,
                tasks=self._tasks,
            )
            await publisher.start()
            self._metadata.start(self._tasks.spawn)
        except BaseException as exc:
            self._publisher = publisher  # the teardown closes what was started
            await self._teardown(exc)
            raise
        # Only now: a concurrent connect() returns at once when there is a publisher.
        self._publisher = publisher

    def _seed_targets(self) -> list[str]:
        """The seed addresses as dialed (address overrides applied)."""
        return [self._options.resolve(a) for a in self._metadata.seeds]

    def _nats_connect_args(self) -> dict[str, Any]:
        args: dict[str, Any] = {
            "servers": self._nats_servers,
            "connect_timeout": self._options.connect_timeout,
            "allow_reconnect": True,
            "max_reconnect_attempts": -1,
            "error_cb": self._on_nats_error,
            "disconnected_cb": self._on_nats_disconnected,
            "reconnected_cb": self._on_nats_reconnected,
            "closed_cb": self._on_nats_closed,
        }
        from liftbridge_client._transport.nats import nats_security_args

        args.update(nats_security_args(self._options))
        return args

    # nats-py reports through callbacks; by default it prints tracebacks. Log instead, and
    # keep the last error so a failed connect can say why (auth, TLS, refused).
    async def _on_nats_error(self, exc: Exception) -> None:
        self._nats_error = exc
        if self._publisher is None:
            # Still connecting: the error connect() raises says why; a WARNING per attempt
            # would only repeat it ahead of it.
            self._nats_errors[str(exc) or repr(exc)] = None
            log.debug("NATS (connecting): %s", exc)
        elif self._closing or self._nats_down or _connection_loss(exc):
            # Closing; each failed reconnect attempt of an outage already warned about; or
            # the loss itself, which nats-py reports here just before the disconnect: the
            # one WARNING of the outage (below) names it.
            log.debug("NATS: %s", exc)
        else:
            log.warning("NATS: %s", exc)

    async def _on_nats_disconnected(self) -> None:
        # One line per outage (nats-py calls this once per lost connection); none when
        # we close the connection ourselves, or while still connecting.
        if not self._closing and not self._nats_down and self._publisher is not None:
            if self._publisher.nats_outage(down=True):
                log.info("NATS: moving to another server (NATS publishes detour meanwhile)")
            else:
                cause = self._nats_error
                why = f" ({cause})" if cause is not None and _connection_loss(cause) else ""
                log.warning("NATS connection lost%s; reconnecting (publishes are buffered)", why)
        self._nats_down = True

    async def _on_nats_reconnected(self) -> None:
        self._nats_down = False
        if self._publisher is not None:
            self._publisher.nats_outage(down=False)
        log.info("NATS connection re-established")

    async def _on_nats_closed(self) -> None:
        # nats-py gave up (or we closed it): NATS publishes can no longer be acked.
        if not self._closing and self._publisher is not None:
            cause = self._nats_error or errors.ConnectionClosedError("NATS connection closed")
            self._publisher.nats_lost(cause)

    async def close(self, *, drain: bool = True) -> None:
        """Close the client. Idempotent; safe to call from any task.

        With ``drain`` (the default, and what a normal exit from ``async with`` does)
        new publishes are refused and pending ones get up to
        ``ClientOptions.drain_timeout`` seconds to be acked; whatever is still
        pending then fails with `ConnectionClosedError` (chained to a
        `LiftbridgeTimeoutError`). With ``drain=False`` (and on an exception exit from
        ``async with``) pending publishes fail at once, chained to the cause.

        Then subscriptions end, and the publisher, NATS, the gRPC channels and
        every background task are stopped. That part is bounded by
        ``ClientOptions.close_timeout`` (1 s by default) whatever the servers do,
        so close() returns within drain_timeout + close_timeout, and leaves no
        task of the client's or of nats-py's running.

        Every call returns only once the client is closed. A close() cancelled while
        it drains (Ctrl-C, a timeout) ends the drain there: pending publishes fail,
        and the teardown still completes before the cancellation goes on.
        """
        await self._close(None, drain=drain)

    async def _close(self, cause: BaseException | None, *, drain: bool) -> None:
        closer = self._closer
        if closer is None:
            self._closing = True
            self._drain_scope = anyio.CancelScope()
            closer = asyncio.create_task(self._shut(cause, drain), name="liftbridge-client-close")
            self._closer = closer
        try:
            await asyncio.wait({closer})
        except asyncio.CancelledError:
            # The caller stops waiting (Ctrl-C, a timeout): the drain ends now, and the
            # teardown (bounded by close_timeout) ends before the cancellation goes on.
            if self._drain_scope is not None:
                self._drain_scope.cancel()
            await asyncio.wait({closer})
            raise
        if not closer.cancelled():
            closer.result()

    async def _shut(self, cause: BaseException | None, drain: bool) -> None:
        """The one close: stop a connect under way, drain, tear down."""
        connecting = self._connecting
        if connecting is not None and not connecting.done():
            connecting.cancel()  # it tears down what it started
            await asyncio.wait({connecting})
        publisher = self._publisher
        if drain and publisher is not None and not self._closed and self._drain_scope is not None:
            timeout = self._options.drain_timeout
            left = 0
            with self._drain_scope:
                left = await publisher.drain(timeout)
            if self._drain_scope.cancelled_caught:
                cause = asyncio.CancelledError("close() was cancelled while draining")
            elif left:
                cause = errors.LiftbridgeTimeoutError(
                    f"close: {left} publishes still pending after the drain timeout ({timeout}s)"
                )
        await self._teardown(cause)

    async def _teardown(self, cause: BaseException | None) -> None:
        """Stop everything; each step runs whatever the earlier ones did, all bounded.

        Once: a close() after a failed or stopped connect finds everything stopped.
        """
        if self._closed:
            return
        self._closing = self._closed = True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._options.close_timeout
        failures: list[tuple[str, BaseException]] = []
        cut: list[str] = []  # steps the deadline ended (a frozen server: most of them)

        async def step(what: str, fn: Callable[[], Awaitable[object]]) -> None:
            try:
                with anyio.move_on_after(max(deadline - loop.time(), 0.0)) as scope:
                    await fn()
                if scope.cancelled_caught:
                    cut.append(what)
            except Exception as exc:  # closing goes on; report at the end
                failures.append((what, exc))

        await step("stopping the metadata refresher", self._metadata.stop)
        for consumer in list(self._consumers):
            await step("closing a group consumer", consumer.close)
        for sub in list(self._subscriptions):
            await step("closing a subscription", sub.close)
        if self._publisher is not None:
            publisher = self._publisher
            await step("closing the publisher", lambda: publisher.close(cause, deadline=deadline))
        if self._nats is not None:
            await step("closing the NATS connection", self._close_nats)
        await step("closing the gRPC channels", self._pool.close)
        await step("stopping background tasks", lambda: self._tasks.aclose(0.1))
        if cut:
            log.warning(
                "close: close_timeout (%s s) ran out; cut short: %s",
                self._options.close_timeout,
                ", ".join(cut),
            )
        for what, exc in failures:
            log.warning("close: %s failed: %r", what, exc)

    async def _close_nats(self) -> None:
        import nats.errors

        from liftbridge_client._transport.nats import abort_nats_transport, nats_tasks

        nc = self._nats
        assert nc is not None
        closed = False
        try:
            # nats-py flushes what it buffered before closing; a server that stopped
            # reading would keep that flush (and close()) waiting forever.
            async with asyncio.timeout(_NATS_CLOSE_WAIT):
                await nc.close()
            closed = True
        except (TimeoutError, nats.errors.Error, OSError) as exc:
            log.debug("NATS close did not finish (%r); aborting its socket", exc)
        finally:
            # Also when the close deadline of close() cancels this step: the socket must
            # not outlive the client (abort is synchronous, so it runs even then).
            if not closed:
                abort_nats_transport(nc)
        # Let the tasks nats-py cancelled (reader, flusher, pinger) finish.
        pending = [t for t in nats_tasks(nc) if not t.done()]
        if pending:
            await asyncio.wait(pending, timeout=_NATS_CLOSE_WAIT)

    async def __aenter__(self) -> Self:
        await self.connect()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # A normal exit drains; an exception (or cancellation) fails pending publishes
        # at once, chained to it.
        await self._close(exc, drain=exc is None)

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
        config: StreamConfig | None = None,
        *,
        exist_ok: bool = False,
    ) -> None:
        """Create a stream named ``name`` that stores the messages of NATS ``subject``.

        Returns once the stream and its partition leaders are visible in metadata. While
        the cluster has no metadata leader, it retries until
        `ClientOptions.create_stream_timeout`.

        Args:
            subject: The NATS subject the stream listens to (partition N > 0 listens
                to ``subject.N``).
            name: The stream's name, unique in the cluster.
            config: Partitions, replication, retention and the rest; None: the
                server's defaults for all of them.
            exist_ok: Succeed when a stream of that name exists with the same subject
                and partition count (other settings are not compared: the server does
                not report them).

        Raises:
            InvalidInputError: a name, subject or setting the server cannot take.
            AlreadyExistsError: the name is taken (and not ``exist_ok``), or with
                ``exist_ok`` by a stream whose subject or partition count differs (the
                message names each, with what the stream has).
            FeatureNotSupportedError: a setting the server lacks (optimistic
                concurrency before v1.6).
        """
        self._require_open()
        if isinstance(config, StreamConfig) and config.optimistic_concurrency_control:
            self._features.check("optimistic_concurrency")
        await _admin.create_stream(
            self._metadata, self._options, subject, name, config, exist_ok=exist_ok
        )

    async def delete_stream(self, name: str) -> None:
        self._require_open()
        await _admin.delete_stream(self._metadata, self._options, name)

    async def pause_stream(
        self, name: str, *, partitions: Sequence[int] = (), resume_all: bool = False
    ) -> None:
        """Pause partitions (all if none given); publishing resumes a partition."""
        self._require_open()
        self._features.check("pause_resume")
        await _admin.pause_stream(self._metadata, self._options, name, partitions, resume_all)

    async def set_stream_readonly(
        self, name: str, *, partitions: Sequence[int] = (), readonly: bool = True
    ) -> None:
        self._require_open()
        self._features.check("readonly_streams")
        await _admin.set_stream_readonly(self._metadata, self._options, name, partitions, readonly)

    async def fetch_metadata(self, *streams: str, groups: Sequence[str] = ()) -> Metadata:
        """Cluster metadata for the given streams (all streams if none given).

        ``groups`` are consumer group ids whose coordinator and epoch to include in
        ``Metadata.groups`` (groups the server does not know are left out).
        """
        self._require_open()
        return await _admin.fetch_metadata(self._metadata, streams, groups)

    async def fetch_partition_metadata(self, stream: str, partition: int = 0) -> PartitionInfo:
        """Offsets and state of one partition, asked of its leader."""
        self._require_open()
        return await _admin.fetch_partition_metadata(
            self._metadata, self._options, stream, partition
        )

    # ------------------------------------------------------------ publish

    # Three verbs, as in aiokafka: ``publish`` waits for the ack (aiokafka's
    # send_and_wait, nats-py JetStream's publish); ``send`` waits only for room in the
    # in-flight window and returns the ack's future (aiokafka's send); ``publish_nowait``
    # never waits (InflightLimitError when the window is full), for callbacks and loops
    # that must not block. The overloads only narrow the result: None with
    # ack_policy=AckPolicy.NONE, an Ack otherwise.

    @overload
    async def publish(
        self,
        stream: str,
        value: bytes,
        *,
        key: bytes | None = ...,
        headers: Mapping[str, bytes] | None = ...,
        partition: int | None = ...,
        partitioner: Partitioner | None = ...,
        ack_policy: Literal[AckPolicy.LEADER, AckPolicy.ALL] = ...,
        expected_offset: int | None = ...,
        correlation_id: str | None = ...,
        transport: Transport | None = ...,
        ack_wait: float | datetime.timedelta | None = ...,
    ) -> Ack: ...
    @overload
    async def publish(
        self,
        stream: str,
        value: bytes,
        *,
        key: bytes | None = ...,
        headers: Mapping[str, bytes] | None = ...,
        partition: int | None = ...,
        partitioner: Partitioner | None = ...,
        ack_policy: AckPolicy,
        expected_offset: int | None = ...,
        correlation_id: str | None = ...,
        transport: Transport | None = ...,
        ack_wait: float | datetime.timedelta | None = ...,
    ) -> Ack | None: ...
    async def publish(
        self,
        stream: str,
        value: bytes,
        *,
        key: bytes | None = None,
        headers: Mapping[str, bytes] | None = None,
        partition: int | None = None,
        partitioner: Partitioner | None = None,
        ack_policy: AckPolicy = AckPolicy.LEADER,
        expected_offset: int | None = None,
        correlation_id: str | None = None,
        transport: Transport | None = None,
        ack_wait: float | datetime.timedelta | None = None,
    ) -> Ack | None:
        """Publish one message to a stream and wait for its ack.

        Cancelling the call withdraws the publish if it was not written yet.

        Args:
            stream: The stream's name.
            value: The message body.
            key: The message key; the default partitioner hashes it.
            headers: Message headers (names are str, values bytes).
            partition: The partition; wins over the partitioner.
            partitioner: Chooses the partition when ``partition`` is None.
                None: `ClientOptions.partitioner` (the key's CRC-32 by default).
            ack_policy: LEADER (the default) acks once the leader stored it, ALL once
                every in-sync replica did; NONE returns None once it is written.
            expected_offset: Optimistic concurrency: store it only if it gets this
                offset (the stream needs ``optimistic_concurrency_control``).
            correlation_id: Names the publish in its ack; default: a fresh unique id.
            transport: NATS or gRPC; default: `ClientOptions.transport`.
            ack_wait: Seconds to wait for the ack; default: `ClientOptions.ack_wait`.

        Returns:
            The server's `Ack`, or None with ``AckPolicy.NONE``.

        Raises:
            InvalidInputError: an argument is not valid; nothing was sent.
            PartitionerError: the partitioner raised or gave a partition out of range.
            NotFoundError: the stream or partition does not exist.
            ReadonlyPartitionError: the partition is read-only.
            IncorrectOffsetError: ``expected_offset`` did not match.
            AckTimeoutError: no ack came within ``ack_wait``.
            ConnectionClosedError: the client is closed or closing.
        """
        publisher = self._require_open()
        if self._tracer is not None:
            traced: Ack | None = await self._tracer.publish(
                publisher.publish,
                stream,
                value,
                _kw(
                    key,
                    headers,
                    partition,
                    partitioner,
                    ack_policy,
                    expected_offset,
                    correlation_id,
                    transport,
                    ack_wait,
                ),
            )
            return traced
        # One call: the publisher takes the one-step path or the general one.
        return await publisher.publish(
            stream,
            value,
            key,
            headers,
            partition,
            partitioner,
            ack_policy,
            expected_offset,
            correlation_id,
            transport,
            ack_wait,
        )

    @overload
    async def send(
        self,
        stream: str,
        value: bytes,
        *,
        key: bytes | None = ...,
        headers: Mapping[str, bytes] | None = ...,
        partition: int | None = ...,
        partitioner: Partitioner | None = ...,
        ack_policy: Literal[AckPolicy.LEADER, AckPolicy.ALL] = ...,
        expected_offset: int | None = ...,
        correlation_id: str | None = ...,
        transport: Transport | None = ...,
        ack_wait: float | datetime.timedelta | None = ...,
    ) -> PublishFuture[Ack]: ...
    @overload
    async def send(
        self,
        stream: str,
        value: bytes,
        *,
        key: bytes | None = ...,
        headers: Mapping[str, bytes] | None = ...,
        partition: int | None = ...,
        partitioner: Partitioner | None = ...,
        ack_policy: AckPolicy,
        expected_offset: int | None = ...,
        correlation_id: str | None = ...,
        transport: Transport | None = ...,
        ack_wait: float | datetime.timedelta | None = ...,
    ) -> PublishFuture[Ack | None]: ...
    async def send(
        self,
        stream: str,
        value: bytes,
        *,
        key: bytes | None = None,
        headers: Mapping[str, bytes] | None = None,
        partition: int | None = None,
        partitioner: Partitioner | None = None,
        ack_policy: AckPolicy = AckPolicy.LEADER,
        expected_offset: int | None = None,
        correlation_id: str | None = None,
        transport: Transport | None = None,
        ack_wait: float | datetime.timedelta | None = None,
    ) -> PublishFuture[Any]:
        """Queue one message once the in-flight window has room; return its ack's future.

        For pipelining: keep sending, await the futures later (or ``client.flush()``).
        The window is `ClientOptions.max_inflight` publishes.

        Args:
            stream: The stream's name.
            value: The message body.
            key: The message key; the default partitioner hashes it.
            headers: Message headers (names are str, values bytes).
            partition: The partition; wins over the partitioner.
            partitioner: Chooses the partition when ``partition`` is None.
                None: `ClientOptions.partitioner`.
            ack_policy: LEADER (default), ALL, or NONE (the future resolves to None
                once the message is written).
            expected_offset: Optimistic concurrency: store it only at this offset.
            correlation_id: Names the publish in its ack; default: a fresh unique id.
            transport: NATS or gRPC; default: `ClientOptions.transport`.
            ack_wait: Seconds to wait for the ack; default: `ClientOptions.ack_wait`.

        Returns:
            A `PublishFuture` that resolves to the `Ack` (None with NONE), or fails with
            the errors `publish` raises.

        Raises:
            InvalidInputError: an argument is not valid; nothing was queued.
            PartitionerError: the partitioner raised or gave a partition out of range.
            ConnectionClosedError: the client is closed or closing.
        """
        publisher = self._publisher
        if publisher is None or self._closed:
            publisher = self._require_open()
        if self._tracer is not None:
            return await self._tracer.send(
                publisher.send,
                stream,
                value,
                _kw(
                    key,
                    headers,
                    partition,
                    partitioner,
                    ack_policy,
                    expected_offset,
                    correlation_id,
                    transport,
                    ack_wait,
                ),
            )
        plain = (
            partitioner is None
            and expected_offset is None
            and correlation_id is None
            and ack_wait is None
        )
        if plain:
            # Publisher.send's first step, taken here: the common publish then costs one
            # coroutine (this one), not two (3% of a pipelined publish's CPU).
            fut = publisher.send_plain(
                stream, value, partition, ack_policy, transport, False, key, headers
            )
            if fut is not None:
                return fut
        return await publisher.send(
            stream,
            value,
            key,
            headers,
            partition,
            partitioner,
            ack_policy,
            expected_offset,
            correlation_id,
            transport,
            ack_wait,
            plain_tried=plain,
        )

    def _send_now(
        self,
        stream: str,
        value: bytes,
        key: bytes | None,
        headers: Mapping[str, bytes] | None,
        partition: int | None,
        ack_policy: AckPolicy,
    ) -> PublishFuture[Any] | None:
        """`send` of a plain message when it goes at once, without a coroutine: its future;
        else None, and the caller awaits `send` of the same message next (which waits
        for the window or says what is wrong). For this package's loops that publish
        row after row (the Spark sinks): 1-2 us less CPU per row than awaiting `send`."""
        publisher = self._publisher
        if publisher is None or self._closed or self._tracer is not None:
            return None
        return publisher.send_plain(stream, value, partition, ack_policy, None, False, key, headers)

    @overload
    def publish_nowait(
        self,
        stream: str,
        value: bytes,
        *,
        key: bytes | None = ...,
        headers: Mapping[str, bytes] | None = ...,
        partition: int | None = ...,
        partitioner: Partitioner | None = ...,
        ack_policy: Literal[AckPolicy.LEADER, AckPolicy.ALL] = ...,
        expected_offset: int | None = ...,
        correlation_id: str | None = ...,
        transport: Transport | None = ...,
        ack_wait: float | datetime.timedelta | None = ...,
    ) -> PublishFuture[Ack]: ...
    @overload
    def publish_nowait(
        self,
        stream: str,
        value: bytes,
        *,
        key: bytes | None = ...,
        headers: Mapping[str, bytes] | None = ...,
        partition: int | None = ...,
        partitioner: Partitioner | None = ...,
        ack_policy: AckPolicy,
        expected_offset: int | None = ...,
        correlation_id: str | None = ...,
        transport: Transport | None = ...,
        ack_wait: float | datetime.timedelta | None = ...,
    ) -> PublishFuture[Ack | None]: ...
    def publish_nowait(
        self,
        stream: str,
        value: bytes,
        *,
        key: bytes | None = None,
        headers: Mapping[str, bytes] | None = None,
        partition: int | None = None,
        partitioner: Partitioner | None = None,
        ack_policy: AckPolicy = AckPolicy.LEADER,
        expected_offset: int | None = None,
        correlation_id: str | None = None,
        transport: Transport | None = None,
        ack_wait: float | datetime.timedelta | None = None,
    ) -> PublishFuture[Any]:
        """Queue one message now, without waiting; return its ack's future.

        For callbacks and loops that must not block. When the stream's metadata is not
        cached yet (the first publish to it), the lookup happens in the background and
        its failures (no such stream, partition out of range) fail the future.

        Args:
            stream: The stream's name.
            value: The message body.
            key: The message key; the default partitioner hashes it.
            headers: Message headers (names are str, values bytes).
            partition: The partition; wins over the partitioner.
            partitioner: Chooses the partition when ``partition`` is None.
                None: `ClientOptions.partitioner`.
            ack_policy: LEADER (default), ALL, or NONE (the future resolves to None
                once the message is written).
            expected_offset: Optimistic concurrency: store it only at this offset.
            correlation_id: Names the publish in its ack; default: a fresh unique id.
            transport: NATS or gRPC; default: `ClientOptions.transport`.
            ack_wait: Seconds to wait for the ack; default: `ClientOptions.ack_wait`.

        Returns:
            A `PublishFuture` that resolves to the `Ack` (None with NONE), or fails with
            the errors `publish` raises.

        Raises:
            InflightLimitError: `ClientOptions.max_inflight` publishes are pending.
            InvalidInputError: an argument is not valid; nothing was queued.
            PartitionerError: the partitioner raised or gave a partition out of range.
            ConnectionClosedError: the client is closed or closing.
        """
        publisher = self._require_open()
        if self._tracer is not None:
            return self._tracer.publish_nowait(
                publisher.publish_nowait,
                stream,
                value,
                _kw(
                    key,
                    headers,
                    partition,
                    partitioner,
                    ack_policy,
                    expected_offset,
                    correlation_id,
                    transport,
                    ack_wait,
                ),
            )
        return publisher.publish_nowait(
            stream,
            value,
            key,
            headers,
            partition,
            partitioner,
            ack_policy,
            expected_offset,
            correlation_id,
            transport,
            ack_wait,
        )

    @overload
    async def publish_to_subject(
        self,
        subject: str,
        value: bytes,
        *,
        key: bytes | None = ...,
        headers: Mapping[str, bytes] | None = ...,
        ack_policy: Literal[AckPolicy.LEADER, AckPolicy.ALL] = ...,
        correlation_id: str | None = ...,
        ack_wait: float | datetime.timedelta | None = ...,
    ) -> Ack: ...
    @overload
    async def publish_to_subject(
        self,
        subject: str,
        value: bytes,
        *,
        key: bytes | None = ...,
        headers: Mapping[str, bytes] | None = ...,
        ack_policy: AckPolicy,
        correlation_id: str | None = ...,
        ack_wait: float | datetime.timedelta | None = ...,
    ) -> Ack | None: ...
    async def publish_to_subject(
        self,
        subject: str,
        value: bytes,
        *,
        key: bytes | None = None,
        headers: Mapping[str, bytes] | None = None,
        ack_policy: AckPolicy = AckPolicy.LEADER,
        correlation_id: str | None = None,
        ack_wait: float | datetime.timedelta | None = None,
    ) -> Ack | None:
        """Publish to a NATS subject through the server (the PublishToSubject RPC, gRPC).

        Every stream on ``subject`` stores the message; the ack is the first stream's.

        Args:
            subject: The NATS subject (no wildcards).
            value: The message body.
            key: The message key.
            headers: Message headers (names are str, values bytes).
            ack_policy: LEADER (default), ALL, or NONE (returns None once sent).
            correlation_id: Names the publish in its ack; default: a fresh unique id.
            ack_wait: Seconds to wait for the ack; default: `ClientOptions.ack_wait`.

        Returns:
            The server's `Ack`, or None with ``AckPolicy.NONE``.

        Raises:
            InvalidInputError: an argument is not valid; nothing was sent.
            FeatureNotSupportedError: the server lacks PublishToSubject.
            AckTimeoutError: no ack came within ``ack_wait``.
            ConnectionClosedError: the client is closed or closing.
        """
        publisher = self._require_open()
        self._features.check("publish_to_subject")
        return await publisher.publish_to_subject(
            subject, value, key, headers, ack_policy, correlation_id, ack_wait
        )

    def stats(self) -> PublishStats:
        """Publisher counters: pending publishes, and acks that were dropped and why."""
        return self._require_open().stats()

    async def flush(self, timeout: float | datetime.timedelta | None = None) -> None:
        """Wait until every publish sent so far is acked or failed."""
        await self._require_open().flush(timeout)

    # ------------------------------------------------------------ subscribe

    def subscribe(
        self,
        stream: str,
        partition: int = 0,
        *,
        start: StartPosition | None = None,
        start_offset: int | None = None,
        start_timestamp_ns: int | None = None,
        start_time: datetime.datetime | None = None,
        start_time_delta: float | datetime.timedelta | None = None,
        stop: StopPosition | None = None,
        stop_offset: int | None = None,
        stop_timestamp_ns: int | None = None,
        stop_time: datetime.datetime | None = None,
        read_isr_replica: bool = False,
        resume: bool = False,
        reverse: bool = False,
    ) -> Subscription:
        """A subscription to one partition: ``async with`` it and ``async for`` over it.

        Where it starts and stops is either a position (``start``, ``stop``) or one
        value that implies it (``start_offset`` implies ``StartPosition.OFFSET``, and so
        on); two that disagree raise `InvalidInputError`. See `Subscription` for how it
        ends and how it survives a leader failover.

        Args:
            stream: The stream's name.
            partition: The partition (0 by default).
            start: Where to start; default NEW_ONLY (only messages published from now).
            start_offset: Start at this offset. No message before it is delivered, even
                when the node's high watermark is below it (the server then starts at
                the watermark; the client drops what comes before the offset).
            start_timestamp_ns: Start at the first message at or after this Unix time (ns).
            start_time: The same as a datetime (naive: local time).
            start_time_delta: Start this long ago (seconds or a timedelta).
            stop: Where to stop; default ON_CANCEL (follow until closed).
            stop_offset: Stop after this offset (inclusive).
            stop_timestamp_ns: Stop after the last message at or before this Unix time.
            stop_time: The same as a datetime (naive: local time).
            read_isr_replica: Read from a random in-sync replica, not only the leader.
            resume: Resume the partition if it is paused.
            reverse: Newest first (emulated on servers that ignore it, e.g. v1.9.0).

        Returns:
            The `Subscription`; it opens on ``async with`` or the first read.

        Raises:
            InvalidInputError: an argument is not valid or two of them conflict.
            FeatureNotSupportedError: the server is known to lack stop positions or
                pausing (``resume``).
        """
        self._require_open()
        kw = _subscribe_kw(
            start,
            start_offset,
            start_timestamp_ns,
            start_time,
            start_time_delta,
            stop,
            stop_offset,
            stop_timestamp_ns,
            stop_time,
            read_isr_replica,
            resume,
            reverse,
        )
        if (
            (stop is not None and stop is not StopPosition.ON_CANCEL)
            or stop_offset is not None
            or stop_timestamp_ns is not None
            or stop_time is not None
        ):
            self._features.check("stop_positions")
        if resume:
            self._features.check("pause_resume")
        return self._subscription(stream, partition, kw)

    def _subscription(self, stream: str, partition: int, kw: SubscribeArgs) -> Subscription:
        make = Subscription if self._tracer is None else self._tracer.subscription
        sub = make(
            self._metadata,
            self._pool,
            self._options,
            stream,
            partition,
            on_close=self._subscriptions.discard,
            features=self._features,
            **kw,
        )
        self._subscriptions.add(sub)
        return sub

    # ------------------------------------------------------------ cursors

    async def set_cursor(
        self, cursor_id: str, stream: str, offset: int, *, partition: int = 0
    ) -> None:
        """Store ``offset`` as the cursor's position in a partition (0 by default, as
        `subscribe`). Conventionally the offset of the last message processed."""
        self._require_open()
        self._features.check("cursors")
        await _admin.set_cursor(self._metadata, self._options, cursor_id, stream, partition, offset)

    async def fetch_cursor(self, cursor_id: str, stream: str, *, partition: int = 0) -> int:
        """The cursor's stored offset in a partition (0 by default), or -1 if it has none.

        It is the offset set last, also after a server restart and for a cursor moved
        back (set lower, or cleared with -1), on every server version. Servers up to
        v1.9.0 answer otherwise once their cache has lost the cursor (a restart, a new
        leader of the ``__cursors`` partition, 512 other cursors): the highest offset
        ever set, or -1 right after a restart. On those servers this method restores a
        hidden ``__cursors`` high watermark by storing a cursor of its own
        (``liftbridge-client.wake``), and checks a non-negative answer against the newest
        record in ``__cursors``, which it reads (where authorization is on, without
        FetchPartitionMetadata, Subscribe and SetCursor on ``__cursors`` it takes the
        server's answer as it is, and logs a warning once). A -1 that such a server
        cached for another client stays -1 until the cursor is set again. See
        docs/compatibility.md.
        """
        self._require_open()
        self._features.check("cursors")
        return await _cursor_log.fetch_cursor(
            self._metadata,
            self._options,
            self._features,
            self.subscribe,
            cursor_id,
            stream,
            partition,
        )

    # ------------------------------------------------------------ consumer groups

    def consumer(
        self,
        group_id: str,
        streams: Sequence[str],
        *,
        options: ConsumerOptions | None = None,
    ) -> Consumer:
        """A member of consumer group ``group_id`` reading ``streams``: ``async with`` it
        (joins the group) and ``async for`` over it. See `Consumer` and
        docs/consumer-groups.md. Needs cursors enabled on the server, and a server with
        consumer groups (else `FeatureNotSupportedError` when it joins)."""
        self._require_open()
        consumer = Consumer(
            self._metadata,
            self._pool,
            self._options,
            self.subscribe,
            group_id,
            streams,
            options,
            on_close=self._consumers.discard,
            fetch_cursor=lambda c, s, p: self.fetch_cursor(c, s, partition=p),
        )
        self._consumers.add(consumer)
        return consumer

    # ------------------------------------------------------------ activity stream

    def activity(
        self,
        *,
        start: StartPosition | None = None,
        start_offset: int | None = None,
        start_timestamp_ns: int | None = None,
        start_time: datetime.datetime | None = None,
        start_time_delta: float | datetime.timedelta | None = None,
        stop: StopPosition | None = None,
        stop_offset: int | None = None,
        stop_timestamp_ns: int | None = None,
        stop_time: datetime.datetime | None = None,
    ) -> ActivityStream:
        """The server's activity stream as typed events (see `ActivityStream`).

        The server must run with ``activity.stream.enabled: true``, else
        `FeatureNotSupportedError` when it is read.

        Args:
            start: Where to start; default NEW_ONLY (new events only);
                ``StartPosition.EARLIEST`` reads from the first.
            start_offset: Start at this offset: ``event.offset + 1`` resumes after an
                event already handled.
            start_timestamp_ns: Start at the first event at or after this Unix time (ns).
            start_time: The same as a datetime (naive: local time).
            start_time_delta: Start this long ago (seconds or a timedelta).
            stop: Where to stop; default ON_CANCEL (follow until closed).
            stop_offset: Stop after this offset (inclusive).
            stop_timestamp_ns: Stop after the last event at or before this Unix time.
            stop_time: The same as a datetime (naive: local time).

        Returns:
            The `ActivityStream`: ``async with`` it and ``async for`` over its events.

        Raises:
            InvalidInputError: an argument is not valid or two of them conflict.
        """
        sub = self.subscribe(
            ACTIVITY_STREAM,
            0,
            start=start,
            start_offset=start_offset,
            start_timestamp_ns=start_timestamp_ns,
            start_time=start_time,
            start_time_delta=start_time_delta,
            stop=stop,
            stop_offset=stop_offset,
            stop_timestamp_ns=stop_timestamp_ns,
            stop_time=stop_time,
        )
        return ActivityStream(self._metadata, sub)
