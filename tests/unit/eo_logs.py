"""Read-uncommitted logs for Sequencer tests, and a driver that sequences them.

A log is what a reader sees: entries of one or two partitions in read order, each with its
offset range and UUID. Producers, clocks and flags are drawn freely (small clocks, so
duplicates, rollbacks, ACKs below the last ACK and replays all happen), plus retried copies
of earlier entries and entries without a UUID. `run` feeds a log to the Python Sequencer
exactly as tests/interop/gazette/main.go feeds it to Gazette's, so both outputs compare.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from liftbridge_client.exactly_once.sequencer import Envelope, PartitionRef, Sequencer
from liftbridge_client.exactly_once.uuids import build_uuid

PARTITIONS = ("s/0", "s/1")
PRODUCERS = (bytes.fromhex("010203040506"), bytes.fromhex("0b0b0b0b0b0b"), bytes(6))

Entry = dict[str, Any]  # {"j": partition name, "b": begin, "e": end, "u": uuid hex}


@st.composite
def logs(
    draw: st.DrawFn,
    max_size: int = 40,
    zero_producer: bool = True,
    monotonic: bool = False,
    clock_base: int = 0,
) -> list[Entry]:
    """``zero_producer``: let a producer have the all-zero id, which real ones never have
    (the multicast bit is set) and which collides with messages without a UUID.
    ``monotonic``: each producer's new messages get rising clocks, as a publisher's do
    (only re-sent copies repeat one); else clocks are drawn freely.
    ``clock_base`` is added to every clock (real clocks are far above any prune horizon)."""
    producers = PRODUCERS if zero_producer else PRODUCERS[:2]
    last_clock = dict.fromkeys(producers, 0)
    count = draw(st.integers(0, max_size))
    partitions = draw(st.integers(1, len(PARTITIONS)))
    next_offset = dict.fromkeys(PARTITIONS[:partitions], 0)
    sent: list[tuple[str, str]] = []
    log: list[Entry] = []
    for _ in range(count):
        j = PARTITIONS[draw(st.integers(0, partitions - 1))]
        kind = draw(st.sampled_from(["new"] * 6 + ["retry", "zero"]))
        if kind == "retry" and sent:
            j, u = sent[draw(st.integers(0, len(sent) - 1))]  # a re-sent copy
        elif kind == "zero":
            u = bytes(16).hex()
        else:
            producer = producers[draw(st.integers(0, len(producers) - 1))]
            if monotonic:
                clock = last_clock[producer] + draw(st.integers(1, 3))
                last_clock[producer] = clock
            else:
                clock = draw(st.integers(1, 24))
            flags = draw(st.sampled_from([0, 0, 1, 1, 1, 2, 2, 3]))
            u = build_uuid(producer, clock_base + clock, flags).bytes.hex()
            sent.append((j, u))
        b = next_offset[j]
        next_offset[j] = b + 1
        log.append({"j": j, "b": b, "e": b + 1, "u": u})
    return log


def _ref(name: str) -> PartitionRef:
    stream, _, partition = name.rpartition("/")
    return PartitionRef(stream, int(partition))


def _env(entry: Entry) -> Envelope:
    return Envelope(_ref(entry["j"]), entry["b"], entry["e"], bytes.fromhex(entry["u"]))


def run(log: list[Entry], buffer: int, restart_at: int = -1, horizon_ns: int = 0) -> list[Any]:
    """The events of sequencing ``log``: per entry its outcome, the replay asked for and the
    committed (partition, offset) pairs; with ``restart_at``, a checkpoint there and a
    fresh Sequencer restored from it that reads on from the checkpoint's offsets."""
    events: list[Any] = []
    seq = Sequencer(buffer=buffer)

    def feed(entries: list[Entry]) -> None:
        for entry in entries:
            event: dict[str, Any] = {"outcome": seq.queue(_env(entry)).value, "dequeued": []}
            if event["outcome"] == "ackCommitReplay":
                ref, begin, end = seq.replay_range()
                event["replay"] = [str(ref), begin, end]
                seq.start_replay(
                    _env(e) for e in log if e["j"] == str(ref) and begin <= e["b"] < end
                )
            while (env := seq.step()) is not None:
                event["dequeued"].append([str(env.partition), env.begin])
            events.append(event)

    if restart_at < 0 or restart_at > len(log):
        feed(log)
        return events
    feed(log[:restart_at])
    checkpoint = seq.checkpoint(horizon_ns)
    events.append(
        {
            "outcome": "checkpoint",
            "dequeued": [],
            "checkpoint": {
                "offsets": {str(ref): o for ref, o in checkpoint.offsets.items()},
                "states": [
                    [str(s.partition), s.producer.hex(), s.last_ack, s.begin]
                    for s in checkpoint.states
                ],
            },
        }
    )
    seq = Sequencer(checkpoint, buffer=buffer)
    offsets = {str(ref): o for ref, o in checkpoint.offsets.items()}
    feed([e for e in log if e["b"] >= offsets.get(e["j"], 0)])
    return events
