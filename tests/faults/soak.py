"""A soak: publish and consume for a bounded time through faults; resources must stay flat.

    make soak                                   # 30 min, a sample every 30 s
    SOAK_MINUTES=5 SOAK_INTERVAL=10 make soak   # too short to judge: NOT JUDGED, exit 3
    PYTHONPATH=tests:. .venv/bin/python -m faults.soak --minutes 30 --interval 30

Runs faults.soak_runner in a private network and PID namespace (as the fault suite runs
its rounds: needs root, unshare, ip, iptables, tc), which runs the cluster, the nemesis
and the client under test (faults.soak_client, a process of its own). Then reads what
they wrote to ``.faults/soak-<stamp>/`` and prints the interval table, the trends
(faults.soak_stats) and the end checks, also written to ``report.md`` and
``summary.json`` there. Exit status 1 (FAIL) when a series grows beyond its threshold or
an end check fails (an acked message never consumed, a future pending after close, a task
left); 3 (NOT JUDGED) when the end checks passed but the run was too short to judge the
series (soak_stats.verdict); 0 (PASS) only for a judged run; 2 when its tools are missing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from faults.fault_suite import RESULTS_DIR, ROOT, missing_tools
from faults.soak_stats import (
    THRESHOLDS,
    client_trends,
    interval_table,
    merge_servers,
    server_trends,
    verdict,
)
from liftbridge_client.testing import liftbridge_binary, private_netns_argv


def parse_args(argv: list[str]) -> argparse.Namespace:
    env = os.environ
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--minutes", type=float, default=float(env.get("SOAK_MINUTES") or 30))
    parser.add_argument("--interval", type=float, default=float(env.get("SOAK_INTERVAL") or 30))
    parser.add_argument("--every", type=float, default=float(env.get("SOAK_FAULT_EVERY") or 75))
    parser.add_argument("--first", type=float, default=None)
    parser.add_argument("--fault-s", type=float, default=10.0)
    parser.add_argument("--kinds", default=env.get("SOAK_KINDS") or "")
    parser.add_argument("--rate", type=float, default=float(env.get("SOAK_RATE") or 200))
    parser.add_argument("--eo-rate", type=float, default=20.0)
    parser.add_argument("--no-group", action="store_true")
    parser.add_argument("--version", default=env.get("SOAK_VERSION") or "v1.9.0")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--seed", type=int, default=None)
    return parser.parse_args(argv)


def runner_argv(args: argparse.Namespace, out: Path) -> list[str]:
    """The runner's command line (inside the namespace)."""
    argv = [
        sys.executable,
        "-m",
        "faults.soak_runner",
        "--out",
        str(out),
        "--seconds",
        str(args.minutes * 60),
        "--interval",
        str(args.interval),
        "--every",
        str(args.every),
        "--fault-s",
        str(args.fault_s),
        "--rate",
        str(args.rate),
        "--eo-rate",
        str(args.eo_rate),
        "--version",
        args.version,
    ]
    if args.first is not None:
        argv += ["--first", str(args.first)]
    if args.kinds:
        argv += ["--kinds", args.kinds]
    if args.no_group:
        argv.append("--no-group")
    if args.seed is not None:
        argv += ["--seed", str(args.seed)]
    return argv


def _jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def report(out: Path, status: int | str) -> tuple[list[str], dict[str, Any]]:
    """The report of a finished run from its files: lines to print, and the summary."""
    client = _jsonl(out / "client.jsonl")
    servers = _jsonl(out / "servers.jsonl")
    final_path = out / "final.json"
    final = json.loads(final_path.read_text()) if final_path.exists() else None
    rows = merge_servers([s for s in client if s.get("phase") == "run"], servers)
    trends = client_trends(rows)
    # 1 is the client's own verdict, already in final.json.
    extra = [f"the runner ended with status {status}"] if status not in (0, 1) else []
    concluded = verdict(trends, final, extra)
    faults = [
        e for e in _jsonl(out / "nemesis.jsonl") if e.get("type") == "nemesis" and e["f"] == "start"
    ]
    recoveries = [
        e["data"]["seconds"] for e in _jsonl(out / "nemesis.jsonl") if e.get("f") == "recovered"
    ]
    every = max(1, len(rows) // 30)  # about 30 rows in the printed table
    lines = [
        f"soak: {out}",
        f"{len(rows)} samples, {len(faults)} faults "
        f"({', '.join(sorted({str(e['value']) for e in faults})) or 'none'}); "
        f"recovery (full ISR) after heal: max {max(recoveries, default=0):.1f} s",
        "",
        *interval_table(rows, every=every),
        "",
        f"trends over the second half (thresholds per minute: {dict(THRESHOLDS)}):",
        *(f"  {t.describe()}" for t in trends),
        *(f"  {t.describe()}" for t in server_trends(rows)),
        "",
    ]
    if final is not None:
        lines += [
            f"published {final.get('published')} (attempts), acked {final.get('acked')}, "
            f"consumed {final.get('consumed_values')}, lost {final.get('lost')}, "
            f"gave up {final.get('gave_up')}, consumed twice {final.get('duplicates')}; "
            f"group member saw {final.get('group_consumed_values')} "
            f"(missing {final.get('group_missing')})",
            f"exactly-once: acked {final.get('eo_acked')}, lost {final.get('eo_lost')}, "
            f"duplicated {final.get('eo_duplicates')}",
            f"after close: pending futures {final.get('pending_after_close')}, "
            f"tasks {final.get('tasks_after_close')}, fds {final.get('fds_after_close')}",
            f"errors: {final.get('errors')}",
            *(f"  {k}: {v}" for k, v in (final.get("error_examples") or {}).items()),
        ]
        if final.get("lost_in_log"):
            lines.append(f"lost values in the final log: {final['lost_in_log']}")
    exits_path = out / "server-exits.json"
    exits = json.loads(exits_path.read_text()) if exits_path.exists() else {}
    if exits:
        # The servers are not under test: their crashes are reported (logs in servers/).
        lines.append(f"servers that exited on their own (exit status): {exits}")
    lines.append(concluded.line())
    summary = {
        "out": str(out),
        "status": status,
        "samples": len(rows),
        "faults": [e["value"] for e in faults],
        "trends": [t.__dict__ | {"flagged": t.flagged} for t in trends],
        "final": final,
        "verdict": concluded.outcome,
        "exit_status": concluded.exit_status,
        "failures": list(concluded.reasons) if concluded.outcome == "FAIL" else [],
        "server_exits": exits,
        "load_avg": os.getloadavg(),
    }
    return lines, summary


def run(args: argparse.Namespace) -> int:
    if missing := missing_tools():
        print(f"the soak needs {', '.join(missing)}", file=sys.stderr)
        return 2
    liftbridge_binary(args.version)  # provisioned out here: the namespace has no network
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = (args.out or RESULTS_DIR / f"soak-{stamp}").resolve()
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), str(ROOT)])}
    bound = args.minutes * 60 + 600  # setup, catch-up, close, teardown: all bounded
    load_before = os.getloadavg()
    print(f"soak: {args.minutes:g} min, a sample every {args.interval:g} s, into {out}")
    with (out / "runner.log").open("w") as log:
        try:
            done = subprocess.run(
                private_netns_argv(runner_argv(args, out)),
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                timeout=bound,
                check=False,
            )
            status: int | str = done.returncode
        except subprocess.TimeoutExpired:
            status = "timeout"
    lines, summary = report(out, status)
    summary["load_avg_before"] = load_before
    lines.insert(1, f"load average before {load_before}, after {summary['load_avg']}")
    (out / "report.md").write_text("\n".join(lines) + "\n")
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    print("\n".join(lines))
    return int(summary["exit_status"])


def main(argv: list[str]) -> int:
    return run(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
