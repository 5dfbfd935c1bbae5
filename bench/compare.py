"""Two revisions of the client side by side: ``make bench-compare A B``.

    python -m bench.compare A B [--reps N] [--phase S] [--groups publish,subscribe,one]

A and B are git revisions (``main``, ``HEAD~1``, a hash). Each one's ``liftbridge_client``
package is exported (``git archive``, nothing is checked out and no worktree is added) to
a temporary directory. One ratios run on one fresh node then measures go-liftbridge and this
client from both trees as contenders of the same groups, in balanced orders (A, B and the
Go anchor each run first equally often), so A and B are always measured minutes, not runs,
apart. The harness (``bench/``) is this tree's for both, so only the library differs.

Printed per metric: each tree's ratio to go-liftbridge, and B/A, the ratio of the two
ratios within each repetition, as median (min..max) with the quartiles: above 1.0 B is
faster (for msgs/s) or slower (for p50 latency and CPU per message) than A.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import shutil
import subprocess
import sysconfig
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from bench import ratio_report
from bench.external import ROOT
from bench.ratios import RatioPlan, measure_run, parse_groups, write_raw
from hatch_build import compile_speedups

__all__ = ["export_library", "main", "resolve"]


def resolve(rev: str, root: Path = ROOT) -> str:
    """The commit a revision names; SystemExit when it names none."""
    done = subprocess.run(
        ["git", "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0 or not done.stdout.strip():
        raise SystemExit(f"bench-compare: {rev!r} is not a git revision here")
    return done.stdout.strip()


def export_library(sha: str, into: Path, root: Path = ROOT) -> Path:
    """``liftbridge_client`` as of ``sha`` under ``into``; ``into`` is returned."""
    done = subprocess.run(
        ["git", "archive", "--format=tar", sha, "liftbridge_client"],
        cwd=root,
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"git archive {sha}: {done.stderr.decode(errors='replace').strip()}")
    into.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(done.stdout)) as tar:
        tar.extractall(into, filter="data")
    if not (into / "liftbridge_client" / "__init__.py").exists():
        raise SystemExit(f"{sha} has no liftbridge_client package")
    source = into / "liftbridge_client" / "_speedups.c"
    if source.exists():  # the C accelerator, compiled as an install would (hatch_build.py)
        out = source.with_name("_speedups" + (sysconfig.get_config_var("EXT_SUFFIX") or ".so"))
        compile_speedups(source, out)
    return into


def comparison_table(results: dict[str, Any]) -> str:
    """B/A per metric, and each tree's ratio to go-liftbridge beside it."""
    rows = {row["key"]: row for row in results["ratios"]}
    a, b = results["trees"]
    lines = [
        "",
        f"==> B / A (A = {results['revisions']['A']}, B = {results['revisions']['B']}): "
        "median (min..max) [q1..q3] of the per-repetition ratio of ratios",
        f"  {'metric':<66} {'B / A':>30} {'A / go':>8} {'B / go':>8}",
    ]
    for key, row in rows.items():
        if ":" not in key:
            continue
        base = key.split(":", 1)[0]
        st = row["spread"]
        if st is None:
            continue
        better = "higher is better" if row["metric"] == "rate" else "lower is better"
        cell = (
            f"{st['median']:.3f} ({st['min']:.2f}..{st['max']:.2f}) "
            f"[{st['q1']:.2f}..{st['q3']:.2f}]"
        )
        per_a = rows.get(f"{base}@{a}", {}).get("spread") or {}
        per_b = rows.get(f"{base}@{b}", {}).get("spread") or {}
        lines.append(
            f"  {row['title'].split(':')[0] + f' ({better})':<66} "
            f"{cell:>30} "
            f"{per_a.get('median', float('nan')):>7.2f}x {per_b.get('median', float('nan')):>7.2f}x"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.compare", description=__doc__)
    parser.add_argument("a", metavar="A", help="the base revision")
    parser.add_argument("b", metavar="B", help="the revision compared with it")
    parser.add_argument("--reps", type=int, default=5, help="at least this many repetitions")
    parser.add_argument("--phase", type=float, default=3.0, help="seconds per measured phase")
    parser.add_argument(
        "--groups",
        default="publish,subscribe,one",
        help="comma-separated groups to measure (publish, subscribe, one)",
    )
    args = parser.parse_args(argv)
    shas = {"A": resolve(args.a), "B": resolve(args.b)}
    groups = parse_groups(args.groups)
    plan = dataclasses.replace(RatioPlan.quick(), name="compare", reps=args.reps)
    plan = dataclasses.replace(plan, phase_s=args.phase)
    tmp = Path(tempfile.mkdtemp(prefix="bench-compare-"))
    try:
        trees = {label: export_library(sha, tmp / label) for label, sha in shas.items()}
        for label, sha in shas.items():
            print(f"  {label} = {getattr(args, label.lower())} ({sha[:12]}) in {trees[label]}")
        results = measure_run(plan, trees, groups=groups)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    results["revisions"] = {
        label: f"{getattr(args, label.lower())} ({sha[:12]})" for label, sha in shas.items()
    }
    path = write_raw(results, f"compare-{shas['A'][:8]}-{shas['B'][:8]}")
    print(f"\nresults: {path.relative_to(ROOT)} ({results['seconds']:.0f} s)")
    print(ratio_report.summarize(results))
    print(comparison_table(results))
    failures = [r for r in results["records"] if r.get("problem")]
    if failures:
        print(f"{len(failures)} run(s) FAILED (errors, lost or disordered messages)")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
