"""Re-check a fault run from its history file, and explain what it found.

    PYTHONPATH=tests .venv/bin/python -m faults.fault_check .faults/<session>/<round>/history.jsonl
    PYTHONPATH=tests .venv/bin/python -m faults.fault_check --table .faults/<session>

Prints the verdict (the same the run computed: checkers are pure), then for each anomaly
the timeline around it: the faults in effect, the operations on the values concerned and
what each final read holds at their offsets. Exit status 1 when an anomaly was found.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from faults.fault_checkers import Anomaly, check
from faults.fault_history import Event, load
from faults.fault_suite import table


def explain(events: Sequence[Event], anomaly: Anomaly, limit: int = 12) -> list[str]:
    """The lines of history that concern one anomaly's values, with the faults."""
    wanted = set(anomaly.values[:limit])
    lines = [f"== {anomaly.kind} {anomaly.stream}/{anomaly.partition}: {anomaly.detail}"]
    for e in events:
        if e.type == "nemesis":
            lines.append(f"  {e.t:8.2f} nemesis {e.f} {e.value} {e.data.get('targets')}")
        elif e.type in ("invoke", "ok", "info", "fail", "sub") and e.value in wanted:
            where = f"{e.stream}/{e.partition}@{e.offset}" if e.offset is not None else ""
            lines.append(
                f"  {e.t:8.2f} {e.process} {e.type} {e.f} {e.value} {where} {e.error or ''}"
            )
        elif e.type == "read":
            held = [
                f"{int(o)}={v}"
                for p, o, v in e.data.get("entries", [])
                if v in wanted and (anomaly.partition is None or p == anomaly.partition)
            ]
            who = e.data.get("node", "")
            if held or (wanted and e.stream == anomaly.stream):
                lines.append(f"  {e.t:8.2f} read {e.f} {who} {e.stream}: {held or 'none of them'}")
        elif e.type == "note" and e.f in ("recovered", "not-recovered", "server-exits"):
            lines.append(f"  {e.t:8.2f} note {e.f} {e.error or ''} {e.data or ''}")
    return lines


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("history", type=Path, help="a history.jsonl, or with --table a session")
    parser.add_argument(
        "--table",
        action="store_true",
        help="re-check every round of a session directory "
        "(.faults/<session>) and print the results table",
    )
    parser.add_argument("--json", action="store_true", help="print the verdict as JSON only")
    args = parser.parse_args(argv)
    if args.table:
        summaries = []
        for path in sorted(args.history.glob("*/history.jsonl")):
            summary = json.loads((path.parent / "summary.json").read_text())
            summaries.append({**summary, "verdict": check(load(path)).to_dict()})
        print("\n".join(table(summaries)))
        return 0
    events = load(args.history)
    verdict = check(events)
    if args.json:
        print(json.dumps(verdict.to_dict(), indent=1))
        return 1 if verdict.anomalies else 0
    summary = {k: v for k, v in verdict.to_dict().items() if k != "anomalies"}
    print(json.dumps(summary, indent=1))
    for anomaly in verdict.anomalies:
        print("\n".join(explain(events, anomaly)))
    print(f"{len(verdict.anomalies)} anomalies")
    return 1 if verdict.anomalies else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
