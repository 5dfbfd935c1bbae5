"""What a ratios run says: ratio series per repetition, their spread, the text summary,
the docs/benchmarks.md section, and the small per-commit summary in bench/results/.

Pure except for `git_commit`, `save_summary`, `chart` and `write_docs`.
"""

from __future__ import annotations

import json
import statistics
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.external import ROOT
from bench.order import spread

__all__ = [
    "RATIOS",
    "RatioDef",
    "git_commit",
    "markdown",
    "ratio_rows",
    "ratio_series",
    "save_summary",
    "summarize",
    "summary_entry",
    "write_docs",
]

RESULTS_DIR = ROOT / "bench" / "results"
DOC = ROOT / "docs" / "benchmarks.md"
CHART = ROOT / "docs" / "benchmarks-ratios.png"
NOTES = ROOT / "bench" / "ratios_notes.md"
BLOCK_START = "<!-- ratios:start (python -m bench.ratios --full --docs) -->"
BLOCK_END = "<!-- ratios:end -->"

FIELD = {"rate": "msgs_per_s", "p50": "p50_us", "cpu": "client_cpu_us"}


@dataclass(frozen=True, slots=True)
class RatioDef:
    key: str  # stable name in summaries and comparisons
    title: str
    group: str
    ours: str
    anchor: str
    metric: str  # "rate" (higher is better), "p50" or "cpu" (lower is better)
    goal: bool = False

    @property
    def higher_is_better(self) -> bool:
        return self.metric == "rate"


RATIOS: tuple[RatioDef, ...] = (
    RatioDef(
        "publish.nats", "pipelined publish, NATS / go-async", "publish", "ours-nats", "go-async",
        "rate", goal=True,
    ),
    RatioDef(
        "publish.h2", "pipelined publish, gRPC h2 / go-async", "publish", "ours-grpc-h2",
        "go-async", "rate", goal=True,
    ),
    RatioDef(
        "subscribe.h2", "subscribe, h2 / go consumer", "subscribe", "ours-h2", "go-consumer",
        "rate", goal=True,
    ),
    RatioDef(
        "one.nats", "one-at-a-time p50, NATS / go sync", "one", "ours-nats", "go-sync", "p50",
        goal=True,
    ),
    RatioDef(
        "cpu.publish.nats", "client CPU per message, NATS / go-async", "publish", "ours-nats",
        "go-async", "cpu", goal=True,
    ),
    RatioDef(
        "cpu.publish.h2", "client CPU per message, gRPC h2 / go-async", "publish",
        "ours-grpc-h2", "go-async", "cpu", goal=True,
    ),
    RatioDef(
        "one.h2", "one-at-a-time p50, gRPC h2 / go sync", "one", "ours-grpc-h2", "go-sync", "p50"
    ),
    RatioDef(
        "cpu.subscribe.h2", "client CPU per message, subscribe h2 / go consumer", "subscribe",
        "ours-h2", "go-consumer", "cpu",
    ),
    RatioDef(
        "publish.nats.batch100", "pipelined publish, NATS / go batch-100", "publish",
        "ours-nats", "go-batch-100", "rate",
    ),
    RatioDef(
        "publish.nats.uvloop", "pipelined publish, NATS on uvloop / go-async", "publish",
        "ours-nats-uvloop", "go-async", "rate",
    ),
    RatioDef(
        "publish.h2.uvloop", "pipelined publish, gRPC h2 on uvloop / go-async", "publish",
        "ours-grpc-h2-uvloop", "go-async", "rate",
    ),
    RatioDef(
        "cpu.publish.nats.uvloop", "client CPU per message, NATS on uvloop / go-async",
        "publish", "ours-nats-uvloop", "go-async", "cpu",
    ),
    RatioDef(
        "cpu.publish.h2.uvloop", "client CPU per message, gRPC h2 on uvloop / go-async",
        "publish", "ours-grpc-h2-uvloop", "go-async", "cpu",
    ),
    RatioDef(
        "publish.aio", "pipelined publish, gRPC grpc.aio / go-async", "publish",
        "ours-grpc-aio", "go-async", "rate",
    ),
    RatioDef(
        "subscribe.aio", "subscribe, grpc.aio / go consumer", "subscribe", "ours-grpc-aio",
        "go-consumer", "rate",
    ),
)  # fmt: skip


def _measured(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The measured phases (no warm-ups, no slow-consumer checks)."""
    return [r for r in records if r.get("rep", -1) >= 0 and r["group"] != "slow"]


def _by_rep(records: Iterable[dict[str, Any]], group: str) -> dict[int, dict[str, Any]]:
    out: dict[int, dict[str, Any]] = {}
    for r in _measured(records):
        if r["group"] == group:
            out.setdefault(r["rep"], {})[r["name"]] = r
    return out


def ratio_series(
    records: Sequence[dict[str, Any]], d: RatioDef, ours: str | None = None
) -> list[dict[str, float]]:
    """Per repetition (``rep``): the ratio ours/anchor and whether ours ran first."""
    field = FIELD[d.metric]
    name = ours or d.ours
    out = []
    for _rep, rows in sorted(_by_rep(records, d.group).items()):
        a, b = rows.get(name), rows.get(d.anchor)
        if a is None or b is None or not a.get(field) or not b.get(field):
            continue
        out.append(
            {
                "rep": float(_rep),
                "ratio": a[field] / b[field],
                "ours_first": 1.0 if a.get("position", 0) < b.get("position", 0) else 0.0,
            }
        )
    return out


def _row(
    key: str, title: str, d: RatioDef, values: list[float], split: list[dict[str, float]]
) -> dict[str, Any]:
    first = [s["ratio"] for s in split if s["ours_first"]]
    after = [s["ratio"] for s in split if not s["ours_first"]]
    stats = spread(values)
    met = None
    if stats is not None and d.goal:
        met = stats["median"] >= 1.0 if d.higher_is_better else stats["median"] <= 1.0
    return {
        "key": key,
        "title": title,
        "metric": d.metric,
        "goal": d.goal,
        "met": met,
        "spread": stats,
        "ours_first_median": statistics.median(first) if first else None,
        "anchor_first_median": statistics.median(after) if after else None,
        "values": values,
    }


def ratio_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Every ratio the run's contenders allow: to go-liftbridge, and with two trees
    (bench-compare) each tree's and then B/A, the ratio of their ratios to go."""
    records = results["records"]
    names = {r["name"] for r in _measured(records)}
    trees = list(results.get("trees", {}))
    rows: list[dict[str, Any]] = []
    for d in RATIOS:
        if d.anchor not in names:
            continue
        if not trees:
            if d.ours in names:
                series = ratio_series(records, d)
                rows.append(_row(d.key, d.title, d, [s["ratio"] for s in series], series))
            continue
        per_tree = {t: ratio_series(records, d, f"{d.ours}@{t}") for t in trees}
        if not all(per_tree.values()):
            continue
        for t in trees:
            title = f"{d.title} [{t}]"
            vals = [s["ratio"] for s in per_tree[t]]
            rows.append(_row(f"{d.key}@{t}", title, d, vals, per_tree[t]))
        if len(trees) == 2:
            a, b = trees
            by_rep = {s["rep"]: s["ratio"] for s in per_tree[a]}
            pairs = [s["ratio"] / by_rep[s["rep"]] for s in per_tree[b] if s["rep"] in by_rep]
            plain = RatioDef(d.key, d.title, d.group, d.ours, d.anchor, d.metric)
            rows.append(_row(f"{d.key}:{b}/{a}", f"{d.title}: {b} / {a}", plain, pairs, []))
    return rows


def _fmt(stats: dict[str, float] | None, fmt: str = "{:.2f}", suffix: str = "x") -> str:
    if stats is None:
        return "-"
    f = fmt.format
    return f"{f(stats['median'])}{suffix} ({f(stats['min'])}..{f(stats['max'])})"


def _contender_stats(results: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    rows: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in _measured(results["records"]):
        rows.setdefault((r["group"], r["name"]), []).append(r)
    out = {}
    for key, recs in rows.items():
        out[key] = {
            "messages": round(statistics.median(r.get("messages") or 0 for r in recs)),
            "seconds": spread([r["seconds"] for r in recs if r.get("seconds")]),
            **{
                field: spread([r[field] for r in recs if r.get(field) is not None])
                for field in ("msgs_per_s", "client_cpu_us", "server_cpu_us", "p50_us")
            },
        }
    return out


def _order_note(row: dict[str, Any]) -> str:
    a, b = row["ours_first_median"], row["anchor_first_median"]
    if a is None or b is None:
        return ""
    return f"  [ours first {a:.2f}, go first {b:.2f}]"


def summarize(results: dict[str, Any]) -> str:
    """The text summary: contenders, then the ratios (goal ratios last)."""
    reps = ", ".join(f"{g} {n}" for g, n in results.get("reps", {}).items())
    lines = [
        "",
        f"==> medians (min..max) over balanced repetitions ({reps}); phases of "
        f"~{results['plan']['phase_s']:g} s; load average {results['load_average']['before']}"
        f" before, {results['load_average']['after']} after",
        f"  {'group':<9} {'client':<20} {'msgs':>9} {'s/phase':>7} {'msgs/s':>26} "
        f"{'client CPU us/msg':>22} {'server CPU':>10} {'p50 us':>7}",
    ]
    for (group, name), st in _contender_stats(results).items():
        p50 = f"{st['p50_us']['median']:.0f}" if st["p50_us"] else "-"
        lines.append(
            f"  {group:<9} {name:<20} {st['messages']:>9,} "
            f"{(st['seconds'] or {}).get('median', 0):>7.2f} "
            f"{_fmt(st['msgs_per_s'], '{:,.0f}', ''):>26} "
            f"{_fmt(st['client_cpu_us'], '{:.1f}', ''):>22} "
            f"{(st['server_cpu_us'] or {}).get('median', 0):>10.1f} "
            f"{p50:>7}"
        )
    lines.extend(
        f"  slow consumer {r['name']}: {r['messages']} msgs at 10 ms each: "
        f"RSS +{r['rss_growth_mib']:.1f} MiB (peak {r['rss_peak_mib']:.1f} MiB)"
        for r in results["records"]
        if r["group"] == "slow" and r.get("rss_growth_mib") is not None
    )
    rows = results.get("ratios") or ratio_rows(results)
    lines += ["", "  side by side:"]
    lines.extend(
        f"    {row['title']:<58} {_fmt(row['spread'])}{_order_note(row)}"
        for row in rows
        if not row["goal"]
    )
    goals = [row for row in rows if row["goal"]]
    if goals:
        lines += ["", "==> the goals (ratio to go-liftbridge, same node, same repetition):"]
        for row in goals:
            want = ">= 1.0x" if row["metric"] == "rate" else "<= 1.0x"
            verdict = "-" if row["met"] is None else ("met" if row["met"] else "MISSED")
            lines.append(
                f"    {row['title']:<58} {_fmt(row['spread'])}  goal {want}: {verdict}"
                + _order_note(row)
            )
    return "\n".join(lines)


# ---- the per-commit summary --------------------------------------------------------------


def git_commit(root: Path = ROOT) -> dict[str, Any]:
    """HEAD of the tree and whether what the bench measures (the library, the harness,
    the project file; not the harness's notes) has uncommitted changes."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=False)
        return done.stdout.strip() if done.returncode == 0 else ""

    sha = git("rev-parse", "HEAD")
    changed = git(
        "status", "--porcelain", "--untracked-files=no", "--",
        "liftbridge_client", "bench", "pyproject.toml", ":(exclude)bench/results",
        ":(exclude)bench/*.md",
    )  # fmt: skip
    return {"sha": sha or None, "dirty": bool(changed)}


def _round(stats: dict[str, float] | None) -> dict[str, float] | None:
    if stats is None:
        return None
    return {k: (int(v) if k == "n" else float(f"{v:.4g}")) for k, v in stats.items()}


def summary_entry(results: dict[str, Any]) -> dict[str, Any]:
    """One run, small: medians, spreads and counts only (no per-phase records)."""
    machine = results.get("machine", {})
    contenders = {
        f"{group}/{name}": {
            "messages": st["messages"],
            **{k: _round(v) for k, v in st.items() if k != "messages" and v is not None},
        }
        for (group, name), st in _contender_stats(results).items()
    }
    return {
        "started": results["started"],
        "plan": results["plan"]["name"],
        "phase_s": results["plan"]["phase_s"],
        "reps": results.get("reps", {}),
        "seconds": round(results["seconds"]),
        "load_average": results["load_average"],
        "machine": {k: machine.get(k) for k in ("cpu_model", "nproc", "python", "go")},
        "liftbridge": results["server"]["liftbridge"],
        "window": results.get("window"),
        "dirty": results.get("commit", {}).get("dirty"),
        "ratios": {
            row["key"]: {"title": row["title"], **(_round(row["spread"]) or {})}
            for row in (results.get("ratios") or ratio_rows(results))
        },
        "contenders": contenders,
        "failures": sum(1 for r in results["records"] if r.get("problem")),
    }


def summary_path(commit: dict[str, Any], directory: Path = RESULTS_DIR) -> Path:
    """bench/results/<sha12>.json; ``-dirty`` (git-ignored) for a tree with changes."""
    sha = (commit.get("sha") or "unknown")[:12]
    return directory / f"{sha}{'-dirty' if commit.get('dirty') else ''}.json"


def save_summary(results: dict[str, Any], directory: Path = RESULTS_DIR) -> Path:
    """Append this run's summary to its commit's file (one file per commit, runs in it)."""
    commit = results.get("commit") or {}
    path = summary_path(commit, directory)
    data: dict[str, Any] = {"commit": commit.get("sha"), "runs": []}
    if path.exists():
        data = json.loads(path.read_text())
    data["runs"].append(summary_entry(results))
    directory.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n")
    return path


# ---- docs/benchmarks.md -------------------------------------------------------------------


def markdown(results: dict[str, Any], chart_name: str | None) -> str:
    """The docs/benchmarks.md section of a ratios run (between the block markers)."""
    plan, machine = results["plan"], results["machine"]
    load = results["load_average"]
    reps = ", ".join(f"{n} {g}" for g, n in results.get("reps", {}).items())
    commit = (results.get("commit") or {}).get("sha") or "?"
    lines = [
        BLOCK_START,
        "## Ratios to go-liftbridge: balanced, interleaved medians",
        "",
        f"Run {results['started']} ({plan['name']} plan, {results['seconds']:.0f} s, commit "
        f"`{commit[:12]}`) by `python -m bench.ratios --full --docs` (`make bench-full`; `make "
        "bench` runs the quick plan and prints the same summary). One fresh single node "
        f"(Liftbridge {results['server']['liftbridge']}, embedded NATS, 127.0.0.1); every "
        "contender in a fresh process of its own, one at a time. Each measured phase lasts "
        f"about {plan['phase_s']:g} s (a warm-up run of each contender, not counted, sets its "
        "message count; the contenders of a group share one count, the largest their "
        "warm-ups ask for, the median for one at a time, except the grpc.aio ones, 10x "
        "slower; a repetition whose phases were far from that length scales the counts of "
        "the next ones). Repetitions "
        f"({reps}) follow a Williams design: every contender of a group runs first, and in "
        "every other position, equally often; each publish goes to a fresh stream deleted "
        "afterwards. Each ratio is taken within one repetition and shown as median "
        "(min..max); `ours first` / `go first` are its medians over the repetitions where "
        "this client or go-liftbridge ran first.",
        "",
        f"Machine: {machine.get('cpu_model')}, {machine.get('nproc')} cores, "
        f"{machine.get('ram_gib')} GiB, {machine.get('os')}, Python {machine.get('python')}, "
        f"{machine.get('go')}. Load average (1, 5, 15 min) {load['before']} before and "
        f"{load['after']} after: the 2 cores were shared with other work (other test runs), "
        "so single figures move from run to run; the ratios, taken side by side, move less.",
        "",
        f"Messages of {plan['size']} B, ack LEADER, {results.get('window', 4096)} publishes in "
        "flight for this client (its default `max_inflight`). Pipelined publishes count "
        "their acks the same way on both sides: go-liftbridge's PublishAsync calls an ack "
        "handler that counts, this client's futures get a done callback that counts, then "
        "each waits for the last ack. CPU per message: the client process's CPU time (user "
        "+ system, all threads) over the phase and the server process's (Liftbridge with "
        "its embedded NATS), divided by the messages.",
        "",
    ]
    if chart_name:
        lines += [f"![ratios]({chart_name})", ""]
    rows = results["ratios"]
    lines += [
        "| goal | ratio to go-liftbridge | ours first | go first | goal | status |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for row in rows:
        if row["goal"]:
            want = ">= 1.0x" if row["metric"] == "rate" else "<= 1.0x"
            status = "-" if row["met"] is None else ("met" if row["met"] else "missed")
            lines.append(
                f"| {row['title']} | {_fmt(row['spread'])} | {_opt(row['ours_first_median'])}"
                f" | {_opt(row['anchor_first_median'])} | {want} | {status} |"
            )
    lines += ["", "| side by side | ratio | ours first | go first |", "|---|---:|---:|---:|"]
    lines += [
        f"| {row['title']} | {_fmt(row['spread'])} | {_opt(row['ours_first_median'])} | "
        f"{_opt(row['anchor_first_median'])} |"
        for row in rows
        if not row["goal"]
    ]
    lines += [
        "",
        "| group | client | messages | s per phase | msgs/s median (min..max) | "
        "client CPU us/msg (min..max) | server CPU us/msg | p50 us |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for (group, name), st in _contender_stats(results).items():
        p50 = f"{st['p50_us']['median']:.0f}" if st["p50_us"] else "-"
        lines.append(
            f"| {group} | {name} | {st['messages']:,} | "
            f"{(st['seconds'] or {}).get('median', 0):.2f} | "
            f"{_fmt(st['msgs_per_s'], '{:,.0f}', '')} | "
            f"{_fmt(st['client_cpu_us'], '{:.1f}', '')} | "
            f"{(st['server_cpu_us'] or {}).get('median', 0):.1f} | "
            f"{p50} |"
        )
    slow = [r for r in results["records"] if r["group"] == "slow" and r.get("rss_growth_mib")]
    if slow:
        lines += [
            "",
            "Slow consumer (sleeps 10 ms per message; 20,000 x 1 KiB wait on the server):",
            "",
        ]
        lines += [
            f"- {r['name']}: {r['messages']} messages read, RSS +{r['rss_growth_mib']:.1f} MiB "
            f"(peak {r['rss_peak_mib']:.1f} MiB)"
            for r in slow
        ]
    if NOTES.exists():
        lines += ["", NOTES.read_text().strip()]
    lines += [
        "",
        "The sections below come from the last full `python -m bench` run (its date is at the "
        "top of the page): one run of each configuration, not interleaved, so its single "
        "ratios move more than the medians above, which are the figures to quote.",
        "",
        BLOCK_END,
    ]
    return "\n".join(lines)


def _opt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def splice(doc: str, block: str) -> str:
    """``doc`` with its ratios block replaced by ``block`` (inserted before the machine
    section when absent)."""
    if BLOCK_START in doc and BLOCK_END in doc:
        head, rest = doc.split(BLOCK_START, 1)
        return head + block + rest.split(BLOCK_END, 1)[1]
    marker = "## Machine and versions"
    if marker in doc:
        head, rest = doc.split(marker, 1)
        return head + block + "\n\n" + marker + rest
    return doc.rstrip("\n") + "\n\n" + block + "\n"


def existing_block(doc: str) -> str | None:
    """The ratios block of a page, if it has one (kept when bench/report.py rewrites it)."""
    if BLOCK_START in doc and BLOCK_END in doc:
        return BLOCK_START + doc.split(BLOCK_START, 1)[1].split(BLOCK_END, 1)[0] + BLOCK_END
    return None


def chart(results: dict[str, Any], path: Path = CHART) -> bool:
    """Median msgs/s with min..max per contender; False when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    groups = ("publish", "subscribe", "one")
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    for ax, group in zip(axes, groups, strict=True):
        names: dict[str, list[float]] = {}
        for r in _measured(results["records"]):
            if r["group"] == group and r.get("msgs_per_s"):
                names.setdefault(r["name"], []).append(r["msgs_per_s"])
        labels = list(names)
        mids = [statistics.median(v) for v in names.values()]
        lows = [m - min(v) for m, v in zip(mids, names.values(), strict=True)]
        highs = [max(v) - m for m, v in zip(mids, names.values(), strict=True)]
        colors = ["#4c72b0" if n.startswith("go") else "#dd8452" for n in labels]
        ax.bar(labels, mids, yerr=[lows, highs], color=colors, capsize=4)
        ax.set_title({"publish": "pipelined publish", "subscribe": "subscribe",
                      "one": "one at a time"}[group] + " (median, min..max)")  # fmt: skip
        ax.set_ylabel("msgs/s")
        ax.tick_params(axis="x", labelsize=8, rotation=30)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return True


def write_docs(results: dict[str, Any]) -> None:
    """Write (or replace) the ratios section of docs/benchmarks.md and its chart."""
    has_chart = chart(results)
    doc = DOC.read_text() if DOC.exists() else "# Benchmarks\n"
    DOC.write_text(splice(doc, markdown(results, CHART.name if has_chart else None)))
    print(
        f"wrote {DOC.relative_to(ROOT)}" + (f" and {CHART.relative_to(ROOT)}" if has_chart else "")
    )
