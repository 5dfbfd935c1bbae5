"""Read-committed streaming reads: the producer states travel in the offsets.

A micro-batch's task needs the Sequencer's producer states (last acknowledged clocks, open
transactions) at its start offset, and Spark's read tasks cannot hand states back to the
driver. So the driver computes them: when it plans a micro-batch ``[begin, end)`` it reads
those offsets of every partition through a Sequencer restored from the states at
``begin`` and stores the states at ``end`` in the end offsets, under the key
`STATES_KEY` (the exactly-once layer's `Checkpoint` as JSON). The checkpoint therefore
holds them, a restart resumes with them, and every task restores its partition's states
from the start offsets it is given. The price: every message is read twice, once on the
driver (only to follow the producers) and once by the task.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from liftbridge_client import errors
from liftbridge_client.client import Client
from liftbridge_client.exactly_once.reader import envelope_of
from liftbridge_client.exactly_once.reader import read_range as read_offsets
from liftbridge_client.exactly_once.sequencer import (
    Checkpoint,
    PartitionRef,
    ProducerState,
    QueueOutcome,
    Sequencer,
)
from liftbridge_client.spark._offsets import OffsetMap, copy_offsets, offsets_from_checkpoint

__all__ = ["STATES_KEY", "advance", "refs_of", "split_offsets", "states_for", "with_states"]

log = logging.getLogger(__name__)

STATES_KEY = "__lbspark_read_committed__"
"""The offsets' entry that holds the producer states (not a stream: its value is a string)."""


def split_offsets(raw: object) -> tuple[OffsetMap, Checkpoint | None]:
    """The offset map and the producer states of offsets Spark hands back."""
    if isinstance(raw, Mapping) and STATES_KEY in raw:
        text = raw[STATES_KEY]
        if not isinstance(text, str):
            raise errors.InvalidInputError(f"offsets: {STATES_KEY} must be a JSON string")
        rest = {k: v for k, v in raw.items() if k != STATES_KEY}
        return offsets_from_checkpoint(rest), Checkpoint.from_json(text)
    return offsets_from_checkpoint(raw), None


def with_states(offsets: OffsetMap, checkpoint: Checkpoint) -> dict[str, Any]:
    out: dict[str, Any] = dict(copy_offsets(offsets))
    out[STATES_KEY] = checkpoint.to_json()
    return out


def states_for(
    checkpoint: Checkpoint | None, stream: str, partition: int
) -> tuple[ProducerState, ...]:
    if checkpoint is None:
        return ()
    ref = PartitionRef(stream, partition)
    return tuple(s for s in checkpoint.states if s.partition == ref)


def refs_of(offsets: OffsetMap) -> dict[PartitionRef, int]:
    return {
        PartitionRef(stream, int(pid)): offset
        for stream, partitions in offsets.items()
        for pid, offset in partitions.items()
    }


async def _follow(
    client: Client, sequencer: Sequencer, ref: PartitionRef, start: int, stop: int, timeout: float
) -> None:
    """Feed ``[start, stop)`` of one partition to ``sequencer`` (streamed, not held)."""
    async with client.subscribe(
        ref.stream, ref.partition, start_offset=start, stop_offset=stop - 1
    ) as sub:
        messages = aiter(sub)
        while True:
            try:
                async with asyncio.timeout(timeout):
                    message = await anext(messages)
            except StopAsyncIteration:
                return
            except TimeoutError:
                # Removed by retention meanwhile: the task applies failOnDataLoss.
                log.warning("%s: offsets up to %d not readable; states follow what was", ref, stop)
                return
            if message.offset >= stop:
                return  # retention moved the start: the server may send past the stop
            if sequencer.queue(envelope_of(message)) is QueueOutcome.ACK_COMMIT_REPLAY:
                replay_ref, first, last = sequencer.replay_range()
                async with asyncio.timeout(timeout):
                    replayed = await read_offsets(
                        client, replay_ref.stream, replay_ref.partition, first, last
                    )
                sequencer.start_replay(envelope_of(m) for m in replayed)
            while sequencer.step() is not None:
                pass  # only the states matter here; the task yields the rows


async def advance(
    client: Client,
    begin: OffsetMap,
    end: OffsetMap,
    checkpoint: Checkpoint | None,
    timeout: float,
) -> Checkpoint:
    """The producer states at ``end``, from those at ``begin`` (``checkpoint``)."""
    starts = refs_of(begin)
    stops = refs_of(end)
    starts = {ref: starts.get(ref, stop) for ref, stop in stops.items()}
    known = checkpoint.states if checkpoint is not None else ()
    sequencer = Sequencer(Checkpoint(starts, tuple(s for s in known if s.partition in stops)))
    for ref, start in starts.items():
        stop = stops[ref]
        if start < stop:
            await _follow(client, sequencer, ref, start, stop, timeout)
    return Checkpoint(stops, sequencer.checkpoint().states)
