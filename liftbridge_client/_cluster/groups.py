"""Consumer groups: the member's bookkeeping and the group RPCs.

In order: positions and assignment changes (pure); the RPCs.

Bookkeeping
-----------

Consumer-group bookkeeping without IO: positions per partition, assignment changes.

A member tracks, for each partition it was assigned, the offset of the last message the
application finished with (``processed``) and the last one stored in the group's cursor
(``committed``). Every message handed out carries the partition's ``generation``: when
the partition is revoked or its reader restarted, messages still buffered from before
are recognised as stale and dropped (they were never handed out, so nothing is lost:
the next reader starts after ``processed``).

RPCs
----

The consumer-group RPCs, with the errors a group member acts on.

No state here: each function is one request (routed and retried as the RPC needs) and the
typed errors it can end with. A server without the group RPCs (before v1.8.0) answers
UNIMPLEMENTED: that becomes `FeatureNotSupportedError` before anything else sees it.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import grpc
import grpc.aio

from liftbridge_client import errors
from liftbridge_client._cluster.metadata import MetadataCache
from liftbridge_client._proto import api_pb2
from liftbridge_client._transport.grpc import (
    BrokerPool,
    Stub,
    call,
    is_no_metadata_leader,
    with_retries,
)
from liftbridge_client.models import ConsumerGroupInfo, StartPosition, metadata_from_proto
from liftbridge_client.options import ClientOptions

__all__ = [
    "FEATURE",
    "AutoOffset",
    "Joined",
    "PartitionKey",
    "PartitionState",
    "diff_assignments",
    "fetch_assignments",
    "fetch_group",
    "is_not_member",
    "join",
    "leave",
    "report_coordinator",
    "start_args",
]

# ---- Bookkeeping -----------------------------------------------------------------------

PartitionKey = tuple[str, int]
"""(stream, partition)."""


class AutoOffset(enum.Enum):
    """Where a member starts reading a partition the group has no committed offset for."""

    EARLIEST = "earliest"  # the oldest message still stored
    LATEST = "latest"  # the newest message already stored, then what follows
    NEW_ONLY = "new_only"  # only messages stored after the subscription starts


_AUTO_STARTS = {
    AutoOffset.EARLIEST: StartPosition.EARLIEST,
    AutoOffset.LATEST: StartPosition.LATEST,
    AutoOffset.NEW_ONLY: StartPosition.NEW_ONLY,
}


@dataclass(slots=True, eq=False)
class PartitionState:
    """What this member knows of one assigned partition."""

    stream: str
    partition: int
    processed: int | None = None  # offset of the last message the application finished
    committed: int | None = None  # offset last stored in the cursor (None: not by us)
    generation: int = 0  # bumped when the reader restarts: older buffered messages are stale
    active: bool = True  # False once revoked

    @property
    def key(self) -> PartitionKey:
        return (self.stream, self.partition)

    def mark_processed(self, offset: int) -> None:
        """Offsets only move forward (a redelivered message does not move them back)."""
        if self.processed is None or offset > self.processed:
            self.processed = offset

    def to_commit(self) -> int | None:
        """The offset to store now, or None when the cursor already has it."""
        if self.processed is None or self.processed == self.committed:
            return None
        return self.processed

    def resume_offset(self, cursor: int) -> int | None:
        """The offset a restarted reader starts at: after what was processed, or the cursor.

        None when neither is known (the group's auto offset applies).
        """
        last = max(cursor, -1 if self.processed is None else self.processed)
        return None if last < 0 else last + 1


@dataclass(frozen=True, slots=True)
class AssignmentDiff:
    """How the member's partitions change with a new assignment."""

    revoked: tuple[PartitionKey, ...] = ()
    added: tuple[PartitionKey, ...] = ()
    kept: tuple[PartitionKey, ...] = field(default=())


def flatten(assignments: Mapping[str, Iterable[int]]) -> frozenset[PartitionKey]:
    return frozenset((stream, p) for stream, parts in assignments.items() for p in parts)


def diff_assignments(
    current: Iterable[PartitionKey], assignments: Mapping[str, Iterable[int]]
) -> AssignmentDiff:
    """Compare the partitions read now with the coordinator's answer (sorted, deterministic)."""
    have = frozenset(current)
    want = flatten(assignments)
    return AssignmentDiff(
        revoked=tuple(sorted(have - want)),
        added=tuple(sorted(want - have)),
        kept=tuple(sorted(have & want)),
    )


def start_args(start_offset: int | None, auto_offset: AutoOffset) -> dict[str, Any]:
    """Subscribe arguments: at ``start_offset`` when known, else per ``auto_offset``."""
    if start_offset is not None:
        return {"start_offset": start_offset}
    return {"start": _AUTO_STARTS[auto_offset]}


log = logging.getLogger(__name__)

# ---- RPCs ------------------------------------------------------------------------------

FEATURE = "consumer_groups"
# FAILED_PRECONDITION when two joins race to create a group (server ErrConsumerGroupExists).
GROUP_EXISTS = "consumer group already exists"
_JOIN_RACE_RETRIES = 3
"""The feature name `FeatureNotSupportedError` carries for the group RPCs."""

T = TypeVar("T")

_NS = 1e-9


@dataclass(frozen=True, slots=True)
class Joined:
    """What JoinConsumerGroup answers: the coordinator, the epoch and the server's timeouts."""

    coordinator: str
    epoch: int
    consumer_timeout: float  # seconds without FetchConsumerGroupAssignments before expiry
    coordinator_timeout: float  # seconds without the coordinator before reporting it


def _unimplemented(exc: grpc.RpcError, what: str, address: str) -> None:
    if isinstance(exc, grpc.aio.AioRpcError) and exc.code() is grpc.StatusCode.UNIMPLEMENTED:
        where = f" at {address}" if address else ""
        raise errors.FeatureNotSupportedError(
            f"{what}: the broker{where} has no consumer groups (they need Liftbridge >= v1.8.0)"
            f": {exc.details()}",
            feature=FEATURE,
            broker=address,
        ) from exc


def _guard(what: str, address: str, rpc: Callable[[], Awaitable[T]]) -> Callable[[], Awaitable[T]]:
    async def run() -> T:
        try:
            return await rpc()
        except grpc.RpcError as exc:
            _unimplemented(exc, what, address)
            raise

    return run


def _retriable(exc: errors.LiftbridgeError) -> bool:
    return exc.retriable or is_no_metadata_leader(exc)


async def _any_broker(
    metadata: MetadataCache,
    options: ClientOptions,
    what: str,
    fn: Callable[[Stub], Awaitable[T]],
) -> T:
    """An RPC any broker forwards to the metadata leader, retried while that is in doubt."""

    async def attempt() -> T:
        return await metadata.call_any(what, fn)

    return await with_retries(attempt, options.retry, what=what, retry_if=_retriable)


async def join(
    metadata: MetadataCache,
    options: ClientOptions,
    group_id: str,
    consumer_id: str,
    streams: tuple[str, ...],
) -> Joined:
    req = api_pb2.JoinConsumerGroupRequest(
        groupId=group_id, consumerId=consumer_id, streams=list(streams)
    )
    timeout = options.rpc_timeout

    def fn(stub: Stub) -> Awaitable[api_pb2.JoinConsumerGroupResponse]:
        return _guard(
            "JoinConsumerGroup", "", lambda: stub.JoinConsumerGroup(req, timeout=timeout)
        )()

    for attempt in range(_JOIN_RACE_RETRIES + 1):
        try:
            resp = await _any_broker(metadata, options, "JoinConsumerGroup", fn)
            break
        except errors.FailedPreconditionError as exc:
            # Two members joining a group that does not exist yet both try to create it;
            # the server refuses the second. Joined again, it finds the group and adds it.
            if GROUP_EXISTS not in exc.details or attempt == _JOIN_RACE_RETRIES:
                raise
            await asyncio.sleep(options.retry.backoff(attempt + 1))
    return Joined(
        coordinator=resp.coordinator,
        epoch=resp.epoch,
        consumer_timeout=resp.consumerTimeout * _NS,
        coordinator_timeout=resp.coordinatorTimeout * _NS,
    )


async def leave(
    metadata: MetadataCache,
    options: ClientOptions,
    group_id: str,
    consumer_id: str,
) -> None:
    req = api_pb2.LeaveConsumerGroupRequest(groupId=group_id, consumerId=consumer_id)
    timeout = options.rpc_timeout

    def fn(stub: Stub) -> Awaitable[api_pb2.LeaveConsumerGroupResponse]:
        return _guard(
            "LeaveConsumerGroup", "", lambda: stub.LeaveConsumerGroup(req, timeout=timeout)
        )()

    await _any_broker(metadata, options, "LeaveConsumerGroup", fn)


async def fetch_assignments(
    pool: BrokerPool,
    options: ClientOptions,
    address: str,
    group_id: str,
    consumer_id: str,
    epoch: int,
) -> tuple[int, Mapping[str, tuple[int, ...]]]:
    """Ask the coordinator at ``address``: (epoch, stream -> partitions). Also a heartbeat."""
    req = api_pb2.FetchConsumerGroupAssignmentsRequest(
        groupId=group_id, consumerId=consumer_id, epoch=epoch
    )
    stub = pool.stub(address)
    resp = await call(
        _guard(
            "FetchConsumerGroupAssignments",
            address,
            lambda: stub.FetchConsumerGroupAssignments(req, timeout=options.rpc_timeout),
        )
    )
    assignments = {a.stream: tuple(sorted(a.partitions)) for a in resp.assignments}
    return resp.epoch, assignments


async def report_coordinator(
    metadata: MetadataCache,
    options: ClientOptions,
    group_id: str,
    consumer_id: str,
    coordinator: str,
    epoch: int,
) -> None:
    req = api_pb2.ReportConsumerGroupCoordinatorRequest(
        groupId=group_id, consumerId=consumer_id, coordinator=coordinator, epoch=epoch
    )
    timeout = options.rpc_timeout

    def fn(stub: Stub) -> Awaitable[api_pb2.ReportConsumerGroupCoordinatorResponse]:
        return _guard(
            "ReportConsumerGroupCoordinator",
            "",
            lambda: stub.ReportConsumerGroupCoordinator(req, timeout=timeout),
        )()

    await _any_broker(metadata, options, "ReportConsumerGroupCoordinator", fn)


async def fetch_group(metadata: MetadataCache, group_id: str) -> ConsumerGroupInfo | None:
    """The group's coordinator and epoch from metadata; None if the server has no such group."""
    resp = await metadata.fetch((), (group_id,))
    return metadata_from_proto(resp).groups.get(group_id)


def is_not_member(exc: errors.LiftbridgeError) -> bool:
    """The coordinator no longer counts us in (expired, or the group is gone): join again."""
    if isinstance(exc, errors.NotFoundError):
        return True
    return isinstance(exc, errors.FailedPreconditionError) and "not a member" in exc.details
