"""ExactlyOncePublisher: publishes that readers can de-duplicate and commit atomically.

Every message carries a UUID (see `uuids`) in the header `UUID_HEADER` (``"eo-uuid"``, 16
raw bytes); the value stays the caller's bytes. A publish that fails with a retriable
error (timeout, leader change, NATS outage, ...) is sent again with the SAME UUID, so a
read-committed reader drops any copy the failed attempt left behind.

Ordering matters: a reader drops a message whose clock is not above the last one it
committed from the same producer in the partition. So the publisher keeps at most one
message in flight per partition (the next one is sent once the previous is acked), and
ticks the clock under that partition's lock: clock order is offset order. Throughput
comes from several partitions or several publishers (each has its own ProducerID).

`publish_uncommitted` writes CONTINUE_TXN messages; `build_ack_intents` returns one ACK_TXN
message per partition written since the last call. Store the intents durably first
(`AckIntent.to_json`), then `write_ack_intents`; after a crash, write the stored intents
again: re-written intents commit once. A publisher that keeps the crashed one's ProducerID
also rolls back what that one left open elsewhere (``rollback_open``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid as _uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from liftbridge_client import errors
from liftbridge_client._cluster.metadata import Absence
from liftbridge_client.exactly_once.mapping import Mapping as PartitionMapping
from liftbridge_client.exactly_once.mapping import ModuloMapping
from liftbridge_client.exactly_once.uuids import (
    Clock,
    Flags,
    ProducerID,
    build_uuid_bytes,
    clock_of,
    new_producer_id,
    producer_of,
)
from liftbridge_client.models import Ack, AckPolicy
from liftbridge_client.options import RetryPolicy

if TYPE_CHECKING:
    from liftbridge_client.client import Client

__all__ = [
    "CLOCKS_HEADER",
    "DEFAULT_RETRY",
    "UUID_HEADER",
    "AckIntent",
    "ExactlyOncePublisher",
    "intents_from_json",
    "intents_to_json",
    "retry_worthy",
]

log = logging.getLogger(__name__)

Value = bytes | Callable[[_uuid.UUID], bytes]
"""A message value: bytes, or a function of the message's UUID returning them."""

UUID_HEADER = "eo-uuid"
"""The header that carries a message's 16-byte UUID."""

CLOCKS_HEADER = "eo-clocks"
"""The header of a message that takes more than one clock value (ASCII decimal): a pack
whose rows have a clock each, the UUID carrying the last row's. Readers use it to deliver
each row once when two copies of a pack end on different rows."""

DEFAULT_RETRY = RetryPolicy(attempts=60, initial_backoff=0.1, max_backoff=2.0)


@dataclass(frozen=True, slots=True)
class AckIntent:
    """An ACK_TXN message to write to one partition: commits the producer's open
    transaction there. ``value`` is empty unless a framing defines one."""

    stream: str
    partition: int
    uuid: bytes
    value: bytes = b""

    def to_json(self) -> str:
        return json.dumps(
            {
                "stream": self.stream,
                "partition": self.partition,
                "uuid": self.uuid.hex(),
                "value": self.value.hex(),
            },
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> AckIntent:
        try:
            doc = json.loads(text)
            intent = cls(
                str(doc["stream"]),
                int(doc["partition"]),
                bytes.fromhex(doc["uuid"]),
                bytes.fromhex(doc.get("value", "")),
            )
        except (ValueError, KeyError, TypeError, RecursionError) as exc:  # json: deep nesting
            raise errors.InvalidInputError(f"intent is not a valid AckIntent: {exc}") from exc
        if len(intent.uuid) != 16:
            raise errors.InvalidInputError("intent uuid must be 16 bytes")
        return intent


def retry_worthy(exc: errors.LiftbridgeError) -> bool:
    """Whether a failed exactly-once publish may be sent again."""
    # Re-sending is always safe here (same UUID), so server-side INTERNAL errors, which
    # the fault runs saw succeed on retry during a leader change, are retried too.
    if isinstance(exc, errors.CursorsDisabledError):
        return False
    return exc.retriable or isinstance(exc, errors.InternalServerError)


class ExactlyOncePublisher:
    """Publishes through ``client`` with UUIDs, retries and per-partition ordering.

    ``mapping`` picks a partition from the key when no ``partition`` is given (default:
    `ModuloMapping`); partition lists come from metadata and are re-read every
    ``metadata_max_age`` seconds (`partitions(stream, refresh=True)` forces it). A retry
    always goes to the partition of the first attempt: de-duplication is per partition.
    ``ack_policy`` defaults to ALL:
    exactly-once needs the message on every in-sync replica before it is counted as
    written.

    ``rollback_open``: before its first `publish_uncommitted` to a partition, write an
    ACK_TXN there that rolls back whatever this ProducerID left open in an earlier run (a
    writer that crashed mid-transaction, recovered with the same ``producer``), so that
    this run's first commit does not commit it too. Its clock is that of the intents of
    the earlier run re-written with `write_ack_intents` before (above all it committed,
    below all it left open), else 1 (nothing known: readers then drop the open span and
    reset this producer's clock there). Default: on when ``producer`` is given and
    ``clock`` is not; with a clock of your own, re-sending the same UUIDs is the recovery
    (as the Spark sink does) and a rollback below them would commit them twice.
    """

    def __init__(
        self,
        client: Client,
        *,
        producer: ProducerID | None = None,
        clock: Clock | None = None,
        mapping: PartitionMapping | None = None,
        ack_policy: AckPolicy = AckPolicy.ALL,
        retry: RetryPolicy = DEFAULT_RETRY,
        metadata_max_age: float = 60.0,
        rollback_open: bool | None = None,
    ) -> None:
        if producer is not None and (type(producer) is not bytes or len(producer) != 6):
            raise errors.InvalidInputError("producer must be 6 bytes")
        if rollback_open is not None and type(rollback_open) is not bool:
            raise errors.InvalidInputError("rollback_open must be a bool or None")
        if not isinstance(ack_policy, AckPolicy) or ack_policy is AckPolicy.NONE:
            raise errors.InvalidInputError("ack_policy must be AckPolicy.LEADER or ALL")
        if not isinstance(retry, RetryPolicy):
            raise errors.InvalidInputError("retry must be a RetryPolicy")
        if not metadata_max_age > 0:
            raise errors.InvalidInputError("metadata_max_age must be > 0")
        self._client = client
        self._producer = producer or new_producer_id()
        self._clock = clock or Clock()
        self._auto_clock = clock is None
        self._mapping = mapping or ModuloMapping()
        self._ack_policy = ack_policy
        self._retry = retry
        self._metadata_max_age = metadata_max_age
        self._partitions: dict[str, tuple[float, tuple[int, ...]]] = {}
        self._locks: dict[tuple[str, int], asyncio.Lock] = {}
        self._open: dict[tuple[str, int], None] = {}  # partitions with an open transaction
        if rollback_open is None:
            rollback_open = producer is not None and clock is None
        self._rollback_open = rollback_open
        self._rollback_clock = 1  # raised by the intents of an earlier run (write_ack_intents)
        # Partitions where nothing an earlier run of this producer left open can commit any
        # more: rolled back, re-acked by its intents, or ended by an OUTSIDE_TXN of ours.
        self._closed: set[tuple[str, int]] = set()
        self._rolled_back: set[tuple[str, int]] = set()
        self._built = False  # whether build_ack_intents was called (intents of our own)
        self.retries = 0  # attempts beyond the first, over all publishes

    @property
    def producer(self) -> ProducerID:
        return self._producer

    # ------------------------------------------------------------ partitions

    async def partitions(self, stream: str, *, refresh: bool = False) -> tuple[int, ...]:
        """The stream's partitions as last read from metadata (re-read when stale).

        A re-read that does not list the stream keeps the list read before (a restarting
        broker may not have reloaded it; a deleted stream fails the publish itself). With
        no list yet: `NotFoundError` once the stream is missing from a few answers in a row
        over a few seconds, or the retry budget is spent."""
        cached = self._partitions.get(stream)
        now = time.monotonic()
        if cached is not None and not refresh and now - cached[0] <= self._metadata_max_age:
            return cached[1]
        absence = Absence()
        attempt = 1
        while True:
            try:
                info = (await self._client.fetch_metadata(stream)).streams.get(stream)
            except errors.LiftbridgeError as exc:
                if not retry_worthy(exc) or attempt >= self._retry.attempts:
                    raise
            else:
                if info is not None and info.partitions:
                    cached = (now, tuple(sorted(info.partitions)))
                    self._partitions[stream] = cached
                    return cached[1]
                if cached is not None:
                    log.info("metadata does not list %s: keeping its partition list", stream)
                    return cached[1]
                absence.note(False)
                if absence.proven or attempt >= self._retry.attempts:
                    raise errors.NotFoundError(
                        f"stream {stream!r} is not in the metadata ({absence})"
                    )
            await asyncio.sleep(self._retry.backoff(attempt))
            attempt += 1

    async def _choose(self, stream: str, key: bytes | None, partition: int | None) -> int:
        if partition is not None:
            if type(partition) is not int or partition < 0:
                raise errors.InvalidInputError("partition must be an int >= 0")
            return partition
        return self._mapping.choose(stream, key, await self.partitions(stream))

    # ------------------------------------------------------------ publish

    async def publish_committed(
        self,
        stream: str,
        value: Value,
        *,
        key: bytes | None = None,
        headers: Mapping[str, bytes] | None = None,
        partition: int | None = None,
        clocks: int = 1,
    ) -> Ack:
        """Publish an OUTSIDE_TXN message: visible to read-committed readers at once.

        ``value``: the bytes, or a function of the message's UUID that returns them (to
        write Gazette-style self-describing values, e.g. with a `framing`); it is called
        once, and retries re-send its bytes. ``clocks``: the clock values the message
        takes, for a pack (`liftbridge_client.packing`) of that many rows, each with a
        clock of its own (header `CLOCKS_HEADER`); readers then drop the rows of a copy
        that an earlier copy ending on another row delivered.
        """
        partition = await self._choose(stream, key, partition)
        return await self._publish(
            stream, partition, value, key, headers, Flags.OUTSIDE_TXN, clocks
        )

    async def publish_uncommitted(
        self,
        stream: str,
        value: Value,
        *,
        key: bytes | None = None,
        headers: Mapping[str, bytes] | None = None,
        partition: int | None = None,
        clocks: int = 1,
    ) -> Ack:
        """Publish a CONTINUE_TXN message: visible once an ACK intent commits it.
        ``value`` and ``clocks`` as in `publish_committed`."""
        partition = await self._choose(stream, key, partition)
        self._open[(stream, partition)] = None
        return await self._publish(
            stream, partition, value, key, headers, Flags.CONTINUE_TXN, clocks
        )

    def build_ack_intents(self) -> list[AckIntent]:
        """One ACK_TXN intent per partition written by `publish_uncommitted` since the last
        call. Call it once those publishes are acked; store the result durably, then
        `write_ack_intents`."""
        self._built = True
        if self._auto_clock:
            self._clock.update()
        intents = [
            AckIntent(
                stream,
                partition,
                build_uuid_bytes(self._producer, self._clock.tick(), Flags.ACK_TXN),
            )
            for stream, partition in self._open
        ]
        self._open.clear()
        return intents

    async def write_ack_intents(self, intents: Iterable[AckIntent]) -> list[Ack]:
        """Write intents (retried with their UUIDs until acked); the same intents may be
        written again after a crash: readers commit them once. A recovered writer that
        keeps its ``producer`` writes the stored intents before it publishes anything
        uncommitted (see ``rollback_open``)."""
        intents = list(intents)
        if not all(isinstance(intent, AckIntent) for intent in intents):
            raise errors.InvalidInputError("intents must be AckIntent objects")
        # Before this publisher has built intents, ours are an earlier run's.
        earlier = set() if self._built else {i for i in intents if self._is_ours(i)}
        if earlier:
            late = sorted({(i.stream, i.partition) for i in earlier} & self._rolled_back)
            if late:
                log.warning(
                    "intents of an earlier run of producer %s written after this publisher "
                    "rolled back %s: a transaction they commit may be lost there (write the "
                    "stored intents first)",
                    self._producer.hex(),
                    ", ".join(f"{s}/{p}" for s, p in late),
                )
            self._rollback_clock = max(self._rollback_clock, *(clock_of(i.uuid) for i in earlier))
        written = []
        for intent in intents:
            headers = {UUID_HEADER: intent.uuid}
            written.append(
                await self._send(intent.stream, intent.partition, intent.value, None, headers)
            )
            if intent in earlier:
                self._closed.add((intent.stream, intent.partition))
        return written

    def _is_ours(self, intent: AckIntent) -> bool:
        return producer_of(intent.uuid) == self._producer

    async def _publish(
        self,
        stream: str,
        partition: int,
        value: Value,
        key: bytes | None,
        headers: Mapping[str, bytes] | None,
        flags: Flags,
        clocks: int = 1,
    ) -> Ack:
        if type(value) is not bytes and not callable(value):
            raise errors.InvalidInputError("value must be bytes or a function of the UUID")
        if type(clocks) is not int or clocks < 1:
            raise errors.InvalidInputError("clocks must be an int >= 1")
        if headers and (UUID_HEADER in headers or CLOCKS_HEADER in headers):
            raise errors.InvalidInputError(
                f"headers must not hold the reserved {UUID_HEADER!r} or {CLOCKS_HEADER!r}"
            )
        where = (stream, partition)
        lock = self._locks.setdefault(where, asyncio.Lock())
        async with lock:
            if flags is Flags.CONTINUE_TXN and self._rollback_open and where not in self._closed:
                await self._roll_back_locked(stream, partition)
            if self._auto_clock:
                self._clock.update()
            uuid = build_uuid_bytes(self._producer, self._clock.tick(clocks), flags)
            if not isinstance(value, bytes):
                value = value(_uuid.UUID(bytes=uuid))
                if type(value) is not bytes:
                    raise errors.InvalidInputError("the value function must return bytes")
            all_headers = {**(headers or {}), UUID_HEADER: uuid}
            if clocks > 1:
                all_headers[CLOCKS_HEADER] = str(clocks).encode()
            ack = await self._send_locked(stream, partition, value, key, all_headers)
            if flags is Flags.OUTSIDE_TXN:
                # Readers drop an open span at an OUTSIDE_TXN of its producer (logged).
                self._closed.add(where)
            return ack

    async def _roll_back_locked(self, stream: str, partition: int) -> None:
        # An ACK_TXN commits its producer's held messages with clocks up to its own and
        # drops the later ones (as in Gazette); one at or below the last ACK rolls the open
        # span back. Whatever the earlier run left open has clocks above its last stored
        # intents' (or above 1), so none of it is committed.
        marker = build_uuid_bytes(self._producer, self._rollback_clock, Flags.ACK_TXN)
        await self._send_locked(stream, partition, b"", None, {UUID_HEADER: marker})
        log.debug(
            "%s/%d: rolled back producer %s to clock %d",
            stream,
            partition,
            self._producer.hex(),
            self._rollback_clock,
        )
        self._closed.add((stream, partition))
        self._rolled_back.add((stream, partition))

    async def _send(
        self,
        stream: str,
        partition: int,
        value: bytes,
        key: bytes | None,
        headers: Mapping[str, bytes],
    ) -> Ack:
        lock = self._locks.setdefault((stream, partition), asyncio.Lock())
        async with lock:
            return await self._send_locked(stream, partition, value, key, headers)

    async def _send_locked(
        self,
        stream: str,
        partition: int,
        value: bytes,
        key: bytes | None,
        headers: Mapping[str, bytes],
    ) -> Ack:
        attempt = 1
        absence = Absence()  # of the partition from the metadata
        while True:
            try:
                return await self._client.publish(
                    stream,
                    value,
                    key=key,
                    headers=headers,
                    partition=partition,
                    ack_policy=self._ack_policy,
                )
            except errors.NotFoundError as exc:
                # A broker restarting answers NOT_FOUND until it has reloaded the stream:
                # retried (with the metadata refreshed) while the metadata lists it.
                where = f"{stream}/{partition}"
                if attempt >= self._retry.attempts:
                    said = (
                        f"not listed by {absence}" if absence.answers else "the metadata lists it"
                    )
                    raise errors.NotFoundError(
                        f"{where}: NOT_FOUND through {attempt} attempts (retried with the same"
                        f" UUID; {said}): {exc}",
                        details=exc.details,
                    ) from exc
                absence.note(await self._listed(stream, partition))
                if absence.proven:
                    raise errors.NotFoundError(
                        f"{where}: NOT_FOUND, and not listed by {absence} (retried"
                        f" {attempt - 1} times): {exc}",
                        details=exc.details,
                    ) from exc
                log.info("publish to %s: %r: retrying, same UUID", where, exc)
            except errors.LiftbridgeError as exc:
                if not retry_worthy(exc) or attempt >= self._retry.attempts:
                    raise
                log.info(
                    "publish to %s/%d failed (%r): retrying, same UUID", stream, partition, exc
                )
            self.retries += 1
            await asyncio.sleep(self._retry.backoff(attempt))
            attempt += 1

    async def _listed(self, stream: str, partition: int) -> bool | None:
        """Whether fresh metadata lists the partition (None: no answer). All streams are
        asked for, so that the client's cache, and with it the leader the next attempt
        goes to, is refreshed as well."""
        try:
            info = (await self._client.fetch_metadata()).streams.get(stream)
        except errors.LiftbridgeError as exc:
            log.info("metadata for %s/%d: %r", stream, partition, exc)
            return None
        return info is not None and partition in info.partitions


def intents_to_json(intents: Sequence[AckIntent]) -> str:
    """Intents as one JSON document, for a durable checkpoint."""
    return json.dumps([json.loads(i.to_json()) for i in intents])


def intents_from_json(text: str | bytes) -> list[AckIntent]:
    try:
        docs: list[Any] = json.loads(text)
    except (ValueError, RecursionError) as exc:  # json: deep nesting
        raise errors.InvalidInputError(f"intents are not JSON: {exc}") from exc
    if not isinstance(docs, list):
        raise errors.InvalidInputError("intents must be a JSON list")
    return [AckIntent.from_json(json.dumps(d)) for d in docs]
