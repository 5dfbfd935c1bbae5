"""Client workloads of a fault run, each recording into a history (fault_history).

- plain publishers: distinct values, ack ALL on a min-ISR-2 stream, each value retried
  (same value) until acked or ``attempts`` run out; half over NATS, half over gRPC;
- exactly-once publishers: ``publish_committed``, the publisher's own retries (same UUID);
  a publish that still fails is recorded ``info`` and never re-sent under a new UUID;
- live subscribers, one per partition of the plain stream, from offset 0, across
  failovers (the client resubscribes by itself; one that ends is resumed at the next
  offset, and says so in the history), and a live read_committed reader of the
  exactly-once stream (resumed from its checkpoint when cut short);
- the final reads once everything is healed: each partition's log from its leader, from
  every replica (ISR-replica reads pinned to one node), and read_committed.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import itertools
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from faults.fault_history import Recorder, error_name
from liftbridge_client import (
    AckPolicy,
    Client,
    ClientOptions,
    RetryPolicy,
    Transport,
    errors,
)
from liftbridge_client.exactly_once import Checkpoint, CommittedReader, ExactlyOncePublisher
from liftbridge_client.models import Message

OPTIONS = ClientOptions(
    ack_wait=4.0,
    rpc_timeout=3.0,
    max_inflight=256,
    retry=RetryPolicy(attempts=8, initial_backoff=0.1, max_backoff=1.0),
    resubscribe_wait=60.0,
)
EO_RETRY = RetryPolicy(attempts=20, initial_backoff=0.1, max_backoff=1.0)


@dataclasses.dataclass(frozen=True)
class Streams:
    """The streams of a run: a plain one and an exactly-once one."""

    plain: str
    plain_partitions: int
    eo: str
    eo_partitions: int

    def all(self) -> list[tuple[str, int]]:
        """Every (stream, partition)."""
        return [(self.plain, p) for p in range(self.plain_partitions)] + [
            (self.eo, p) for p in range(self.eo_partitions)
        ]


async def plain_publisher(
    client: Client,
    history: Recorder,
    streams: Streams,
    index: int,
    transport: Transport | None,
    stop: asyncio.Event,
    *,
    pace: float,
    attempts: int = 30,
    process: str | None = None,
) -> None:
    """Publish ``w<index>-<n>`` values round-robin over the partitions until ``stop``
    (``transport`` None: the client's default)."""
    if process is None:
        assert transport is not None
        process = f"plain-{index}-{transport.name.lower()}"
    for n in itertools.count():
        if stop.is_set():
            return
        value = f"w{index}-{n:06d}"
        partition = n % streams.plain_partitions
        for _attempt in range(attempts):
            history.emit(
                "invoke",
                process=process,
                f="publish",
                stream=streams.plain,
                partition=partition,
                value=value,
            )
            try:
                ack = await client.publish(
                    streams.plain,
                    value.encode(),
                    partition=partition,
                    ack_policy=AckPolicy.ALL,
                    transport=transport,
                )
            except errors.LiftbridgeError as exc:
                # Unknown outcome: stored or not, the same value is sent again.
                history.emit(
                    "info",
                    process=process,
                    f="publish",
                    stream=streams.plain,
                    partition=partition,
                    value=value,
                    error=error_name(exc),
                )
                await asyncio.sleep(0.2)
                continue
            history.emit(
                "ok",
                process=process,
                f="publish",
                stream=streams.plain,
                partition=partition,
                offset=ack.offset,
                value=value,
            )
            break
        await asyncio.sleep(pace)


async def eo_publisher(
    client: Client,
    history: Recorder,
    streams: Streams,
    index: int,
    stop: asyncio.Event,
    *,
    pace: float,
) -> None:
    """One ExactlyOncePublisher writing ``e<index>-<n>`` values over the partitions."""
    process = f"eo-{index}"
    publisher = ExactlyOncePublisher(client, retry=EO_RETRY)
    for n in itertools.count():
        if stop.is_set():
            break
        value = f"e{index}-{n:06d}"
        partition = n % streams.eo_partitions
        history.emit(
            "invoke",
            process=process,
            f="publish_eo",
            stream=streams.eo,
            partition=partition,
            value=value,
        )
        try:
            ack = await publisher.publish_committed(streams.eo, value.encode(), partition=partition)
        except errors.LiftbridgeError as exc:
            # Its own retries are spent. Re-sending would take a new UUID and could commit
            # a duplicate, so the value stays unknown.
            history.emit(
                "info",
                process=process,
                f="publish_eo",
                stream=streams.eo,
                partition=partition,
                value=value,
                error=error_name(exc),
            )
        else:
            history.emit(
                "ok",
                process=process,
                f="publish_eo",
                stream=streams.eo,
                partition=partition,
                offset=ack.offset,
                value=value,
            )
        await asyncio.sleep(pace)
    history.emit("note", process=process, f="eo-retries", data={"retries": publisher.retries})


async def subscriber(
    client: Client, history: Recorder, stream: str, partition: int, stop: asyncio.Event
) -> None:
    """Follow one partition from offset 0 until ``stop``, recording every message."""
    process = f"sub-{stream[-6:]}-{partition}"
    history.emit(
        "note",
        process=process,
        f="subscribe",
        stream=stream,
        partition=partition,
        data={"start": 0},
    )
    next_offset = 0
    while not stop.is_set():
        try:
            async with client.subscribe(stream, partition, start_offset=next_offset) as sub:
                async for message in sub:
                    history.emit(
                        "sub",
                        process=process,
                        stream=stream,
                        partition=partition,
                        offset=message.offset,
                        value=_text(message),
                    )
                    next_offset = message.offset + 1
        except errors.LiftbridgeError as exc:
            # The client's own resubscribing gave up: resume where it stood.
            history.emit(
                "info",
                process=process,
                f="subscribe",
                stream=stream,
                partition=partition,
                offset=next_offset,
                error=error_name(exc),
            )
            await asyncio.sleep(0.5)
            history.emit(
                "note",
                process=process,
                f="resubscribe",
                stream=stream,
                partition=partition,
                offset=next_offset,
            )


async def committed_follower(
    client: Client, history: Recorder, streams: Streams, stop: asyncio.Event
) -> None:
    """A read_committed reader following the exactly-once stream until ``stop``; one cut
    short by a failover resumes from its last checkpoint (what it already yielded must
    not come again)."""
    process = "committed-live"
    parts = [(streams.eo, p) for p in range(streams.eo_partitions)]
    checkpoint: Checkpoint | None = None
    while not stop.is_set():
        try:
            async with CommittedReader(client, parts, checkpoint=checkpoint) as reader:
                async for message in reader:
                    history.emit(
                        "sub",
                        process=process,
                        f="committed",
                        stream=message.stream,
                        partition=message.partition,
                        offset=message.offset,
                        value=_text(message),
                    )
                    checkpoint = reader.checkpoint()
        except errors.LiftbridgeError as exc:
            history.emit(
                "info",
                process=process,
                f="read_committed",
                stream=streams.eo,
                error=error_name(exc),
            )
            await asyncio.sleep(0.5)
            history.emit("note", process=process, f="resume", stream=streams.eo)


def _text(message: Message) -> str:
    return message.value.decode(errors="replace")


def within(timeout: float, end_by: float) -> float:
    """``timeout``, or less so as to end by ``end_by`` (monotonic); a second at least."""
    return max(min(timeout, end_by - time.monotonic()), 1.0)


async def retried(what: str, action: Callable[[], Awaitable[Any]], timeout: float) -> Any:
    """Run ``action`` until it succeeds, retrying retriable errors, within ``timeout``."""
    async with asyncio.timeout(timeout):
        while True:
            try:
                return await action()
            except errors.LiftbridgeError as exc:
                if not exc.retriable and not isinstance(
                    exc, errors.NotFoundError | errors.InternalServerError
                ):
                    raise
                await asyncio.sleep(0.3)


async def committed_offsets(client: Client, streams: Streams) -> dict[tuple[str, int], int]:
    """Each partition's newest offset as its leader reports it (-1: empty)."""
    out = {}
    for stream, partition in streams.all():
        info = await retried(
            "metadata", functools.partial(client.fetch_partition_metadata, stream, partition), 30
        )
        out[(stream, partition)] = int(info.high_watermark)
    return out


async def read_partition(
    client: Client, stream: str, partition: int, last: int, *, isr_replica: bool, timeout: float
) -> tuple[list[Message], bool]:
    """Offsets 0..``last`` of a partition; (messages, complete). A read cut short by a
    late failover starts again after what it got."""
    got: list[Message] = []
    if last < 0:
        return got, True
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout):
            while len(got) == 0 or got[-1].offset < last:
                start = got[-1].offset + 1 if got else 0
                try:
                    async with client.subscribe(
                        stream,
                        partition,
                        start_offset=start,
                        stop_offset=last,
                        read_isr_replica=isr_replica,
                    ) as sub:
                        got.extend([message async for message in sub])
                except errors.LiftbridgeError as exc:
                    if isinstance(exc, errors.StopPositionReached):
                        break
                    await asyncio.sleep(0.3)
    return got, bool(got) and got[-1].offset >= last


async def final_reads(
    client: Client,
    history: Recorder,
    streams: Streams,
    replica_addresses: dict[str, str],
    nats_url: str,
) -> None:
    """Read every partition from its leader and from each replica; read_committed."""
    lasts = await committed_offsets(client, streams)
    history.emit("note", f="final-offsets", data={f"{s}/{p}": o for (s, p), o in lasts.items()})
    for (stream, partition), last in lasts.items():
        got, complete = await read_partition(
            client, stream, partition, last, isr_replica=False, timeout=60
        )
        history.emit(
            "read",
            f="leader",
            stream=stream,
            data={"complete": complete, "entries": [[partition, m.offset, _text(m)] for m in got]},
        )
    for node, address in replica_addresses.items():
        # Every broker address maps to this node: an ISR-replica read can only go there.
        pinned = dataclasses.replace(
            OPTIONS, address_overrides=dict.fromkeys(replica_addresses.values(), address)
        )
        async with Client([address], options=pinned) as one:
            for (stream, partition), last in lasts.items():
                got, complete = await read_partition(
                    one, stream, partition, last, isr_replica=True, timeout=20
                )
                history.emit(
                    "read",
                    f="replica",
                    stream=stream,
                    data={
                        "node": node,
                        "complete": complete,
                        "entries": [[partition, m.offset, _text(m)] for m in got],
                    },
                )
    parts = [(streams.eo, p) for p in range(streams.eo_partitions)]

    async def read_committed() -> list[Message]:
        async with CommittedReader(client, parts, stop_at_latest=True) as reader:
            return [m async for m in reader]

    committed: list[Message] = await retried("read_committed", read_committed, 120)
    history.emit(
        "read",
        f="committed",
        stream=streams.eo,
        data={"entries": [[m.partition, m.offset, _text(m)] for m in committed]},
    )


async def run_workers(
    publishers: Sequence[Awaitable[None]],
    followers: Sequence[Awaitable[None]],
    stop: asyncio.Event,
    grace: float,
) -> int:
    """Once ``stop`` is set, give the publishers ``grace`` seconds to finish their current
    publish, then end the followers (subscribers never end by themselves). Returns how
    many publishers had to be cancelled."""
    pubs = [asyncio.ensure_future(w) for w in publishers]
    subs = [asyncio.ensure_future(w) for w in followers]
    await stop.wait()
    _done, pending = await asyncio.wait(pubs, timeout=grace)
    for task in pending:
        task.cancel()
    await asyncio.sleep(1.0)  # let the subscribers take in the last publishes
    for task in subs:
        task.cancel()
    # A worker still running 30 s after its cancellation is stuck in the client: say where
    # (its stack in the runner's output), rather than let the round run into its bound.
    _done, stuck = await asyncio.wait([*pubs, *subs], timeout=30)
    if stuck:
        for task in stuck:
            task.print_stack(file=sys.stderr)
        raise RuntimeError(f"{len(stuck)} workers did not end within 30 s of their cancellation")
    await asyncio.gather(*pubs, *subs, return_exceptions=True)
    return len(pending)
