"""Cluster metadata cache and leader routing.

The cache holds the last FetchMetadata answer (all streams). Calls that must
reach a partition leader go through `call_leader`, which refreshes the cache
and retries when the server says it is not the leader or is unreachable.

Suspect leaders. A leader cut off from the rest of the cluster by a network partition
still answers FetchMetadata from the view it had, naming itself the leader, while the
others elect a new one. A leader that stopped acking gRPC publishes is therefore
`suspect` for `SUSPECT_S` seconds: every call that any broker may answer (FetchMetadata
for every refresh, periodic or not, and the other such RPCs) asks it last, and the
metadata is refreshed at once and again every `RECHECK_S` while the answer still names it
a leader, so that the next publishes go to the leader the others elect.

Brokers left out of an answer. A node lists the brokers that answered its survey over
NATS in time, so an answer can name a broker as a partition's leader, in its ISR, or as
a group's coordinator without listing it (its NATS was slow, or cut off, for a moment).
The cache keeps each broker's last listed address and adds such a broker back to the
answer it stores (`Metadata.brokers`): a leader's id with no address would fail every
call routed to it with "no known leader" for as long as the answers leave it out (the
soak saw 9 minutes of it), although the leader answers over gRPC. A broker only
replicas name (they never change, even for a node gone for good) is not added back.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import random
import time
from collections.abc import Awaitable, Callable, Collection, Sequence
from typing import TypeVar

from liftbridge_client import errors
from liftbridge_client._proto import api_pb2
from liftbridge_client._tasks import TaskHandle
from liftbridge_client._transport.grpc import BrokerPool, Stub, call, with_retries
from liftbridge_client.models import (
    Broker,
    Metadata,
    PartitionInfo,
    StreamInfo,
    metadata_from_proto,
)
from liftbridge_client.options import ClientOptions

log = logging.getLogger(__name__)

T = TypeVar("T")

_EMPTY = Metadata(brokers=(), streams={})


# A stream (or partition) counts as missing only once this many metadata answers in a row,
# over at least this many seconds, do not list it: a broker that restarts answers metadata
# (and NOT_FOUND to publishes) before it has reloaded its streams (a single node for about
# a second; a follower until its leader reaches it, and a leader backs off from a peer that
# was down).
ABSENT_ANSWERS = 3
ABSENT_SECONDS = 5.0

NOT_FOUND_REFRESH_GAP = 1.0  # seconds between the refreshes NOT_FOUND answers start
SUSPECT_S = 10.0  # seconds a leader stays suspect after a gRPC publish to it timed out
RECHECK_S = 1.0  # between refreshes while a suspect still leads in the answer
RECHECK_TIMEOUT = 2.0  # bound on one such refresh


class Absence:
    """Metadata answers in a row that did not list something, and since when."""

    __slots__ = ("answers", "since")

    def __init__(self) -> None:
        self.answers = 0
        self.since = 0.0

    def note(self, listed: bool | None) -> None:
        """Count an answer; None (no answer) proves nothing either way."""
        if listed:
            self.answers = 0
        elif listed is False:
            if self.answers == 0:
                self.since = time.monotonic()
            self.answers += 1

    @property
    def proven(self) -> bool:
        return self.answers >= ABSENT_ANSWERS and time.monotonic() - self.since >= ABSENT_SECONDS

    def __str__(self) -> str:
        answers = f"{self.answers} metadata answer{'' if self.answers == 1 else 's'}"
        return f"{answers} in a row over {time.monotonic() - self.since:.1f} s"


def _unreachable(exc: errors.LiftbridgeError) -> bool:
    """Failures that say nothing about the request, only about the broker."""
    return isinstance(
        exc,
        errors.UnavailableError
        | errors.DeadlineExceededError
        | errors.RequestCancelledError
        | errors.NoBrokerAvailableError,
    )


def _leader_addresses(metadata: Metadata) -> set[str]:
    """The addresses of every partition leader ``metadata`` names."""
    found: set[str] = set()
    for info in metadata.streams.values():
        for part in info.partitions.values():
            broker = metadata.broker(part.leader) if part.leader else None
            if broker is not None:
                found.add(broker.address)
    return found


def _named_brokers(metadata: Metadata) -> set[str]:
    """The ids ``metadata`` names as a partition leader, in an ISR or as a coordinator."""
    named = {g.coordinator for g in metadata.groups.values() if g.coordinator}
    for info in metadata.streams.values():
        for part in info.partitions.values():
            if part.leader:
                named.add(part.leader)
            named.update(part.isr)
    return named


KNOWN_BROKERS_MAX = 256  # last listed addresses kept by broker id (a cluster has a few)
DELETED_MAX = 256  # names of streams this client deleted, kept until created again


class MetadataCache:
    def __init__(self, pool: BrokerPool, seeds: Sequence[str], options: ClientOptions) -> None:
        if not seeds:
            raise errors.InvalidInputError("at least one seed address is needed")
        self._pool = pool
        self._seeds = list(dict.fromkeys(seeds))
        self._options = options
        self._metadata = _EMPTY
        self._lock = asyncio.Lock()
        self._generation = 0
        self._task: TaskHandle | None = None
        self._spawn: Callable[..., TaskHandle] | None = None
        # Leaders a gRPC publish timed out on, each until when (monotonic seconds), and the
        # task refreshing the metadata around them.
        self._suspects: dict[str, float] = {}
        self._suspect_task: TaskHandle | None = None
        # Each broker's last listed entry, for answers that name it but leave it out.
        self._known: dict[str, Broker] = {}
        # Streams left out of the answers since one listed them, until proven gone
        # (`not_found`), and the refresh a NOT_FOUND for one of them started.
        self._missing: dict[str, Absence] = {}
        self._nudge: TaskHandle | None = None
        # Streams this client deleted (oldest first, a bounded few), each with whether an
        # answer has left it out since: one that lists it after that was created again (an
        # answer that lists it before may predate the deletion, or come from a follower
        # that has not applied it yet).
        self._deleted: dict[str, bool] = {}

    @property
    def current(self) -> Metadata:
        return self._metadata

    @property
    def seeds(self) -> list[str]:
        """The seed addresses the client was given (advertised form, overrides not applied)."""
        return list(self._seeds)

    # ------------------------------------------------------------ fetching

    def addresses(self, avoid: Collection[str] = ()) -> list[str]:
        """Known brokers first (shuffled to spread load), then seeds not among them, and the
        ``avoid`` addresses and the suspects last."""
        known = [b.address for b in self._metadata.brokers]
        random.shuffle(known)
        ordered = known + [s for s in self._seeds if s not in known]
        last = self.suspects.union(avoid)
        if last:
            ordered = [a for a in ordered if a not in last] + [a for a in ordered if a in last]
        return ordered

    async def call_any(
        self, what: str, fn: Callable[[Stub], Awaitable[T]], *, avoid: Collection[str] = ()
    ) -> T:
        """Run an RPC that any broker can answer, moving on from unreachable ones (the
        ``avoid`` addresses are asked last)."""
        last: errors.LiftbridgeError | None = None
        for address in self.addresses(avoid):
            try:
                return await call(lambda a=address: fn(self._pool.stub(a)))  # type: ignore[misc]
            except errors.LiftbridgeError as exc:
                if not _unreachable(exc):
                    raise
                log.debug("%s: broker %s unreachable: %s", what, address, exc)
                last = exc
        raise errors.NoBrokerAvailableError(
            f"{what}: no broker reachable among {self.addresses()}"
        ) from last

    async def fetch(
        self,
        streams: Sequence[str] = (),
        groups: Sequence[str] = (),
        *,
        avoid: Collection[str] = (),
    ) -> api_pb2.FetchMetadataResponse:
        req = api_pb2.FetchMetadataRequest(streams=list(streams), groups=list(groups))
        timeout = self._options.rpc_timeout
        return await self.call_any(
            "FetchMetadata", lambda stub: stub.FetchMetadata(req, timeout=timeout), avoid=avoid
        )

    async def refresh(self, *, avoid: Collection[str] = ()) -> Metadata:
        """Fetch all metadata; concurrent callers share one round trip.

        ``avoid``: brokers to ask only when no other answers. A leader that stopped acking
        may be cut off from the cluster; it still answers metadata, from the view it had
        (itself the leader) while the others elect a new one, so ask them first.
        """
        generation = self._generation
        async with self._lock:
            if self._generation != generation:
                return self._metadata  # someone refreshed while we waited
            before = self._metadata
            self._metadata = self._complete(metadata_from_proto(await self.fetch(avoid=avoid)))
            self._note_missing(before.streams.keys() - self._metadata.streams.keys())
            self._generation += 1
            await self._drop_departed()
            return self._metadata

    def _complete(self, answer: Metadata) -> Metadata:
        """``answer`` with the brokers it names but does not list added back from their
        last listed entries (see the module's docstring)."""
        known = self._known
        for broker in answer.brokers:
            known[broker.id] = broker
        listed = {b.id for b in answer.brokers}
        missing = sorted(_named_brokers(answer) - listed)
        if len(known) > KNOWN_BROKERS_MAX:  # ids come and go: keep what this answer names
            keep = listed.union(missing)
            for broker_id in [i for i in known if i not in keep]:
                del known[broker_id]
        back = tuple(known[i] for i in missing if i in known)
        if not back:
            return answer
        log.debug(
            "metadata names brokers it does not list; using their last known addresses: %s",
            ", ".join(f"{b.id} at {b.address}" for b in back),
        )
        return dataclasses.replace(answer, brokers=answer.brokers + back)

    def _note_missing(self, dropped: Collection[str]) -> None:
        """Count this answer for the streams it leaves out (``dropped``: listed by the last
        one); forget those it lists again and those proven gone."""
        missing, listed, deleted = self._missing, self._metadata.streams, self._deleted
        for name, gone in list(deleted.items()):
            if name not in listed:
                deleted[name] = True
            elif gone:
                del deleted[name]  # created again
        for name in dropped:
            missing.setdefault(name, Absence())
        for name in list(missing):
            if name in listed:
                del missing[name]
                continue
            absence = missing[name]
            absence.note(False)
            if absence.proven:
                del missing[name]

    def forget_stream(self, name: str) -> None:
        """``name`` was deleted (by this client): its NOT_FOUNDs mean what they say, until
        an answer lists it after one left it out, or this client creates it."""
        self._missing.pop(name, None)
        self._deleted.pop(name, None)  # to the end: the newest
        self._deleted[name] = False
        if len(self._deleted) > DELETED_MAX:
            del self._deleted[next(iter(self._deleted))]

    def stream_created(self, name: str) -> None:
        """``name`` was created (by this client): a restart may hide it again."""
        self._deleted.pop(name, None)

    def not_found(
        self, stream: str, exc: errors.NotFoundError, *, refresh: bool = True
    ) -> errors.NotFoundError:
        """A NOT_FOUND for ``stream`` as the client reports it.

        A broker that restarted answers NOT_FOUND (and metadata without the stream) until
        it has reloaded its streams. While the metadata listed ``stream`` lately and has
        not yet left it out of `ABSENT_ANSWERS` answers over `ABSENT_SECONDS`, the
        answer is `StreamNotLoadedError` (retriable), and (with ``refresh``: the caller
        did not just refresh) a refresh starts so that the metadata settles it either way;
        after that, ``exc`` itself.
        """
        if type(exc) is not errors.NotFoundError or stream in self._deleted:
            return exc
        absence = self._missing.get(stream)
        if absence is None and stream not in self._metadata.streams:
            return exc
        if absence is not None and absence.proven:
            return exc
        if refresh:
            self._refresh_soon()
        since = f"; {absence} left it out" if absence is not None else ""
        return errors.StreamNotLoadedError(
            f"{exc} (the metadata listed stream {stream!r} lately{since}: a broker that "
            "restarted may not have reloaded it yet, or it was deleted; it counts as gone "
            f"once {ABSENT_ANSWERS} answers in a row over {ABSENT_SECONDS:g} s leave it out; "
            "retry in a moment)",
            details=exc.details,
        )

    def _refresh_soon(self) -> None:
        """Start one refresh in the background unless one runs (or the client is closing)."""
        if self._spawn is None or (self._nudge is not None and not self._nudge.done):
            return

        async def refresh() -> None:
            try:
                await self.refresh()
            except errors.LiftbridgeError as exc:
                log.debug("metadata refresh after NOT_FOUND failed: %s", exc)
            await asyncio.sleep(NOT_FOUND_REFRESH_GAP)  # one refresh per gap at most

        with contextlib.suppress(RuntimeError):  # raised when the client's tasks stop
            self._nudge = self._spawn(refresh, name="lb-not-found-refresh")

    def known_broker(self, broker_id: str) -> Broker | None:
        """``broker_id``'s entry in the cached metadata, else its last listed one."""
        return self._metadata.broker(broker_id) or self._known.get(broker_id)

    async def _drop_departed(self) -> None:
        known = {b.address for b in self._metadata.brokers} | set(self._seeds)
        for address in self._pool.addresses() - known:
            await self._pool.forget(address)

    # ------------------------------------------------------------ periodic refresh

    def start(self, spawn: Callable[..., TaskHandle]) -> None:
        """Start the periodic refresh as a supervised task (`TaskSupervisor.spawn`); the
        refreshes around suspect leaders run the same way from then on."""
        self._spawn = spawn
        interval = self._options.metadata_refresh_interval
        if interval is not None and self._task is None:
            self._task = spawn(self._refresh_loop, interval, name="lb-metadata")

    async def _refresh_loop(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                await self.refresh()
            except errors.LiftbridgeError as exc:
                log.warning("periodic metadata refresh failed: %s", exc)

    async def stop(self, timeout: float = 1.0) -> None:
        self._spawn = None
        self._suspects.clear()
        for task in (self._task, self._suspect_task, self._nudge):
            if task is not None and not await task.stop(timeout):
                log.warning("the metadata refresher did not stop in time")
        self._task = self._suspect_task = self._nudge = None

    # ------------------------------------------------------------ suspect leaders

    def suspect(self, address: str) -> None:
        """Ask ``address`` last for `SUSPECT_S` more seconds, and refresh around it now (and
        every `RECHECK_S` while the answer names it a leader): a gRPC publish to this leader
        got no ack in time, and it may be cut off from the cluster."""
        self._suspects[address] = time.monotonic() + SUSPECT_S
        if self._suspect_task is None and self._spawn is not None:
            with contextlib.suppress(RuntimeError):  # raised when the client's tasks stop
                self._suspect_task = self._spawn(
                    self._refresh_around_suspects, name="lb-suspect-refresh"
                )

    @property
    def suspects(self) -> frozenset[str]:
        """The suspect leaders' addresses whose time has not run out (the others are
        forgotten)."""
        if not self._suspects:
            return frozenset()
        now = time.monotonic()
        for address in [a for a, until in self._suspects.items() if until <= now]:
            del self._suspects[address]
        return frozenset(self._suspects)

    async def _refresh_around_suspects(self) -> None:
        """Refresh until no suspect leads in the answer (the others have elected new
        leaders), or none is suspect any more. A suspect stays one for its whole time even
        so: asked, it would still name itself."""
        try:
            while self.suspects:
                try:
                    async with asyncio.timeout(RECHECK_TIMEOUT):
                        answer = await self.refresh()
                except (errors.LiftbridgeError, TimeoutError) as exc:
                    log.debug("metadata refresh around suspect leaders failed: %r", exc)
                else:
                    if not self.suspects & _leader_addresses(answer):  # new ones included
                        return
                await asyncio.sleep(RECHECK_S)
        finally:
            self._suspect_task = None

    # ------------------------------------------------------------ lookups

    async def stream(self, name: str) -> StreamInfo:
        """A stream's metadata, refreshing once if it is not cached."""
        info = self._metadata.streams.get(name)
        if info is None:
            info = (await self.refresh()).streams.get(name)
        if info is None:
            raise self.not_found(
                name,
                errors.NotFoundError(f"no such stream: {name}", details="stream not found"),
                refresh=False,  # it just did
            )
        return info

    async def partition(self, stream: str, partition: int) -> PartitionInfo:
        info = await self.stream(stream)
        part = info.partitions.get(partition)
        if part is None:
            raise errors.NotFoundError(
                f"stream {stream} has no partition {partition}", details="No such partition"
            )
        return part

    def cached_leader_address(self, stream: str, partition: int) -> str | None:
        """The leader's address from the cached metadata alone; None when not known."""
        info = self._metadata.streams.get(stream)
        part = info.partitions.get(partition) if info is not None else None
        return self._address_of(part.leader) if part is not None else None

    async def leader_address(self, stream: str, partition: int) -> str:
        part = await self.partition(stream, partition)
        address = self._address_of(part.leader)
        if address is None:
            # No leader known: ask again. The answer may lack the stream (deleted, or from a
            # broker that restarted and has not loaded it yet): NOT_FOUND, as the server says.
            info = (await self.refresh()).streams.get(stream)
            found = info.partitions.get(partition) if info is not None else None
            if found is None:
                missing = errors.NotFoundError(
                    f"stream {stream} partition {partition} is not in the metadata",
                    details="No such partition",
                )
                # Only a missing stream may be one a restarted broker has not reloaded.
                if info is not None:
                    raise missing
                raise self.not_found(stream, missing, refresh=False)  # it just did
            address = self._address_of(found.leader)
        if address is None:
            raise errors.UnavailableError(
                f"partition {stream}/{partition} has no known leader", details="no leader"
            )
        return address

    async def replica_address(self, stream: str, partition: int) -> str:
        """A random in-sync replica, or the leader when the ISR is empty or unknown."""
        part = await self.partition(stream, partition)
        candidates = [a for a in map(self._address_of, part.isr) if a is not None]
        if candidates:
            return random.choice(candidates)
        return await self.leader_address(stream, partition)

    def _address_of(self, broker_id: str) -> str | None:
        broker = self._metadata.broker(broker_id) if broker_id else None
        return broker.address if broker is not None else None

    # ------------------------------------------------------------ leader-routed calls

    async def call_leader(
        self,
        what: str,
        stream: str,
        partition: int,
        fn: Callable[[Stub], Awaitable[T]],
        *,
        address: Callable[[str, int], Awaitable[str]] | None = None,
    ) -> T:
        """Run ``fn`` against the partition leader, refreshing and retrying on stale routes."""
        resolve = address or self.leader_address

        async def attempt() -> T:
            target = await resolve(stream, partition)
            return await call(lambda: fn(self._pool.stub(target)))

        async def on_retry(exc: errors.LiftbridgeError) -> None:
            if exc.invalid_metadata:
                await self.refresh()

        return await with_retries(
            attempt,
            self._options.retry,
            what=what,
            retry_if=lambda e: e.retriable or _unreachable(e),
            on_retry=on_retry,
        )
