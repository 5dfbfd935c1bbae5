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
    }
)
# Anomalies no server fault explains: the client or its exactly-once layer is wrong.
CLIENT_ANOMALIES = frozenset({"eo-duplicate", "subscriber-gap", "subscriber-rewind"})

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
        final = logs.get((e.stream, e.partition or 0))
        if final is not None and final.get(e.offset) != e.value:
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
    check_availability(events, verdict)
    return verdict


def unexpected(verdict: Verdict, *, strict: bool) -> list[Anomaly]:
    """The anomalies that fail a run: all of them when ``strict``, else those no known
    server defect explains (and kinds neither list names)."""
    if strict:
        return list(verdict.anomalies)
    return [a for a in verdict.anomalies if a.kind not in SERVER_ANOMALIES]
