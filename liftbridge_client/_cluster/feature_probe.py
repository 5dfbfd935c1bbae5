"""Feature detection against real brokers: `Client.features` (the IO side of `features`).

Each broker is probed lazily, the first time a caller needs to know, and the answer is
cached per broker address. Probes change nothing on the server and create no streams:

- RPC presence: every probed RPC gets an empty request that its handler rejects before
  touching any state (empty stream, group or cursor names: NotFound / InvalidArgument);
  UNIMPLEMENTED means the server lacks the RPC. Ten unary calls per broker, in parallel.
- Reverse subscribe: a reverse Subscribe starting one below the high watermark of a
  partition the caller is about to read (so at least two committed messages). A server
  that honours the field sends a lower offset next, or ends with EOF at offset 0; one that
  ignores it sends the next higher offset. Neither waits for new data.

An unreachable broker (UNAVAILABLE, deadline) makes a probe inconclusive: the error is
raised and nothing is cached.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import grpc
import grpc.aio
from google.protobuf.message import Message as ProtoMessage

from liftbridge_client import errors
from liftbridge_client._cluster.metadata import MetadataCache
from liftbridge_client._proto import api_pb2
from liftbridge_client._transport.grpc import BrokerPool, Stub, map_rpc_error
from liftbridge_client.features import (
    FEATURES,
    PROBED_RPCS,
    REVERSE,
    BrokerFeatures,
    ClusterFeatures,
    Observation,
    State,
    decide,
    intersect,
    parse_version,
)
from liftbridge_client.options import ClientOptions

if TYPE_CHECKING:
    SubscribeCall = grpc.aio.UnaryStreamCall[api_pb2.SubscribeRequest, api_pb2.Message]

log = logging.getLogger(__name__)

__all__ = ["FeatureDetector"]

# A request per probed RPC that its handler rejects before doing anything.
_PROBES: Mapping[str, Callable[[], ProtoMessage]] = {
    "Publish": lambda: api_pb2.PublishRequest(stream=""),
    "PauseStream": lambda: api_pb2.PauseStreamRequest(name=""),
    "SetStreamReadonly": lambda: api_pb2.SetStreamReadonlyRequest(name=""),
    "FetchPartitionMetadata": lambda: api_pb2.FetchPartitionMetadataRequest(stream=""),
    "FetchCursor": lambda: api_pb2.FetchCursorRequest(stream="", cursorId=""),
    "JoinConsumerGroup": api_pb2.JoinConsumerGroupRequest,
    "LeaveConsumerGroup": api_pb2.LeaveConsumerGroupRequest,
    "FetchConsumerGroupAssignments": api_pb2.FetchConsumerGroupAssignmentsRequest,
    "ReportConsumerGroupCoordinator": api_pb2.ReportConsumerGroupCoordinatorRequest,
}
assert set(_PROBES) == set(PROBED_RPCS), "every probed RPC needs a harmless request"

_ASSUMED = "(any broker)"  # the cache key of decisions made without probing

# Codes that say nothing about the RPC, only about reaching the broker.
_INCONCLUSIVE = frozenset(
    {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED}
)


class FeatureDetector:
    """What the brokers support, probed on first need and cached per broker.

    Reached as `Client.features`::

        await client.features.require("consumer_groups")   # FeatureNotSupportedError
        if await client.features.supported("cursors"): ...
        (await client.features.cluster()).enabled            # every broker has these

    ``brokers`` arguments are advertised ``host:port`` addresses; by default every broker
    in the cluster metadata. The cluster's set is the intersection over those brokers.
    With ``ClientOptions.probe_features=False`` nothing is probed: every broker is taken
    to be ``ClientOptions.server_version_fallback``.
    """

    def __init__(self, metadata: MetadataCache, pool: BrokerPool, options: ClientOptions) -> None:
        self._metadata = metadata
        self._pool = pool
        self._options = options
        self._fallback = parse_version(options.server_version_fallback)
        self._rpcs: dict[str, dict[str, bool]] = {}
        self._behaviours: dict[str, dict[str, bool]] = {}
        self._decided: dict[str, BrokerFeatures] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    def __repr__(self) -> str:
        return f"<FeatureDetector brokers={sorted(self._decided)} fallback={self._fallback}>"

    # ------------------------------------------------------------ inspecting

    def cached(self) -> dict[str, BrokerFeatures]:
        """What is known so far, by broker address (no IO)."""
        return {a: f for a, f in self._decided.items() if a != _ASSUMED}

    def invalidate(self, broker: str | None = None) -> None:
        """Forget one broker (or all): the next use probes again (after an upgrade)."""
        for table in (self._rpcs, self._behaviours, self._decided):
            if broker is None:
                table.clear()
            else:
                table.pop(broker, None)

    async def broker(self, address: str) -> BrokerFeatures:
        """One broker's features, probing it the first time."""
        known = self._decided.get(address)
        if known is not None:
            return known
        lock = self._locks.setdefault(address, asyncio.Lock())
        async with lock:  # concurrent first users share one probe
            known = self._decided.get(address)
            if known is None:
                if self._options.probe_features:
                    self._rpcs[address] = await self._probe_rpcs(address)
                known = self._decide(address)
            return known

    async def cluster(self, brokers: Sequence[str] | None = None) -> ClusterFeatures:
        """The intersection over ``brokers`` (default: every broker in the metadata).

        By default a broker that cannot be reached is left out (it serves nothing now);
        one named in ``brokers`` must answer.
        """
        if not self._options.probe_features:
            return intersect([self._assumed()])
        if brokers is not None:
            return intersect(await asyncio.gather(*(self.broker(a) for a in brokers)))
        addresses = await self._all_brokers()
        for departed in set(self._decided) - set(addresses) - {_ASSUMED}:
            # Gone from the cluster: if it comes back (upgraded, say) it is probed again.
            self.invalidate(departed)
        results = await asyncio.gather(*(self.broker(a) for a in addresses), return_exceptions=True)
        found: list[BrokerFeatures] = []
        for address, result in zip(addresses, results, strict=True):
            if isinstance(result, errors.LiftbridgeError):
                log.debug("features: broker %s left out (unreachable: %s)", address, result)
            elif isinstance(result, BaseException):
                raise result
            else:
                found.append(result)
        if addresses and not found:
            raise errors.NoBrokerAvailableError(
                f"feature detection: no broker reachable among {addresses}"
            )
        return intersect(found)

    async def supported(self, feature: str, *, brokers: Sequence[str] | None = None) -> bool:
        """True when every broker in ``brokers`` supports ``feature``."""
        _known(feature)
        return (await self.cluster(brokers)).supported(feature)

    async def require(self, feature: str, *, brokers: Sequence[str] | None = None) -> None:
        """Raise `FeatureNotSupportedError` unless every broker supports ``feature``.

        The error names the feature and the first broker lacking it. A behaviour that is
        not probed yet (reverse subscribe needs a partition) counts as lacking.
        """
        _known(feature)
        if not self._options.probe_features:
            self.check(feature)
            return
        cluster = await self.cluster(brokers)
        for found in cluster.brokers:
            decision = found.decisions[feature]
            if decision.state is not State.SUPPORTED:
                raise errors.FeatureNotSupportedError(
                    f"{feature} is not supported by broker {found.broker}: {decision.reason} "
                    "(see docs/compatibility.md)",
                    feature=feature,
                    broker=found.broker,
                )
        if not cluster.brokers:
            raise errors.NoBrokerAvailableError(f"{feature}: no broker to ask")

    def check(self, feature: str) -> None:
        """Refuse a call whose feature a broker is already known to lack (no IO).

        With probing off every broker is taken to be the fallback version. With probing on,
        only brokers already probed count: implied features (request fields) cannot be
        observed, so a call is never delayed to probe for them.
        """
        if not self._options.probe_features:
            found = self._assumed()
            if not found.supported(feature):
                raise errors.FeatureNotSupportedError(
                    f"{feature} is not supported by servers of "
                    f"server_version_fallback={self._options.server_version_fallback!r} "
                    f"({found.decisions[feature].reason}; feature probing is off)",
                    feature=feature,
                    broker=found.broker,
                )
            return
        for found in self._decided.values():
            decision = found.decisions[feature]
            if decision.state is State.UNSUPPORTED:
                raise errors.FeatureNotSupportedError(
                    f"{feature} is not supported by broker {found.broker}: {decision.reason}",
                    feature=feature,
                    broker=found.broker,
                )

    def _assumed(self) -> BrokerFeatures:
        found = self._decided.get(_ASSUMED)
        if found is None:
            found = self._decided[_ASSUMED] = decide(
                _ASSUMED, Observation(), fallback=self._fallback, probed=False
            )
        return found

    # ------------------------------------------------------------ reverse subscribe

    async def reverse_native(
        self, address: str, stream: str, partition: int, high_watermark: int
    ) -> bool:
        """True when ``address`` honours reverse subscribes (probed on this partition).

        False also when it cannot be told here (fewer than two committed messages, or an
        inconclusive probe): the caller then emulates, which gives the same result.
        """
        found = await self.broker(address)
        state = found.state("reverse_subscribe")
        if state is not State.UNKNOWN:
            return state is State.SUPPORTED
        if high_watermark < 1:
            log.debug("broker %s: reverse not probed (%s/%d too short)", address, stream, partition)
            return False
        try:
            honoured = await self._probe_reverse(address, stream, partition, high_watermark)
        except errors.LiftbridgeError as exc:
            log.debug("broker %s: reverse probe inconclusive: %s", address, exc)
            return False
        if honoured is None:
            return False
        self._behaviours.setdefault(address, {})[REVERSE] = honoured
        return self._decide(address).supported("reverse_subscribe")

    async def _probe_reverse(
        self, address: str, stream: str, partition: int, high_watermark: int
    ) -> bool | None:
        req = api_pb2.SubscribeRequest(
            stream=stream,
            partition=partition,
            startPosition=api_pb2.OFFSET,
            startOffset=high_watermark - 1,
            reverse=True,
        )
        timeout = self._options.rpc_timeout
        call: SubscribeCall = self._pool.stub(address).Subscribe(req, timeout=timeout)
        offsets: list[int] = []
        try:
            while len(offsets) < 2:
                try:
                    msg = await call.read()
                except grpc.RpcError as exc:
                    err = map_rpc_error(exc)
                    if isinstance(err, errors.UnknownServerError) and err.details == "EOF":
                        return bool(offsets)  # ended after one message: read backwards
                    raise err from exc
                if not isinstance(msg, api_pb2.Message):
                    return None  # ended with OK: no signal
                if msg.ByteSize():  # not the empty handshake
                    offsets.append(msg.offset)
        finally:
            call.cancel()
        honoured = offsets[1] < offsets[0]
        log.debug(
            "broker %s: reverse probe on %s/%d read offsets %s", address, stream, partition, offsets
        )
        return honoured

    # ------------------------------------------------------------ internals

    def _decide(self, address: str) -> BrokerFeatures:
        observation = Observation(
            rpcs=dict(self._rpcs.get(address, {})),
            behaviours=dict(self._behaviours.get(address, {})),
        )
        found = decide(
            address, observation, fallback=self._fallback, probed=self._options.probe_features
        )
        self._decided[address] = found
        return found

    async def _all_brokers(self) -> list[str]:
        brokers = self._metadata.current.brokers
        if not brokers:
            brokers = (await self._metadata.refresh()).brokers
        return [b.address for b in brokers]

    async def _probe_rpcs(self, address: str) -> dict[str, bool]:
        stub = self._pool.stub(address)
        timeout = self._options.rpc_timeout
        names = list(_PROBES)
        results = await asyncio.gather(
            *(_rpc_present(stub, n, _PROBES[n](), timeout) for n in names),
            return_exceptions=True,
        )
        seen: dict[str, bool] = {}
        for name, result in zip(names, results, strict=True):
            if isinstance(result, BaseException):
                raise result
            seen[name] = result
            log.debug("broker %s: RPC %s %s", address, name, "present" if result else "ABSENT")
        return seen


async def _rpc_present(stub: Stub, rpc: str, request: ProtoMessage, timeout: float) -> bool:
    method: Callable[..., Awaitable[Any]] = getattr(stub, rpc)
    try:
        await method(request, timeout=timeout)
    except grpc.RpcError as exc:
        code = exc.code() if isinstance(exc, grpc.aio.AioRpcError) else grpc.StatusCode.UNKNOWN
        if code is grpc.StatusCode.UNIMPLEMENTED:
            return False
        if code in _INCONCLUSIVE:
            raise map_rpc_error(exc) from exc
    return True


def _known(feature: str) -> None:
    if feature not in FEATURES:
        raise errors.InvalidInputError(
            f"feature must be one of {', '.join(FEATURES)}; got {feature!r}"
        )
