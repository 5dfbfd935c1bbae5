"""Where partitions begin and end, asked of the servers (driver side).

Liftbridge reports a partition's high watermark (its last committed offset) but not its
first offset, which retention moves: the earliest offset is the first message a
subscription from EARLIEST returns. Offsets here are next-offsets (exclusive ends).
"""

from __future__ import annotations

import asyncio
import logging

from liftbridge_client import errors
from liftbridge_client.client import Client
from liftbridge_client.models import StopPosition
from liftbridge_client.spark._offsets import OffsetMap
from liftbridge_client.spark._options import (
    EARLIEST,
    LATEST,
    OffsetSpec,
    SourceOptions,
    TimestampSpec,
)

__all__ = [
    "EMPTY_PROBE",
    "Partitions",
    "check_named",
    "earliest_offsets",
    "first_offset",
    "latest_offsets",
    "list_partitions",
    "resolve",
]

log = logging.getLogger(__name__)

# Liftbridge (v1.9.0) cannot tell a partition's first offset, and a subscription to a
# partition whose every message was removed by retention waits for the next message, even
# with a stop offset behind it. A subscription that returns no first message within this
# many seconds, for offsets the server committed, finds them gone.
EMPTY_PROBE = 10.0

Partitions = dict[str, list[int]]


async def list_partitions(client: Client, options: SourceOptions) -> Partitions:
    """The selected streams and their partition ids; `NotFoundError` for a named stream
    that does not exist."""
    metadata = await client.fetch_metadata(*options.streams)
    found: Partitions = {}
    for name, info in metadata.streams.items():
        if options.matches(name):
            found[name] = sorted(info.partitions)
    missing = [name for name in options.streams if name not in found]
    if missing:
        raise errors.NotFoundError(f"option 'stream': no stream named {', '.join(missing)}")
    return found


def check_named(partitions: Partitions, options: SourceOptions) -> None:
    """Refuse offsets or timestamps given for a stream or partition the read does not
    cover (a typo in a stream name would otherwise read the whole stream from the default),
    as Spark's Kafka source does."""
    named = {
        "startingOffsets": options.starting.per_partition,
        "endingOffsets": options.ending.per_partition,
        "startingOffsetsByTimestamp": (
            options.starting_timestamp.per_partition if options.starting_timestamp else {}
        ),
        "endingOffsetsByTimestamp": (
            options.ending_timestamp.per_partition if options.ending_timestamp else {}
        ),
    }
    for option, per_partition in named.items():
        for stream, pids in per_partition.items():
            if stream not in partitions:
                raise errors.InvalidInputError(
                    f"option {option!r} names the stream {stream!r}, which this read does not "
                    f"cover (reading: {', '.join(sorted(partitions)) or 'no stream'})"
                )
            unknown = sorted(int(p) for p in pids if int(p) not in partitions[stream])
            if unknown:
                raise errors.InvalidInputError(
                    f"option {option!r} names partition(s) {unknown} of {stream!r}, which has "
                    f"partitions {partitions[stream]}"
                )


async def latest_offsets(client: Client, partitions: Partitions) -> OffsetMap:
    """The next offset to be written of each partition (high watermark + 1)."""
    keys = [(stream, pid) for stream, pids in partitions.items() for pid in pids]
    infos = await asyncio.gather(
        *(client.fetch_partition_metadata(stream, pid) for stream, pid in keys)
    )
    result: OffsetMap = {stream: {} for stream in partitions}
    for (stream, pid), info in zip(keys, infos, strict=True):
        result[stream][str(pid)] = info.high_watermark + 1
    return result


async def first_offset(
    client: Client, stream: str, pid: int, latest: int, timeout: float, **kw: object
) -> int:
    """Offset of the first message a subscription returns (``latest`` if none); with a
    stop offset, of the first message the server sent past it when none came before."""
    if latest <= 0:
        return latest
    if "stop_offset" not in kw:
        kw["stop"] = StopPosition.LATEST
    sub = client.subscribe(stream, pid, **kw)  # type: ignore[arg-type]
    try:
        async with sub:
            message = await sub.next(min(timeout, EMPTY_PROBE))
    except errors.StopPositionReached:
        past = sub._past_stop  # None: nothing at or after the position (stop < start)
        return latest if past is None else min(past, latest)
    except errors.LiftbridgeTimeoutError:
        # Every message was removed by retention: the subscription waits for the next one.
        log.info("%s/%d: no message retained; taking the latest offset %d", stream, pid, latest)
        return latest
    return min(message.offset, latest)


async def earliest_offsets(
    client: Client, partitions: Partitions, latest: OffsetMap, timeout: float
) -> OffsetMap:
    keys = [(stream, pid) for stream, pids in partitions.items() for pid in pids]
    # From offset 0 to stop offset 0, not from EARLIEST to LATEST: the server then sends one
    # message, where it streamed the whole partition up to LATEST at once (the driver parsed
    # all it received before the probe closed: 0.65 s of CPU for 20,000 messages). When
    # retention removed offset 0 the server starts at its first offset and sends on past
    # the stop offset: the first offset past it, which ends the read, is the earliest.
    firsts = await asyncio.gather(
        *(
            first_offset(client, s, p, latest[s][str(p)], timeout, start_offset=0, stop_offset=0)
            for s, p in keys
        )
    )
    result: OffsetMap = {stream: {} for stream in partitions}
    for (stream, pid), first in zip(keys, firsts, strict=True):
        result[stream][str(pid)] = first
    return result


async def resolve(
    client: Client,
    partitions: Partitions,
    spec: OffsetSpec,
    timestamps: TimestampSpec | None,
    options: SourceOptions,
    *,
    latest: OffsetMap | None = None,
) -> OffsetMap:
    """Concrete next-offsets for an offset spec (timestamps win where they are given)."""
    latest = latest if latest is not None else await latest_offsets(client, partitions)
    wanted_earliest = {
        stream: [p for p in pids if spec.for_partition(stream, p) == EARLIEST]
        for stream, pids in partitions.items()
    }
    earliest = await earliest_offsets(client, wanted_earliest, latest, options.poll_timeout)
    result: OffsetMap = {stream: {} for stream in partitions}
    lookups = []
    for stream, pids in partitions.items():
        for pid in pids:
            key = str(pid)
            ts_ms = timestamps.for_partition(stream, pid) if timestamps else None
            if ts_ms is not None:
                lookups.append((stream, key, ts_ms))
                continue
            value = spec.for_partition(stream, pid)
            if value == EARLIEST:
                result[stream][key] = earliest[stream][key]
            elif value == LATEST:
                result[stream][key] = latest[stream][key]
            else:
                result[stream][key] = value
    offsets = await asyncio.gather(
        *(
            first_offset(
                client,
                stream,
                int(key),
                latest[stream][key],
                options.poll_timeout,
                start_timestamp_ns=ts_ms * 1_000_000,
            )
            for stream, key, ts_ms in lookups
        )
    )
    for (stream, key, _), offset in zip(lookups, offsets, strict=True):
        result[stream][key] = offset
    return result
