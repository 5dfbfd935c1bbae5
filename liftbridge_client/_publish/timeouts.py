"""Why a NATS publish got no ack: one metadata check per burst of ack timeouts.

Over NATS the server answers some publishes with silence where gRPC would answer
with an error (see docs/concepts.md): a paused partition has nobody subscribed to
its subject, a read-only one drops the message, and a deleted stream (or partition)
no longer listens. Left alone, each of these ends in a bare `AckTimeoutError`.
When a NATS publish's ack wait runs out, `TimeoutCheck` looks at the partition in
fresh metadata and fails the publish with the error that names the cause,
chained to the `AckTimeoutError`:

- the stream or partition is gone, or its subject changed: `NotFoundError`
  (`StreamNotLoadedError` while the metadata has not yet proven a stream it listed
  lately gone: `MetadataCache.not_found`);
- read-only: `ReadonlyPartitionError`, in the words gRPC's refusal gets;
- paused: `PartitionPausedError` (gRPC would have resumed it);
- no leader, or another leader than the client knew: `NotLeaderError` (the
  message may have been lost in the failover);
- none of these: the `AckTimeoutError`, saying what was ruled out and what
  remains possible.

Publishes time out together (a paused partition silences every message sent to it),
so the check is shared: expiring publishes join the one check in flight, and its
answer serves every publish that expires within `TTL` seconds after it. A burst of
1000 timeouts costs one FetchMetadata. The check waits at most `CHECK_TIMEOUT`
seconds; when it fails, the publishes get their `AckTimeoutError` with the reason.

The check asks the other brokers before the partition's leader (and the metadata cache
asks suspect leaders last): a broker cut off from the rest of the cluster still answers
metadata from its old view (itself the leader).
A gRPC publish that times out keeps its `AckTimeoutError` (gRPC answers what NATS leaves
silent, so the leader is slow or cut off), and its leader becomes suspect
(`MetadataCache.suspect`: asked last by every refresh for a while, and the metadata
refreshed around it at once), so the next publishes go to the leader the others elect.

A check whose answers leave only the NATS path to blame (the leader moved, or the
partition looks healthy) calls ``on_strand``: the publisher may detour
(`_publish.strand`).

`diagnose` is pure; `TimeoutCheck` is given the metadata calls and the task spawner
(`_publish.publisher.Publisher` wires them), so it imports nothing above `acks`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Collection

from liftbridge_client import errors
from liftbridge_client._publish.acks import AckFuture
from liftbridge_client._tasks import TaskHandle
from liftbridge_client._transport.grpc import readonly_partition_error
from liftbridge_client.models import Metadata

__all__ = ["CHECK_TIMEOUT", "TTL", "TimeoutCheck", "diagnose"]

log = logging.getLogger(__name__)

TTL = 1.0  # seconds a check's answer serves later timeouts
CHECK_TIMEOUT = 2.0  # bound on the metadata check (the caller waits for it)

# What an ack timeout over NATS may still mean once the partition looks healthy.
_REMAINING = (
    "partition {pid} of stream {stream!r} exists, is writable, not paused, and its leader "
    "{leader} is the one the client knew, so the message or its ack was lost on the way "
    "(NATS permissions, a NATS outage, the leader overloaded), or ack_wait is too short for "
    "the load"
)


def _partition_of(stream: str, subject: str, metadata: Metadata) -> tuple[int | None, str]:
    """The partition id ``subject`` is on, and the stream's subject ('' if no stream)."""
    info = metadata.streams.get(stream)
    if info is None:
        return None, ""
    for pid in info.partitions:
        if info.partition_subject(pid) == subject:
            return pid, info.subject
    return None, info.subject


def diagnose(
    exc: errors.AckTimeoutError,
    stream: str,
    subject: str,
    before: Metadata,
    after: Metadata,
) -> errors.LiftbridgeError:
    """The error for a NATS publish to ``subject`` of ``stream`` that timed out with ``exc``.

    ``before`` is the metadata the client had (the route it published on),
    ``after`` the fresh metadata. Pure: no IO. The result is chained to ``exc``.
    """
    where = f"publish to stream {stream!r} on subject {subject!r} over NATS got no ack"
    result: errors.LiftbridgeError
    if stream not in after.streams:
        result = errors.NotFoundError(
            f"{where}: the metadata no longer lists the stream", details="stream not found"
        )
    else:
        pid, stream_subject = _partition_of(stream, subject, after)
        if pid is None:
            result = errors.NotFoundError(
                f"{where}: the stream (now on subject {stream_subject!r}) has no partition "
                "on that subject",
                details="No such partition",
            )
        else:
            part = after.streams[stream].partitions[pid]
            old_info = before.streams.get(stream)
            old = old_info.partitions.get(pid) if old_info is not None else None
            if part.readonly:  # the words gRPC's refusal gets
                result = readonly_partition_error(stream, pid)
            elif part.paused:
                result = errors.PartitionPausedError(
                    f"{where}: partition {pid} is paused (nobody receives its NATS subject "
                    "until it is resumed: publish over gRPC, or subscribe, to resume it)"
                )
            elif not part.leader:
                result = errors.NotLeaderError(
                    f"{where}: partition {pid} has no leader now; retry once one is elected",
                    details="no leader",
                )
            elif old is not None and old.leader and old.leader != part.leader:
                result = errors.NotLeaderError(
                    f"{where}: the leader of partition {pid} moved from {old.leader} to "
                    f"{part.leader}; the message may have been lost in the failover",
                    details="leader moved",
                )
            else:
                result = errors.AckTimeoutError(
                    f"{exc}: {_REMAINING.format(pid=pid, stream=stream, leader=part.leader)}"
                )
    result.__cause__ = exc
    return result


class TimeoutCheck:
    """Settles timed-out NATS publishes with `diagnose`'s error, one check per burst.

    ``refresh`` fetches fresh metadata, asking the ``avoid`` brokers last (the client's
    `MetadataCache.refresh`), ``current`` gives the cached metadata, ``suspect`` names
    a leader a gRPC publish timed out on (`MetadataCache.suspect`), ``spawn`` starts the
    check as a supervised task, ``clock`` is the event loop's time.
    """

    def __init__(
        self,
        *,
        refresh: Callable[..., Awaitable[Metadata]],
        current: Callable[[], Metadata],
        suspect: Callable[[str], None],
        spawn: Callable[..., TaskHandle],
        clock: Callable[[], float],
        not_found: Callable[[str, errors.NotFoundError], errors.NotFoundError] | None = None,
    ) -> None:
        self._refresh = refresh
        self._not_found = not_found
        # Called after a check whose answers leave only the NATS path to blame, with
        # whether some leader had not even moved (`_publish.strand.Detour.stranded`).
        self.on_strand: Callable[[bool], None] | None = None
        self._current = current
        self._suspect = suspect
        self._spawn = spawn
        self._clock = clock
        self._waiting: list[tuple[AckFuture, errors.AckTimeoutError, str, str]] = []
        self._task: TaskHandle | None = None
        self._before: Metadata | None = None
        # The last answer: (until when it serves, metadata before, metadata after).
        self._answer: tuple[float, Metadata, Metadata] | None = None
        self._closed = False
        self.checks = 0  # metadata checks made (tests count them)

    def take(self, fut: AckFuture, exc: errors.AckTimeoutError) -> bool:
        """Settle ``fut`` (timed out with ``exc``) later or now; False: not a NATS publish."""
        expect = fut.expect
        if self._closed:
            return False
        if expect is None:
            address = getattr(fut.owner, "address", None)  # a gRPC publish's leader
            if type(address) is str:
                self._suspect(address)
            return False
        stream, subject = expect
        answer = self._answer
        if answer is not None and answer[0] > self._clock():
            _settle(fut, self._diagnose(exc, stream, subject, answer[1], answer[2]))
            return True
        if self._task is None:
            self._before = self._current()
            try:
                self._task = self._spawn(self._check, name="lb-ack-timeout-check")
            except RuntimeError:  # the client's tasks are stopping: no check any more
                return False
        self._waiting.append((fut, exc, stream, subject))
        return True

    async def _check(self) -> None:
        before = self._before or self._current()
        after: Metadata | None = None
        failure: BaseException | None = None
        try:
            self.checks += 1
            # The leaders these publishes went to: a broker cut off from the cluster
            # answers from its old view.
            avoid = _leaders(before, [(stream, subject) for _, _, stream, subject in self._waiting])
            async with asyncio.timeout(CHECK_TIMEOUT):
                after = await self._refresh(avoid=avoid)
        except (errors.LiftbridgeError, TimeoutError) as check_exc:
            failure = check_exc
        finally:
            # Whatever happened (cancelled by close included), every waiting publish settles.
            self._task = None
            waiting, self._waiting = self._waiting, []
            if after is not None:
                self._answer = (self._clock() + TTL, before, after)
            stranded = silent = False
            for fut, exc, stream, subject in waiting:
                if after is not None:
                    result = self._diagnose(exc, stream, subject, before, after)
                    stranded = stranded or _stranded(result)
                    silent = silent or isinstance(result, errors.AckTimeoutError)
                    _settle(fut, result)
                elif failure is not None:
                    plain = errors.AckTimeoutError(
                        f"{exc} (checking the partition's state failed: {failure})"
                    )
                    plain.__cause__ = failure
                    _settle(fut, plain)
                else:
                    _settle(fut, exc)
        if failure is not None:
            log.debug("ack timeout check failed: %r", failure)
        elif stranded and self.on_strand is not None:
            self.on_strand(silent)

    def _diagnose(
        self,
        exc: errors.AckTimeoutError,
        stream: str,
        subject: str,
        before: Metadata,
        after: Metadata,
    ) -> errors.LiftbridgeError:
        """`diagnose`, with a stream missing from ``after`` judged by ``not_found``: a
        broker that restarted answers metadata without the streams it has not reloaded."""
        result = diagnose(exc, stream, subject, before, after)
        if self._not_found is not None and stream not in after.streams:
            assert isinstance(result, errors.NotFoundError)
            judged = self._not_found(stream, result)
            if judged is not result:
                judged.__cause__ = exc
            return judged
        return result

    def close(self) -> None:
        """Settle the publishes waiting for a check with their `AckTimeoutError` now."""
        self._closed = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
        waiting, self._waiting = self._waiting, []
        for fut, exc, _, _ in waiting:
            _settle(fut, exc)


def _leaders(metadata: Metadata, publishes: Collection[tuple[str, str]]) -> frozenset[str]:
    """The addresses of the leaders of the partitions these (stream, subject) went to."""
    found: set[str] = set()
    for stream, subject in publishes:
        pid, _ = _partition_of(stream, subject, metadata)
        if pid is None:
            continue
        leader = metadata.streams[stream].partitions[pid].leader
        broker = metadata.broker(leader) if leader else None
        if broker is not None:
            found.add(broker.address)
    return frozenset(found)


def _stranded(result: errors.LiftbridgeError) -> bool:
    """A diagnosis that leaves the NATS path itself as the suspect: the partition has a
    leader and takes writes (it moved, or looks healthy), yet the publish got no ack."""
    if isinstance(result, errors.NotLeaderError):
        return result.details == "leader moved"
    return isinstance(result, errors.AckTimeoutError)


def _settle(fut: AckFuture, exc: BaseException) -> None:
    if not fut.done():
        fut.set_exception(exc)
