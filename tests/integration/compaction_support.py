"""A compacted stream with gaps in its offsets (reads must neither take them as loss nor wait
for the offsets inside them)."""

from __future__ import annotations

import asyncio
import itertools

from liftbridge_client import Client, StopPosition, StreamConfig

COMPACTED = StreamConfig(compact_enabled=True, segment_max_bytes=1024, cleaner_interval=0.5)
MESSAGES = 400


async def compacted_stream(client: Client, subject: str, name: str) -> list[int]:
    """Create ``name`` (one partition), publish to it, and wait until compaction left gaps:
    the offsets still there, ascending. Offsets 0 and 200 are their keys' only messages (so
    they stay); the others share three keys (so only the last of each is sure to stay)."""
    await client.create_stream(subject, name, COMPACTED)
    sent = []
    for i in range(MESSAGES):
        key = b"u%d" % i if i in (0, 200) else b"k%d" % (i % 3)
        sent.append(await client.send(name, b"c%d." % i + b"." * 60, key=key))
    await asyncio.gather(*sent)
    async with asyncio.timeout(60):
        while True:
            offsets = await retained(client, name)
            low, high = widest_gap(offsets)
            if offsets[0] == 0 and 200 in offsets and high - low > 10:
                return offsets
            await asyncio.sleep(0.5)


async def retained(client: Client, name: str) -> list[int]:
    """The offsets a read from 0 to the newest message gives."""
    async with client.subscribe(name, start_offset=0, stop=StopPosition.LATEST) as sub:
        return [m.offset async for m in sub]


def widest_gap(offsets: list[int]) -> tuple[int, int]:
    """The two neighbouring offsets furthest apart (the gap is between them)."""
    return max(itertools.pairwise(offsets), key=lambda pair: pair[1] - pair[0])
