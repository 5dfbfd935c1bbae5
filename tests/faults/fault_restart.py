"""The crash-all kind's own check: what was acked before the whole cluster died is
readable again soon after it restarts, with nothing published in between.

The round's plain and exactly-once publishers go on through the crash, and each new
message makes its partition's leader commit everything before it, which would hide the
defect this kind is for. So it writes to streams of its own that get nothing after the
restart ("still" streams): one replicated 3 ways (its leader's high watermark also moves
when the followers fetch) and one with a replication factor of 1 (the leader alone in its
ISR: the partitions a v1.9.0 node serves as empty after a crash; docs/compatibility.md,
"A restarted node hides what it acked"). Before each crash every partition of both gets
``BATCH`` acked publishes (``f`` = ``publish_still``); after the restart each partition is
read from offset 0 until it gives back every value acked before the crash, or until
``READ_BOUND`` seconds have passed since the restart (one ``read`` event per partition,
``f`` = ``restart``). fault_checkers.check_restart turns what is missing into
``acked-hidden``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses

from faults.fault_history import Recorder, error_name
from liftbridge_client import AckPolicy, Client, StreamConfig, errors

BATCH = 20  # acked publishes per partition before each crash
# Seconds from the restart for every acked value to be readable again: 1.4-1.9 s here
# (2 cores at load 3: the nodes start, elect a metadata leader, recover their partitions),
# so the margin is for loaded CI machines. A v1.9.0 partition led by a node alone in its
# ISR stays hidden whatever the bound.
READ_BOUND = 15.0
PUBLISH = "publish_still"
PROCESS = "still"


@dataclasses.dataclass(frozen=True)
class StillStreams:
    """The streams nothing publishes to after a crash."""

    replicated: str  # replication factor 3, min ISR 2
    solo: str  # replication factor 1
    partitions: int = 3

    @classmethod
    def named(cls, token: str) -> StillStreams:
        """The pair for a round (``token`` keeps names unique per round)."""
        return cls(f"still-{token}", f"solo-{token}")

    def all(self) -> list[tuple[str, int]]:
        """Every (stream, partition)."""
        return [(s, p) for s in (self.replicated, self.solo) for p in range(self.partitions)]


async def create_still(client: Client, still: StillStreams) -> None:
    """Create both streams."""
    for name, replication, min_isr in ((still.replicated, 3, 2), (still.solo, 1, 1)):
        config = StreamConfig(
            partitions=still.partitions, replication_factor=replication, min_isr=min_isr
        )
        await client.create_stream(f"faults.{name}", name, config)


async def publish_still(client: Client, history: Recorder, still: StillStreams, cycle: int) -> None:
    """``BATCH`` publishes (ack ALL, the client's retries) to every still partition at once,
    recorded like the plain ones: ``invoke``, then ``ok`` or ``info``."""

    async def one(stream: str, partition: int, value: str) -> None:
        fields = {"process": PROCESS, "f": PUBLISH, "stream": stream, "partition": partition}
        history.emit("invoke", value=value, **fields)
        try:
            ack = await client.publish(
                stream, value.encode(), partition=partition, ack_policy=AckPolicy.ALL
            )
        except errors.LiftbridgeError as exc:
            history.emit("info", value=value, error=error_name(exc), **fields)
        else:
            history.emit("ok", value=value, offset=ack.offset, **fields)

    tag = {still.replicated: "r", still.solo: "o"}
    await asyncio.gather(
        *(
            one(stream, partition, f"s{cycle}{tag[stream]}{partition}-{n:03d}")
            for stream, partition in still.all()
            for n in range(BATCH)
        )
    )


def acked_values(history: Recorder, stream: str, partition: int) -> set[str]:
    """The still values of one partition acked so far."""
    return {
        e.value
        for e in history.events
        if e.type == "ok"
        and e.f == PUBLISH
        and e.stream == stream
        and e.partition == partition
        and e.value is not None
    }


async def read_back(
    client: Client, history: Recorder, still: StillStreams, cycle: int, restarted: float
) -> None:
    """Read every still partition until it gives back all it acked, within ``READ_BOUND``
    seconds of ``restarted`` (history time); record one ``read`` event per partition."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + READ_BOUND - (history.now() - restarted)
    await asyncio.gather(
        *(
            _read_partition(client, history, stream, partition, cycle, restarted, deadline)
            for stream, partition in still.all()
        )
    )


async def _read_partition(
    client: Client,
    history: Recorder,
    stream: str,
    partition: int,
    cycle: int,
    restarted: float,
    deadline: float,
) -> None:
    want = acked_values(history, stream, partition)
    got: dict[int, str] = {}

    def complete() -> bool:
        return want <= set(got.values())

    seconds: float | None = None
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout_at(deadline):
            while not complete():
                start = max(got) + 1 if got else 0
                try:
                    async with client.subscribe(stream, partition, start_offset=start) as sub:
                        async for message in sub:
                            got[message.offset] = message.value.decode(errors="replace")
                            if complete():
                                break
                except errors.LiftbridgeError:
                    pass  # not led yet, or a subscription cut short: subscribe again
                if not complete():
                    await asyncio.sleep(0.2)
            seconds = round(history.now() - restarted, 2)
    history.emit(
        "read",
        f="restart",
        stream=stream,
        partition=partition,
        data={
            "cycle": cycle,
            "complete": seconds is not None,
            "seconds": seconds,
            "bound": READ_BOUND,
            "entries": [[partition, offset, value] for offset, value in sorted(got.items())],
        },
    )
