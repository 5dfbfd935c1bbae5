"""Checkers: pure functions from a history (fault_history) to findings.

No IO and no clock: the same history always gives the same verdict, so a failed run is
re-checked and explained from its file alone (``python tests/faults/fault_check.py``).

What is checked, after the run healed and recovered:

- plain publishes (ack ALL): every acked value is in the final leader log (at least
  once); ``displaced`` counts acked values no longer at the offset their ack gave;
- exactly-once publishes: every acked value is read exactly once by read_committed;
- replicas: at each offset that two replicas (or a replica and the leader) both hold,
  they hold the same value;
- live subscribers: offsets without gaps or rewinds, and each message seen is still in
  the final log at its offset (else a committed read was lost); the live read_committed
  reader yields no value twice and nothing the final read_committed lacks;
- consumer groups: every acked plain value was handed to a member at least once (one
  never handed out but behind the group's committed cursor is lost; one beyond it was
  still pending when the run ended), no member's partition skipped an offset inside one
  tenure (between joins and rebalances); duplicates and time to recover are counted;
- majority/minority splits: the majority side acks writes on every partition while the
  split lasts (``majority-unavailable`` if not); acks the minority's node gave meanwhile
  are counted (they must survive like any other);
- a restart of the whole cluster (``crash-all``, fault_restart): every value acked to a
  still stream before the crash is read back from the restarted cluster within the
  bound, with nothing published to that stream in between (``acked-hidden`` if not);
- time to recover: from each heal to the next acked publish; client errors by type.
"""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from faults.fault_history import Event

# Anomalies the stock servers are known to produce (docs/testing.md, "Ping-pong failovers"):
# a follower truncated to its high watermark is elected, and acked entries go with it.
SERVER_ANOMALIES = frozenset(
    {
        "acked-lost",
        "acked-displaced",
        "eo-acked-lost",
        "divergent-replica",
        "read-lost",
        "not-recovered",
        "group-lost-truncated",
        # A node exited by itself (v1.9.0's "Read corrupted data" panic, docs/compatibility.md)
        # and the split's majority was left without one of its two nodes.
        "majority-unavailable-crashed",
        # A restarted v1.9.0 leader alone in its ISR keeps its checkpointed high watermark
        # until the next publish (docs/compatibility.md, "A restarted node hides what it
        # acked"): stored, yet unreadable.
        "acked-hidden",
    }
)
# Anomalies no server fault explains: the client or its exactly-once layer is wrong.
CLIENT_ANOMALIES = frozenset(
    {
        "eo-duplicate",
        "subscriber-gap",
        "subscriber-rewind",
        "group-lost",
        "group-gap",
        "group-undelivered",
    }
)
# Neither list: a majority that stops accepting writes fails its round either way.

Log = dict[int, str]  # offset -> value of one partition


@dataclass
class Anomaly:
    """One finding: its kind, where, and what was seen."""

    kind: str
    stream: str | None = None
    partition: int | None = None
    detail: str = ""
    values: list[str] = field(default_factory=list)


@dataclass
class Verdict:
    """Everything the checkers found in one history."""

    acked: int = 0
    acked_lost: int = 0
    displaced: int = 0
    duplicates: int = 0  # extra stored copies of plain values (retries; allowed)
    eo_acked: int = 0
    eo_lost: int = 0
    eo_duplicates: int = 0  # read_committed yielded a value twice (never allowed)
    divergent: int = 0  # offsets where two replicas disagree
    lagging_replicas: int = 0  # replica reads that ended short of the leader's log
    unchecked: int = 0  # acked values whose partition has no final read
    sub_messages: int = 0
    live_committed: int = 0  # messages the live read_committed reader yielded
    sub_gaps: int = 0
    read_lost: int = 0
    group_delivered: int = 0  # messages handed to consumer-group members
    group_duplicates: int = 0  # (partition, offset) handed out again (at-least-once)
    group_lost: int = 0  # acked, never handed out, yet behind the committed cursor
    group_pending: int = 0  # acked, never handed out, beyond the committed cursor
    group_gaps: int = 0
    group_recover_s: float | None = None  # worst heal -> every partition handed out again
    majority_s: float | None = None  # split -> every partition acked on the majority side
    minority_acked: int = 0  # acks the minority's node gave during a split (must survive)
    # split -> the NATS publisher on the minority's NATS server acked on every partition,
    # counted from the majority's first ack there (STRANDED_BOUND)
    stranded_s: float | None = None
    still_acked: int = 0  # values acked to the still streams of crash-all rounds
    hidden: int = 0  # of those, acked before a crash and not read back within the bound
    restart_read_s: float | None = None  # worst restart -> a still partition read back whole
    recover_s: float | None = None  # worst heal -> next acked publish
    unavailable_s: float = 0.0  # longest stretch a publisher went without an ack
    errors: dict[str, int] = field(default_factory=dict)
    anomalies: list[Anomaly] = field(default_factory=list)

    def kinds(self) -> set[str]:
        """The kinds of anomaly found."""
        return {a.kind for a in self.anomalies}

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready form."""
        return asdict(self)


def final_logs(events: Iterable[Event], f: str = "leader") -> dict[tuple[str, int], Log]:
    """The final reads of kind ``f`` (``leader``), by (stream, partition)."""
    logs: dict[tuple[str, int], Log] = {}
    for e in events:
        if e.type == "read" and e.f == f:
            for stream, partition, offset, value in _entries(e):
                logs.setdefault((stream, partition), {})[offset] = value
    return logs


def _entries(e: Event) -> list[tuple[str, int, int, str]]:
    stream = e.stream or ""
    return [(stream, int(p), int(o), str(v)) for p, o, v in e.data.get("entries", [])]


def check_plain(events: Sequence[Event], verdict: Verdict) -> None:
    """Acked plain publishes (``f`` = ``publish``) against the final leader logs."""
    logs = final_logs(events)
    acked: dict[str, tuple[str, int, int]] = {}
    for e in events:
        if e.type == "ok" and e.f == "publish" and e.value is not None:
            acked[e.value] = (e.stream or "", e.partition or 0, e.offset or 0)
    stored: Counter[str] = Counter()
    for log in logs.values():
        stored.update(log.values())
    verdict.acked += len(acked)
    verdict.duplicates += sum(n - 1 for n in stored.values() if n > 1)
    lost: dict[tuple[str, int], list[str]] = defaultdict(list)
    for value, (stream, partition, offset) in sorted(acked.items()):
        if (stream, partition) not in logs:
            verdict.unchecked += 1  # no final read of that partition (see not-recovered)
        elif value not in stored:
            lost[(stream, partition)].append(value)
        elif logs.get((stream, partition), {}).get(offset) != value:
            verdict.displaced += 1
            verdict.anomalies.append(
                Anomaly(
                    "acked-displaced",
                    stream,
                    partition,
                    f"acked at offset {offset}, which now holds "
                    f"{logs.get((stream, partition), {}).get(offset)!r}",
                    [value],
                )
            )
    for (stream, partition), values in sorted(lost.items()):
        verdict.acked_lost += len(values)
        verdict.anomalies.append(
            Anomaly("acked-lost", stream, partition, f"{len(values)} acked, not stored", values)
        )


def check_exactly_once(events: Sequence[Event], verdict: Verdict) -> None:
    """Acked exactly-once publishes (``publish_eo``) against the final read_committed."""
    acked = {e.value: e for e in events if e.type == "ok" and e.f == "publish_eo" and e.value}
    committed: Counter[str] = Counter()
    where: dict[str, tuple[str, int]] = {}
    for e in events:
        if e.type == "read" and e.f == "committed":
            for stream, partition, _offset, value in _entries(e):
                committed[value] += 1
                where[value] = (stream, partition)
    verdict.eo_acked += len(acked)
    if not any(e.type == "read" and e.f == "committed" for e in events):
        verdict.unchecked += len(acked)  # the final read failed (see not-recovered)
        return
    lost = sorted(v for v in acked if v not in committed)
    if lost:
        verdict.eo_lost += len(lost)
        e = acked[lost[0]]
        verdict.anomalies.append(
            Anomaly("eo-acked-lost", e.stream, None, f"{len(lost)} acked, not committed", lost)
        )
    duplicated = sorted(v for v, n in committed.items() if n > 1)
    if duplicated:
        verdict.eo_duplicates += sum(committed[v] - 1 for v in duplicated)
        stream, partition = where[duplicated[0]]
        verdict.anomalies.append(
            Anomaly(
                "eo-duplicate",
                stream,
                partition,
                f"{len(duplicated)} values read more than once",
                duplicated,
            )
        )


def check_replicas(events: Sequence[Event], verdict: Verdict) -> None:
    """Every replica's log against the others and the leader's, offset by offset."""
    leader = final_logs(events)
    replicas: dict[tuple[str, int], dict[str, Log]] = defaultdict(dict)
    for e in events:
        if e.type == "read" and e.f == "replica":
            node = str(e.data.get("node", "?"))
            for stream, partition, offset, value in _entries(e):
                replicas[(stream, partition)].setdefault(node, {})[offset] = value
            if not e.data.get("complete", True):
                verdict.lagging_replicas += 1
    for key in sorted(set(replicas) | set(leader)):
        views = dict(replicas.get(key, {}))
        if key in leader:
            views["leader"] = leader[key]
        offsets = sorted({o for log in views.values() for o in log})
        bad = []
        for offset in offsets:
            seen = {node: log[offset] for node, log in views.items() if offset in log}
            if len(set(seen.values())) > 1:
                bad.append(f"{offset}: " + ", ".join(f"{n}={v}" for n, v in sorted(seen.items())))
        if bad:
            verdict.divergent += len(bad)
            verdict.anomalies.append(
                Anomaly(
                    "divergent-replica",
                    key[0],
                    key[1],
                    f"{len(bad)} offsets differ; first: {bad[0]}",
                    bad[:20],
                )
            )


def check_subscribers(events: Sequence[Event], verdict: Verdict) -> None:
    """Live subscribers: contiguous offsets from where they started, and what they saw is
    still in the final log (``data.start`` on a ``note`` / ``f`` = ``subscribe`` event
    gives the first offset expected; default 0)."""
    logs = final_logs(events)
    last: dict[tuple[str, str, int], int] = {}
    for e in events:
        if e.type == "note" and e.f == "subscribe" and e.stream is not None:
            last[(e.process, e.stream, e.partition or 0)] = int(e.data.get("start", 0)) - 1
        if e.type != "sub" or e.offset is None or e.stream is None or e.f == "committed":
            continue
        final = logs.get((e.stream, e.partition or 0))
        if e.f == "group":
            # Members resume at the group's cursor (check_group judges their offsets);
            # what they were handed must still be in the log all the same.
            _check_read(e, final, verdict)
            continue
        verdict.sub_messages += 1
        key = (e.process, e.stream, e.partition or 0)
        previous = last.get(key, -1)
        if e.offset > previous + 1:
            verdict.sub_gaps += 1
            verdict.anomalies.append(
                Anomaly(
                    "subscriber-gap",
                    e.stream,
                    e.partition,
                    f"{e.process}: offset {previous} then {e.offset} at t={e.t:.2f}",
                )
            )
        elif e.offset <= previous:
            verdict.anomalies.append(
                Anomaly(
                    "subscriber-rewind",
                    e.stream,
                    e.partition,
                    f"{e.process}: offset {previous} then {e.offset} at t={e.t:.2f}",
                )
            )
        last[key] = max(previous, e.offset)
        _check_read(e, final, verdict)


def _check_read(e: Event, final: Log | None, verdict: Verdict) -> None:
    """A message read live is still in the final log at its offset."""
    if final is not None and e.offset is not None and final.get(e.offset) != e.value:
        verdict.read_lost += 1
        verdict.anomalies.append(
            Anomaly(
                "read-lost",
                e.stream,
                e.partition,
                f"{e.process} read {e.value!r} at offset {e.offset} (t={e.t:.2f}); "
                f"the final log has {final.get(e.offset)!r}",
                [e.value or ""],
            )
        )


def check_committed_follower(events: Sequence[Event], verdict: Verdict) -> None:
    """The live read_committed reader (``sub`` events with ``f`` = ``committed``): no value
    twice, even across resumes from its checkpoint, and every value it yielded is in the
    final read_committed (which is read after healing)."""
    final = {
        v
        for e in events
        if e.type == "read" and e.f == "committed"
        for _s, _p, _o, v in _entries(e)
    }
    have_final = any(e.type == "read" and e.f == "committed" for e in events)
    seen: Counter[str] = Counter()
    for e in events:
        if e.type == "sub" and e.f == "committed" and e.value is not None:
            seen[e.value] += 1
            verdict.live_committed += 1
            if have_final and e.value not in final:
                verdict.read_lost += 1
                verdict.anomalies.append(
                    Anomaly(
                        "read-lost",
                        e.stream,
                        e.partition,
                        f"read_committed yielded {e.value!r} live (t={e.t:.2f}); the final "
                        "read_committed has not",
                        [e.value],
                    )
                )
    twice = sorted(v for v, n in seen.items() if n > 1)
    if twice:
        verdict.eo_duplicates += sum(seen[v] - 1 for v in twice)
        verdict.anomalies.append(
            Anomaly(
                "eo-duplicate",
                None,
                None,
                f"the live read_committed yielded {len(twice)} values twice",
                twice,
            )
        )


def _group_tenures(events: Sequence[Event], verdict: Verdict) -> None:
    """Gaps inside a member's tenure: offsets of a partition must follow each other until
    the member joins again or its assignment changes (a rebalance may resume a partition
    at its committed cursor, behind or ahead of what this member last saw)."""
    last: dict[tuple[str, str, int], int] = {}
    for e in events:
        if e.type == "note" and e.f in ("group-join", "group-assign"):
            last = {k: v for k, v in last.items() if k[0] != e.process}
        elif e.type == "sub" and e.f == "group" and e.offset is not None:
            key = (e.process, e.stream or "", e.partition or 0)
            previous = last.get(key)
            if previous is not None and e.offset > previous + 1:
                verdict.group_gaps += 1
                verdict.anomalies.append(
                    Anomaly(
                        "group-gap",
                        e.stream,
                        e.partition,
                        f"{e.process}: offset {previous} then {e.offset} at t={e.t:.2f}, "
                        "no rebalance between",
                    )
                )
            last[key] = e.offset


def check_group(events: Sequence[Event], verdict: Verdict) -> None:
    """The consumer-group members (``sub`` events with ``f`` = ``group``) against the
    acked plain publishes and the final leader logs (``fault_groups`` writes the rest)."""
    handed = [e for e in events if e.type == "sub" and e.f == "group" and e.offset is not None]
    joined = any(e.type == "note" and e.f == "group-join" for e in events)
    if not handed and not joined:
        return  # a history without the workload
    verdict.group_delivered += len(handed)
    copies = Counter((e.stream, e.partition or 0, e.offset) for e in handed)
    verdict.group_duplicates += sum(n - 1 for n in copies.values())
    _group_tenures(events, verdict)
    stream = next((e.stream for e in events if e.f == "group-join"), None) or (
        handed[0].stream if handed else None
    )
    committed: dict[int, int] | None = None
    for e in events:
        if e.type == "note" and e.f == "group-committed":
            committed = {int(p): int(o) for p, o in e.data.get("committed", {}).items()}
    seen = {e.value for e in handed}
    logs = final_logs(events)
    lost: dict[int, list[str]] = defaultdict(list)
    pending: dict[int, list[str]] = defaultdict(list)
    for e in events:
        if not (e.type == "ok" and e.f == "publish" and e.stream == stream and e.value):
            continue
        partition = e.partition or 0
        log = logs.get((e.stream or "", partition))
        if log is None or e.value in seen:
            continue  # no final read (unchecked), or handed out
        offsets = [o for o, v in log.items() if v == e.value]
        if not offsets:
            continue  # not stored at all: acked-lost already says so
        cursor = -1 if committed is None else committed.get(partition, -1)
        (lost if min(offsets) <= cursor else pending)[partition].append(e.value)
    # A leader that lost entries can put new ones at offsets the cursor already passed:
    # skipped by the group, but the server's doing (its own anomaly says so).
    truncated = {
        a.partition
        for a in verdict.anomalies
        if a.stream == stream and a.kind in SERVER_ANOMALIES and a.kind != "not-recovered"
    }
    for partition, values in sorted(lost.items()):
        verdict.group_lost += len(values)
        detail = f"{len(values)} acked, behind the group's committed cursor, never handed out"
        if partition in truncated:
            verdict.anomalies.append(
                Anomaly("group-lost-truncated", stream, partition, detail, sorted(set(values)))
            )
        else:
            verdict.anomalies.append(
                Anomaly("group-lost", stream, partition, detail, sorted(set(values)))
            )
    for partition, values in sorted(pending.items()):
        verdict.group_pending += len(values)
        detail = f"{len(values)} acked, not handed out to the group by the end of the run"
        verdict.anomalies.append(
            Anomaly("group-undelivered", stream, partition, detail, sorted(set(values)))
        )
    heals = [e.t for e in events if e.type == "nemesis" and e.f == "stop"]
    partitions = sorted({e.partition or 0 for e in handed})
    worst: float | None = None
    for healed in heals:
        for partition in partitions:
            after = [e.t for e in handed if e.t >= healed and (e.partition or 0) == partition]
            delta = (after[0] - healed) if after else float("inf")
            worst = delta if worst is None else max(worst, delta)
    verdict.group_recover_s = None if worst is None else round(worst, 2)


PROBE = "minority-probe"  # the process publishing to the minority side of a split
# A NATS publisher connected to one node's NATS server only (routed kinds): ``VIA`` + id.
VIA = "nats-via-"
# How long after the majority's first ack a NATS publisher stranded on the minority's NATS
# server may take to get acks again: the fault suite's ack_wait (4 s), then the metadata
# check and the detour over gRPC (ClientOptions.nats_detour), within a few seconds.
STRANDED_BOUND = 4.0 + 5.0


def acked_since(
    events: Sequence[Event], stream: str, since: float, process: str | None = None
) -> dict[int, float]:
    """Per partition of ``stream``, when the first publish invoked at or after ``since``
    was acked (the minority probe's left out: this is what the majority accepted), by any
    process or by ``process`` only."""
    invoked: dict[str, float] = {}
    first: dict[int, float] = {}
    for e in events:
        if e.f != "publish" or e.stream != stream or e.process == PROBE:
            continue
        if process is not None and e.process != process:
            continue
        if e.type == "invoke":
            invoked[e.process] = e.t  # a publisher has one publish in flight
        elif e.type == "ok" and invoked.get(e.process, -1.0) >= since:
            first.setdefault(e.partition or 0, e.t)
    return first


def check_splits(events: Sequence[Event], verdict: Verdict) -> None:
    """Each majority/minority split: the majority accepted acked writes on every partition
    while it lasted; count what the minority's node acked (the plain checker says whether
    those acks survived)."""
    stream = next((e.data["streams"][0] for e in events if e.f == "setup" and e.data), None)
    partitions = {e.partition or 0 for e in events if e.f == "publish" and e.stream == stream}
    starts = [
        e for e in events if e.type == "nemesis" and e.f == "start" and e.value == "split-leader"
    ]
    crashed: dict[str, object] | None = None
    for e in events:
        if e.type == "note" and e.f == "server-exits" and e.data:
            crashed = dict(e.data)
    for start in starts:
        stop = next(
            (e.t for e in events if e.type == "nemesis" and e.f == "stop" and e.t >= start.t),
            float("inf"),
        )
        window = [e for e in events if start.t <= e.t <= stop]
        acked = acked_since(window, stream or "", start.t)
        if missing := sorted(partitions - set(acked)):
            crashed = crashed or {}
            verdict.anomalies.append(
                Anomaly(
                    "majority-unavailable-crashed" if crashed else "majority-unavailable",
                    stream,
                    missing[0],
                    f"split at t={start.t:.2f} of {start.data.get('targets')}: no acked publish "
                    f"of partitions {missing} on the majority side before the heal"
                    + (f" (servers that exited by themselves: {crashed})" if crashed else ""),
                )
            )
        if acked:
            worst = max(acked.values()) - start.t
            verdict.majority_s = round(max(verdict.majority_s or 0.0, worst), 2)
        _check_stranded(events, window, stream or "", start, acked, verdict)
        verdict.minority_acked += sum(
            1 for e in window if e.type == "ok" and e.process == PROBE and e.t > start.t
        )


def _check_stranded(
    events: Sequence[Event],
    window: Sequence[Event],
    stream: str,
    start: Event,
    acked: dict[int, float],
    verdict: Verdict,
) -> None:
    """The NATS publisher on the minority's NATS server (if the run had one): acked again
    on every partition the majority acked, within STRANDED_BOUND of the majority."""
    targets = (start.data or {}).get("targets") or []
    process = f"{VIA}{targets[0]}" if targets else ""
    if not any(e.process == process for e in events):
        return
    mine = acked_since(window, stream, start.t, process)
    late = {p: (mine[p] - t if p in mine else None) for p, t in acked.items()}
    worst = max((d for d in late.values() if d is not None), default=None)
    if worst is not None:
        verdict.stranded_s = round(max(verdict.stranded_s or 0.0, worst), 2)
    if stuck := sorted(p for p, d in late.items() if d is None or d > STRANDED_BOUND):
        verdict.anomalies.append(
            Anomaly(
                "nats-stranded",
                stream,
                stuck[0],
                f"split at t={start.t:.2f} of {targets}: {process} (NATS through the "
                f"minority's server) was not acked on partitions {stuck} within "
                f"{STRANDED_BOUND:.0f} s of the majority ({late})",
            )
        )


def check_restart(events: Sequence[Event], verdict: Verdict) -> None:
    """Each read of a still partition after a crash-all (``read`` / ``f`` = ``restart``)
    against the values acked to it (``ok`` / ``publish_still``) before that crash."""
    acked = [
        (e.t, e.stream, e.partition or 0, e.value)
        for e in events
        if e.type == "ok" and e.f == "publish_still" and e.value is not None
    ]
    verdict.still_acked += len(acked)
    crashes = [
        e.t for e in events if e.type == "nemesis" and e.f == "start" and e.value == "crash-all"
    ]
    worst: float | None = None
    for read in (e for e in events if e.type == "read" and e.f == "restart"):
        crash = max((t for t in crashes if t <= read.t), default=None)
        if crash is None:
            continue
        key = (read.stream, read.partition or 0)
        want = {v for t, s, p, v in acked if t < crash and (s, p) == key}
        missing = sorted(want - {v for _s, _p, _o, v in _entries(read)})
        if missing:
            verdict.hidden += len(missing)
            verdict.anomalies.append(
                Anomaly(
                    "acked-hidden",
                    read.stream,
                    read.partition,
                    f"{len(missing)} of {len(want)} values acked before the crash at "
                    f"t={crash:.2f} not readable {read.data.get('bound')} s after the restart",
                    missing,
                )
            )
        elif read.data.get("seconds") is not None:
            worst = max(worst or 0.0, float(read.data["seconds"]))
    if worst is not None:
        verdict.restart_read_s = round(max(verdict.restart_read_s or 0.0, worst), 2)


def check_availability(events: Sequence[Event], verdict: Verdict) -> None:
    """Time to recover after each heal, the longest outage, and client errors by type."""
    publishes = [e for e in events if e.type == "ok" and e.f in ("publish", "publish_eo")]
    heals = [e.t for e in events if e.type == "nemesis" and e.f == "stop"]
    processes = sorted({e.process for e in publishes})
    worst: float | None = None
    for healed in heals:
        # Every publisher must get through again: each one cycles over all partitions, so
        # one stuck on a partition without a leader shows here.
        for process in processes or [""]:
            after = [e.t for e in publishes if e.t >= healed and e.process == process]
            delta = (after[0] - healed) if after else float("inf")
            worst = delta if worst is None else max(worst, delta)
    verdict.recover_s = None if worst is None else round(worst, 2)
    # The worst stall one publisher saw (each cycles over every partition of its stream),
    # counted from its first attempt and up to its last one: a publisher that waited from
    # the start, or until the end, stalled too.
    stalls = [0.0]
    for process in processes:
        attempts = [e.t for e in events if e.type == "invoke" and e.process == process]
        times = [e.t for e in publishes if e.process == process]
        first, last = min(attempts, default=times[0]), max(attempts, default=times[-1])
        bounds = [min(first, times[0]), *times, max(last, times[-1])]
        stalls += [b - a for a, b in itertools.pairwise(bounds)]
    verdict.unavailable_s = round(max(stalls), 2)
    errors: Counter[str] = Counter()
    for e in events:
        if e.type in ("info", "fail") and e.error:
            errors[f"{e.f}:{e.error.split(':', 1)[0]}"] += 1
    verdict.errors = dict(sorted(errors.items()))
    for e in events:
        if e.type == "note" and e.f == "not-recovered":
            verdict.anomalies.append(Anomaly("not-recovered", e.stream, e.partition, e.error or ""))


def check(events: Sequence[Event]) -> Verdict:
    """Run every checker over a history."""
    verdict = Verdict()
    check_plain(events, verdict)
    check_exactly_once(events, verdict)
    check_replicas(events, verdict)
    check_subscribers(events, verdict)
    check_committed_follower(events, verdict)
    check_group(events, verdict)
    check_splits(events, verdict)
    check_restart(events, verdict)
    check_availability(events, verdict)
    return verdict


def unexpected(verdict: Verdict, *, strict: bool) -> list[Anomaly]:
    """The anomalies that fail a run: all of them when ``strict``, else those no known
    server defect explains (and kinds neither list names)."""
    if strict:
        return list(verdict.anomalies)
    return [a for a in verdict.anomalies if a.kind not in SERVER_ANOMALIES]
