"""The journal of an exactly-once write: the driver records the intents it is about to
write, so that a replay writes the same ones.

Task attempts publish under ProducerIDs of their own (see `_transactional`), so a batch
run twice (a micro-batch replayed after the driver died between writing its intents and
Spark recording the batch; a batch write run again with the same ``writeId``) publishes
its rows under producers other than the ones committed the first time. Before it writes
any intent, the driver appends a `Record` (the write, the batch, the intents) to the
write's journal stream (one per write id, one partition, on up to three servers) and
waits until every replica in sync has it. The commit of a batch first reads the journal's
newest record: if it is for this batch, the batch was (or was being) committed, and the
driver writes the recorded intents again (written twice, an intent commits once) and
rolls back its own producers instead. Only the newest record matters: Spark replays only
the last batch of a query, and a batch write has one batch.

A record too large for one message (a batch of tens of thousands of intents) goes as
consecutive *parts* sharing a random nonce; the newest record is whole only when its last
part is the journal's newest message, and the parts before it are found walking back. A
driver that died while appending parts left no record: it wrote no intent either, so the
replay appends its own. A part appended twice (a retried publish that had landed) is
skipped as the copy it is.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import zlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import TypeVar

from liftbridge_client import errors
from liftbridge_client._transport.grpc import with_retries
from liftbridge_client.client import Client
from liftbridge_client.exactly_once.publisher import DEFAULT_RETRY, AckIntent, retry_worthy
from liftbridge_client.exactly_once.reader import read_range
from liftbridge_client.exactly_once.uuids import (
    Flags,
    build_uuid_bytes,
    producer_of,
    unix_ns_to_clock,
)
from liftbridge_client.models import AckPolicy
from liftbridge_client.spark._committed_stream import ensure_store

__all__ = [
    "CLOCK_BASE",
    "JOURNAL_PREFIX",
    "PART_BYTES",
    "Record",
    "journal_stream",
    "newest",
    "plan_commit",
    "rollback_intent",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

JOURNAL_PREFIX = "__lbspark_eo_journal_"

# A record's part stays under this, half of NATS's default max_payload (1 MB), whatever
# the stream names and however well the intents compress.
PART_BYTES = 512 * 1024

# Where the clock of every producer of an exactly-once write starts (2020-01-01): its
# ProducerID is new, so any fixed value does; a rollback intent ACKs a producer there.
CLOCK_BASE = unix_ns_to_clock(1_577_836_800 * 10**9)


def journal_stream(write_id: str) -> str:
    """The journal stream of a write (its name and subject): a digest of the write id, so
    that any id makes a valid stream name."""
    return JOURNAL_PREFIX + hashlib.blake2b(write_id.encode(), digest_size=12).hexdigest()


@dataclass(frozen=True, slots=True)
class Record:
    """The intents the driver writes to commit one batch of one write (or, with ``parts``
    above 1, part ``part`` of them: see the module doc)."""

    write_id: str
    batch: int
    intents: tuple[AckIntent, ...]
    part: int = 0
    parts: int = 1
    nonce: str = ""  # the parts of one record share it

    def encode(self) -> bytes:
        doc: dict[str, object] = {
            "write": self.write_id,
            "batch": self.batch,
            "intents": [[i.stream, i.partition, i.uuid.hex(), i.value.hex()] for i in self.intents],
        }
        if self.parts > 1:
            doc.update(part=self.part, parts=self.parts, nonce=self.nonce)
        return zlib.compress(json.dumps(doc, separators=(",", ":")).encode())

    def split(self, limit: int | None = None) -> list[bytes]:
        """The record as messages of at most ``limit`` bytes (`PART_BYTES`): one when it
        fits, else parts of about equal numbers of intents."""
        limit = PART_BYTES if limit is None else limit
        whole = self.encode()
        if len(whole) <= limit:
            return [whole]
        nonce, count = os.urandom(8).hex(), 2
        while True:
            size = -(-len(self.intents) // count)
            chunks = [self.intents[i : i + size] for i in range(0, len(self.intents), size)]
            out = [
                replace(self, intents=c, part=i, parts=len(chunks), nonce=nonce).encode()
                for i, c in enumerate(chunks)
            ]
            if all(len(m) <= limit for m in out):
                return out
            if size == 1:
                raise errors.MessageTooLargeError(
                    f"an intent of write {self.write_id!r} takes more than {limit} bytes"
                )
            count *= 2

    @classmethod
    def decode(cls, data: bytes) -> Record:
        try:
            doc = json.loads(zlib.decompress(data))
            intents = tuple(
                AckIntent(str(s), int(p), bytes.fromhex(u), bytes.fromhex(v))
                for s, p, u, v in doc["intents"]
            )
            parts = int(doc.get("parts", 1))
            part = int(doc.get("part", 0))
            if not 0 <= part < parts:
                raise ValueError(f"part {part} of {parts}")
            return cls(
                str(doc["write"]),
                int(doc["batch"]),
                intents,
                part,
                parts,
                str(doc.get("nonce", "")),
            )
        except (zlib.error, ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
            raise errors.PayloadDecodeError(f"not a journal record: {exc}") from exc


async def newest(client: Client, stream: str) -> Record | None:
    """The journal's newest whole record (None when it has none)."""
    info = await client.fetch_partition_metadata(stream, 0)
    last = info.high_watermark
    if last < 0:
        return None
    found = await read_range(client, stream, 0, last, last + 1)
    if not found:
        return None
    tail = Record.decode(found[-1].value)
    if tail.parts == 1:
        return tail
    if tail.part != tail.parts - 1:
        return None  # cut short while being appended: nothing of it was written
    # The parts, walking back; copies (a retried append) can sit between them.
    window = await read_range(client, stream, 0, max(0, last - 2 * tail.parts - 8), last + 1)
    parts: list[Record] = []
    for message in reversed(window):
        record = Record.decode(message.value)
        if record.nonce != tail.nonce:
            break
        if parts and record.part == parts[-1].part:
            continue  # a copy
        parts.append(record)
        if record.part == 0:
            break
    if [p.part for p in parts] != list(reversed(range(tail.parts))):
        raise errors.PayloadDecodeError(
            f"journal {stream}: the parts of the newest record (batch {tail.batch}) are not "
            f"all found before offset {last}"
        )
    intents = tuple(i for p in reversed(parts) for i in p.intents)
    return Record(tail.write_id, tail.batch, intents)


def rollback_intent(intent: AckIntent) -> AckIntent:
    """The intent that rolls back everything ``intent``'s producer wrote uncommitted in
    its partition: an ACK_TXN at the clock its first message started from."""
    uuid = build_uuid_bytes(producer_of(intent.uuid), CLOCK_BASE, Flags.ACK_TXN)
    return AckIntent(intent.stream, intent.partition, uuid)


def _rollbacks(intents: Sequence[AckIntent], keep: Sequence[AckIntent]) -> list[AckIntent]:
    kept = {(i.stream, i.partition, producer_of(i.uuid)) for i in keep}
    out: dict[AckIntent, None] = {}
    for intent in intents:
        if (intent.stream, intent.partition, producer_of(intent.uuid)) not in kept:
            out[rollback_intent(intent)] = None
    return list(out)


async def plan_commit(
    client: Client, write_id: str, batch: int, intents: Sequence[AckIntent]
) -> list[AckIntent]:
    """The intents that commit ``batch`` of ``write_id`` given the tasks' ``intents``, in
    the order to write them, once the journal records them (see the module doc)."""
    stream = journal_stream(write_id)

    # Each step is retried as the intents are: a stream just created may not have a
    # leader yet (NOT_FOUND), its leader may be a server that went down, and a record
    # appended twice is the same newest record.
    def retried(step: Callable[[], Awaitable[T]], what: str) -> Awaitable[T]:
        return with_retries(step, DEFAULT_RETRY, what=f"journal {stream}: {what}", retry_if=_worthy)

    await retried(lambda: ensure_store(client, stream), "create")
    found = await retried(lambda: newest(client, stream), "read")
    if found is not None and found.write_id == write_id and found.batch >= batch:
        if found.batch > batch:
            log.warning(
                "write %s: batch %d replayed after batch %d was committed: nothing of it "
                "is committed again",
                write_id,
                batch,
                found.batch,
            )
            return _rollbacks(intents, ())
        log.info(
            "write %s: batch %d was committed before (a replay): its %d recorded intents "
            "are written again and this run's producers rolled back",
            write_id,
            batch,
            len(found.intents),
        )
        return [*found.intents, *_rollbacks(intents, found.intents)]
    for data in Record(write_id, batch, tuple(intents)).split():
        await retried(partial(client.publish, stream, data, ack_policy=AckPolicy.ALL), "append")
    return list(intents)


def _worthy(exc: errors.LiftbridgeError) -> bool:
    return retry_worthy(exc) or isinstance(exc, errors.NotFoundError)
