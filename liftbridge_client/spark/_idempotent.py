"""Idempotent sink writes: a retried task or a replayed micro-batch publishes no row twice.

Each task of a write has an identity: the write (the streaming query's id, or the
``writeId`` option of a batch write), the batch (the micro-batch id; 0 for a batch write)
and the Spark partition. Every row it publishes carries a header ``lbspark-id``: that
identity plus a digest of the row's content and its occurrence number among identical rows,
so the identity does not depend on the order rows arrive in (it may change after a shuffle).

Progress is kept in Liftbridge cursors of the target stream (``cursors.stream.partitions``
must be >= 1 on the servers):

- ``done`` (one per write, on partition 0): the last batch Spark committed, written by the
  DRIVER's commit (`commit_done`), never by a task. A task cannot know that it wrote all
  its rows: when a task fails upstream of the writer (a UDF that raises, a failed shuffle
  read), Spark ends the writer's input early instead of raising into it, so a failed
  attempt returns from ``write`` as if it had written everything. Only the job's commit
  proves every task succeeded. A replayed batch that was committed publishes nothing.
- ``from`` (per Spark partition, on every target partition): where the partition ended
  when the task's first attempt began, written before ``started``.
- ``started`` (per Spark partition, on partition 0): the batch whose first attempt began.
- ``owner``, ``beat`` and ``ended`` (per Spark partition, on partition 0): the task
  attempt (Spark's ``taskAttemptId``, unique in the application) that started last, a
  heartbeat it bumps after each chunk, and the last attempt that ended. An attempt that
  failed upstream of the writer keeps publishing its (cut-short) input after Spark has
  started the retry, possibly in a new stage attempt; the retry waits for the previous
  owner to end before it scans (or the scan misses rows that land after it, and the retry
  publishes them again). A previous owner whose heartbeat stops for ``ackTimeoutMs`` plus
  a margin is taken as dead (its executor was lost); the wait never exceeds
  ``deliveryTimeoutMs``.

A task whose batch was started but is not done (an earlier attempt failed, or the driver
died mid-batch) reads each partition from ``from`` to its end, collects the ``lbspark-id``
of its own earlier attempts and skips those rows.

Limits: rows must be the same multiset on replay (deterministic queries); every publish of
a failed attempt must have reached the server before the retry scans (the failed attempt's
client is closed first; a publish still in flight in the network then can be duplicated);
ack policy ``none`` is refused. This module is separate from the publishing so the
exactly-once layer's UUID producer can replace it.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

from liftbridge_client import errors
from liftbridge_client.client import Client
from liftbridge_client.models import StopPosition
from liftbridge_client.spark._columns import Columns

__all__ = ["HEADER", "TaskIdentity", "WriteGuard", "commit_done", "done_cursor", "row_ids"]

log = logging.getLogger(__name__)

HEADER = "lbspark-id"

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class TaskIdentity:
    """Which write, batch and Spark partition a task publishes for."""

    write_id: str
    batch_id: int
    task: int

    @property
    def tag(self) -> str:
        return f"{self.write_id}/{self.batch_id}/{self.task}"

    def cursor(self, what: str) -> str:
        return f"lbspark:{self.write_id}:{self.task}:{what}"

    @property
    def done_cursor(self) -> str:
        """The write's cursor of the last committed batch (see `commit_done`)."""
        return done_cursor(self.write_id)


def done_cursor(write_id: str) -> str:
    return f"lbspark:{write_id}:done"


async def commit_done(client: Client, stream: str, write_id: str, batch_id: int) -> None:
    """The driver's commit of an idempotent write: batch ``batch_id`` is published whole.

    Written only after Spark decided that every task of the batch succeeded; a replay of the
    batch (or a rerun of the job with the same write id) then publishes nothing.
    """
    try:
        await client.set_cursor(done_cursor(write_id), stream, batch_id)
    except errors.CursorsDisabledError as exc:
        raise _cursors_needed() from exc


def _cursors_needed() -> errors.FeatureNotSupportedError:
    return errors.FeatureNotSupportedError(
        "idempotent Spark writes keep their progress in cursors: enable them on the "
        "servers (cursors.stream.partitions >= 1)",
        feature="cursors",
    )


def row_ids(identity: TaskIdentity, rows: Columns, seen: dict[bytes, int]) -> list[str]:
    """The ``lbspark-id`` of each row (of its value, key, partition and headers); ``seen``
    counts the digests met so far in the task (carried from chunk to chunk)."""
    n = len(rows)
    none: list[None] = [None] * n
    tag = identity.tag
    blake2b = hashlib.blake2b
    ids = []
    for value, key, partition, headers in zip(
        rows.values, rows.keys or none, rows.partitions or none, rows.headers or none, strict=True
    ):
        h = blake2b(len(value).to_bytes(8, "big"), digest_size=12)
        h.update(value)
        h.update(b"\x00" if key is None else b"\x01" + len(key).to_bytes(8, "big") + key)
        if partition is not None:
            h.update(partition.to_bytes(8, "big", signed=True))
        if headers:
            for name, data in sorted(headers.items()):
                h.update(name.encode() + b"\x00" + len(data).to_bytes(8, "big") + data)
        digest = h.digest()
        count = seen.get(digest, 0)
        seen[digest] = count + 1
        ids.append(f"{tag}/{digest.hex()}/{count}")
    return ids


class WriteGuard:
    """The cursor bookkeeping of one task attempt on one target stream."""

    def __init__(
        self,
        client: Client,
        stream: str,
        identity: TaskIdentity,
        *,
        attempt: int,
        timeout: float,
        wait_for_earlier: float,
    ) -> None:
        self._client = client
        self._stream = stream
        self._identity = identity
        self._attempt = attempt  # Spark's taskAttemptId: unique within the application
        self._timeout = timeout
        self._wait_for_earlier = wait_for_earlier
        self._owner = False  # this attempt set the ``owner`` cursor
        self._beats = 0
        self._published: set[str] = set()  # ids earlier attempts published
        self._seen: dict[bytes, int] = {}  # row digests met so far, for occurrence numbers

    async def _fetch(self, cursor: str, partition: int = 0) -> int:
        try:
            return await self._client.fetch_cursor(cursor, self._stream, partition=partition)
        except errors.CursorsDisabledError as exc:
            raise _cursors_needed() from exc

    async def _set(self, cursor: str, value: int, partition: int = 0) -> None:
        try:
            await self._client.set_cursor(cursor, self._stream, value, partition=partition)
        except errors.CursorsDisabledError as exc:
            raise _cursors_needed() from exc

    async def prepare(self) -> bool:
        """True when an earlier attempt published everything; else find what it did."""
        ident = self._identity
        previous = await self._fetch(ident.cursor("owner"))
        await self._set(ident.cursor("owner"), self._attempt)
        self._owner = True
        if await self._fetch(ident.done_cursor) >= ident.batch_id:
            log.info("%s: the batch was committed before; skipping", ident.tag)
            return True
        metadata = await self._client.fetch_metadata(self._stream)
        info = metadata.streams.get(self._stream)
        if info is None:
            raise errors.NotFoundError(f"option 'stream': no stream named {self._stream}")
        partitions = sorted(info.partitions)
        if await self._fetch(ident.cursor("started")) == ident.batch_id:
            if previous not in (-1, self._attempt):
                await self._wait_for_end_of(previous)
            self._published = await self._find_published(partitions)
            return False
        for p in partitions:
            end = (await self._client.fetch_partition_metadata(self._stream, p)).high_watermark
            await self._set(ident.cursor("from"), end + 1, p)
        await self._set(ident.cursor("started"), ident.batch_id)
        return False

    async def _wait_for_end_of(self, previous: int) -> None:
        """Until the previous attempt has ended, its heartbeat has stopped (its process is
        gone), or ``deliveryTimeoutMs`` passed."""
        loop = asyncio.get_running_loop()
        start = loop.time()
        idle_limit = self._timeout + 5.0  # it may wait up to ackTimeoutMs between beats
        beat, beat_at = await self._fetch(self._identity.cursor("beat")), start
        while await self._fetch(self._identity.cursor("ended")) != previous:
            now = loop.time()
            latest = await self._fetch(self._identity.cursor("beat"))
            if latest != beat:
                beat, beat_at = latest, now
            if now - beat_at >= idle_limit or now - start >= self._wait_for_earlier:
                log.warning(
                    "%s: the previous attempt (%d) did not end within %.0f s: scanning anyway",
                    self._identity.tag,
                    previous,
                    now - start,
                )
                return
            await asyncio.sleep(0.2)

    async def beat(self) -> None:
        """After a chunk: this attempt is alive (a retry waiting for it keeps waiting)."""
        self._beats += 1
        await self._set(self._identity.cursor("beat"), self._attempt * 1_000_000 + self._beats)

    async def close(self) -> None:
        """This attempt publishes nothing more (its publishes are acked or abandoned)."""
        if self._owner:
            self._owner = False
            await self._set(self._identity.cursor("ended"), self._attempt)

    def mark(self, chunk: Columns) -> Columns:
        """The rows not published before, each with its ``lbspark-id`` header."""
        ids = row_ids(self._identity, chunk, self._seen)
        old = chunk.headers
        headers: list[dict[str, bytes] | None]
        if old is None:
            headers = [{HEADER: i.encode()} for i in ids]
        else:
            headers = [{**(h or {}), HEADER: i.encode()} for h, i in zip(old, ids, strict=True)]
        marked = Columns(chunk.values, chunk.streams, chunk.keys, chunk.partitions, headers)
        published = self._published
        if not published or published.isdisjoint(ids):
            return marked
        keep = [n for n, i in enumerate(ids) if i not in published]
        return _pick(marked, keep)

    async def _find_published(self, partitions: list[int]) -> set[str]:
        """The ids of rows earlier attempts of this task published (a scan from ``from``)."""
        prefix = self._identity.tag + "/"
        found: set[str] = set()
        for p in partitions:
            start = max(await self._fetch(self._identity.cursor("from"), p), 0)
            end = (await self._client.fetch_partition_metadata(self._stream, p)).high_watermark
            if end < start:
                continue
            async with self._client.subscribe(
                self._stream, p, start_offset=start, stop=StopPosition.LATEST
            ) as sub:
                while True:
                    try:
                        message = await sub.next(self._timeout)
                    except errors.StopPositionReached:
                        break
                    value = message.headers.get(HEADER, b"").decode(errors="replace")
                    if value.startswith(prefix):
                        found.add(value)
                    if message.offset >= end:
                        break
        log.info("%s: retry; %d rows were published before", self._identity.tag, len(found))
        return found


def _pick(rows: Columns, keep: Sequence[int]) -> Columns:
    """The rows at the indices ``keep``."""

    def of(column: list[T] | None) -> list[T] | None:
        return None if column is None else [column[n] for n in keep]

    streams = rows.streams
    return Columns(
        [rows.values[n] for n in keep],
        streams if isinstance(streams, str) else [streams[n] for n in keep],
        of(rows.keys),
        of(rows.partitions),
        of(rows.headers),
    )
