"""The three goal ratios, measured so that they cannot flatter (``make bench``).

One fresh single node per run. Every contender - go-liftbridge (bench/go) and this
client - runs in a process of its own, one at a time; a run repeats every comparison
``reps`` times in a rotating order (so no contender always goes first, or always right
after the Go peer warmed the server's caches), and each ratio is taken inside one
repetition, then summarised as the median with min..max.

- pipelined publish: this client's ``send()`` with its default window in flight
  (``max_inflight``; NATS; gRPC over h2 and grpc.aio) against go-liftbridge's
  PublishAsync without a barrier (go-async); go's batch-100 is a second row;
- subscribe: EARLIEST to a stop offset on one pre-filled partition (h2 and grpc.aio)
  against go-liftbridge's consumer;
- one at a time: p50 of ``await publish()`` (NATS, gRPC over h2) against go's
  synchronous Publish (lower is better).

A run fails (exit status 1) when a contender errors, loses or disorders a message.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.external import ROOT, GoBench
from bench.machine import machine_details
from bench.ours import DEFAULT_WINDOW
from liftbridge_client import Client
from liftbridge_client.options import ClientOptions
from liftbridge_client.testing import LIFTBRIDGE_VERSION, SingleNode

__all__ = ["RatioPlan", "main", "summarize"]

RESULTS_DIR = ROOT / "bench" / "results"
DOC = ROOT / "docs" / "benchmarks.md"
CHART = ROOT / "docs" / "benchmarks-ratios.png"
BLOCK_START = "<!-- ratios:start (python -m bench.ratios --full --docs) -->"
BLOCK_END = "<!-- ratios:end -->"
_TICK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True, slots=True)
class RatioPlan:
    name: str
    reps: int
    n_pub: int
    n_sub: int
    n_one: int
    n_slow: int
    size: int = 256

    @classmethod
    def quick(cls) -> RatioPlan:
        return cls("quick", reps=3, n_pub=10_000, n_sub=50_000, n_one=300, n_slow=200)

    @classmethod
    def full(cls) -> RatioPlan:
        return cls("full", reps=5, n_pub=50_000, n_sub=200_000, n_one=2_000, n_slow=1_000)


@dataclass(frozen=True, slots=True)
class Contender:
    group: str  # "publish" | "subscribe" | "one"
    name: str
    go_mode: str | None = None  # a Go contender: its pub mode ("sub" for the consumer)
    task: dict[str, Any] | None = None  # one of ours: the bench.proc task (less target)


CONTENDERS: tuple[Contender, ...] = (
    Contender("publish", "go-async", go_mode="async"),
    Contender("publish", "go-batch-100", go_mode="batch"),
    Contender("publish", "ours-nats", task={"op": "pub", "transport": "nats"}),
    Contender(
        "publish", "ours-grpc-h2", task={"op": "pub", "transport": "grpc", "stream_transport": "h2"}
    ),
    Contender(
        "publish",
        "ours-grpc-aio",
        task={"op": "pub", "transport": "grpc", "stream_transport": "grpc"},
    ),
    Contender("subscribe", "go-consumer", go_mode="sub"),
    Contender("subscribe", "ours-h2", task={"op": "sub", "stream_transport": "h2"}),
    Contender("subscribe", "ours-grpc-aio", task={"op": "sub", "stream_transport": "grpc"}),
    Contender("one", "go-sync", go_mode="sync"),
    Contender("one", "ours-nats", task={"op": "one", "transport": "nats"}),
    Contender(
        "one", "ours-grpc-h2", task={"op": "one", "transport": "grpc", "stream_transport": "h2"}
    ),
)

# (title, group, ours, anchor, metric, goal): metric "rate" is ours/anchor msgs/s (higher
# is better, goal >= 1.0); "p50" is ours/anchor p50 latency (lower is better, goal <= 1.0).
GOALS: tuple[tuple[str, str, str, str, str], ...] = (
    ("pipelined publish, NATS vs go-async", "publish", "ours-nats", "go-async", "rate"),
    ("subscribe, h2 vs go-liftbridge", "subscribe", "ours-h2", "go-consumer", "rate"),
    ("one-at-a-time p50, NATS vs go sync", "one", "ours-nats", "go-sync", "p50"),
)
# Side-by-side rows (same transport where one exists), printed before the goals.
EXTRA: tuple[tuple[str, str, str, str, str], ...] = (
    (
        "pipelined publish, gRPC h2 vs go-async (gRPC)",
        "publish",
        "ours-grpc-h2",
        "go-async",
        "rate",
    ),
    (
        "pipelined publish, gRPC grpc.aio vs go-async",
        "publish",
        "ours-grpc-aio",
        "go-async",
        "rate",
    ),
    ("pipelined publish, NATS vs go batch-100", "publish", "ours-nats", "go-batch-100", "rate"),
    ("subscribe, grpc.aio vs go-liftbridge", "subscribe", "ours-grpc-aio", "go-consumer", "rate"),
    ("one-at-a-time p50, gRPC h2 vs go sync", "one", "ours-grpc-h2", "go-sync", "p50"),
)


def _proc_cpu(pid: int | None) -> float:
    """CPU seconds (user + system) a process has used; 0 when unknown."""
    if pid is None:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICK


class RatioRun:
    def __init__(self, plan: RatioPlan, node: SingleNode, go: GoBench) -> None:
        self.plan = plan
        self.node = node
        self.go = go
        self.records: list[dict[str, Any]] = []
        self._count = 0
        self.sub_stream = ""

    def _server_pid(self) -> int | None:
        return self.node.node.process.pid

    def new_stream(self) -> str:
        self._count += 1
        name = f"ratio-{self._count}"

        async def create() -> None:
            async with Client([self.node.address], options=ClientOptions(keepalive_time=None)) as c:
                await c.create_stream(name, name)

        asyncio.run(create())
        return name

    def stored(self, stream: str) -> int:
        async def fetch() -> int:
            async with Client([self.node.address], options=ClientOptions(keepalive_time=None)) as c:
                return (await c.fetch_partition_metadata(stream)).high_watermark + 1

        return asyncio.run(fetch())

    def fill(self) -> None:
        self.sub_stream = self.new_stream()
        out = self.go.run(
            "pub", f"-addr={self.node.address}", f"-stream={self.sub_stream}",
            f"-n={self.plan.n_sub}", f"-size={self.plan.size}", "-mode=batch", "-batch=1000",
            "-timeout=600s",
        )  # fmt: skip
        if out.get("error") or out.get("acked") != self.plan.n_sub:
            raise SystemExit(f"filling the subscribe stream failed: {out}")

    def measure(self, c: Contender, rep: int) -> dict[str, Any]:
        plan = self.plan
        n = {"publish": plan.n_pub, "subscribe": plan.n_sub, "one": plan.n_one}[c.group]
        stream = self.sub_stream if c.group == "subscribe" else self.new_stream()
        cpu0 = _proc_cpu(self._server_pid())
        if c.go_mode is not None:
            if c.go_mode == "sub":
                args = ["sub", f"-counts={n}"]
            else:
                args = ["pub", f"-mode={c.go_mode}", "-batch=100", f"-n={n}", f"-size={plan.size}"]
            out = self.go.run(*args, f"-addr={self.node.address}", f"-stream={stream}")
            lat = out.pop("latencies_us", None)
            if lat:
                from bench.stats import summarize_latencies

                out["latency_us"] = summarize_latencies(lat)
        else:
            assert c.task is not None
            task = {**c.task, "address": self.node.address, "nats_url": self.node.nats_url}
            task.update(stream=stream, n=n, size=plan.size)
            done = subprocess.run(
                [sys.executable, "-m", "bench.proc", json.dumps(task)],
                capture_output=True, text=True, check=False, cwd=ROOT, timeout=900,
            )  # fmt: skip
            if done.returncode != 0:
                out = {"error": done.stderr.strip()[-2000:] or f"exit {done.returncode}"}
            else:
                out = json.loads(done.stdout)
        server_cpu = _proc_cpu(self._server_pid()) - cpu0
        record: dict[str, Any] = {"group": c.group, "name": c.name, "rep": rep, "messages": n}
        problems = [str(out[k]) for k in ("error", "first_error") if out.get(k)]
        if c.group == "subscribe":
            if out.get("messages") != n:
                problems.append(f"read {out.get('messages')} of {n}")
            if out.get("out_of_order"):
                problems.append(f"{out['out_of_order']} out of order")
        else:
            if out.get("acked") != n:
                problems.append(f"{out.get('acked')} of {n} acked")
            stored = self.stored(stream)
            if stored != n:
                problems.append(f"{stored} of {n} stored")
        seconds = float(out.get("seconds") or 0.0)
        record["msgs_per_s"] = n / seconds if seconds and not problems else None
        if out.get("cpu_s") is not None:
            record["client_cpu_us"] = float(out["cpu_s"]) / n * 1e6
        record["server_cpu_us"] = server_cpu / n * 1e6
        if out.get("latency_us"):
            record["p50_us"] = out["latency_us"]["p50"]
            record["p99_us"] = out["latency_us"]["p99"]
        record["problem"] = "; ".join(problems) or None
        rate = record["msgs_per_s"]
        extra = f"p50 {record['p50_us']:.0f}us" if "p50_us" in record else ""
        print(
            f"  rep {rep + 1} {c.group:<9} {c.name:<14} "
            + (f"{rate:>9,.0f} msg/s" if rate else "        -      ")
            + f"  cpu client {record.get('client_cpu_us', 0):5.1f}us"
            + f" server {record['server_cpu_us']:5.1f}us/msg  {extra}"
            + (f"  FAILED: {record['problem']}" if record["problem"] else ""),
            flush=True,
        )
        return record

    def slow_consumers(self) -> None:
        """RSS of a consumer sleeping 10 ms per message on a partition holding MiBs more."""
        stream = self.new_stream()
        n = 20_000
        out = self.go.run(
            "pub", f"-addr={self.node.address}", f"-stream={stream}", f"-n={n}", "-size=1024",
            "-mode=batch", "-batch=1000", "-timeout=600s",
        )  # fmt: skip
        if out.get("acked") != n:
            self.records.append(
                {"group": "slow", "name": "fill", "rep": 0, "problem": f"fill failed: {out}"}
            )
            return
        for transport in ("h2", "grpc"):
            task: dict[str, Any] = {
                "op": "slow",
                "address": self.node.address,
                "nats_url": self.node.nats_url,
            }
            task.update(stream=stream, n=self.plan.n_slow, stream_transport=transport)
            done = subprocess.run(
                [sys.executable, "-m", "bench.proc", json.dumps(task)],
                capture_output=True, text=True, check=False, cwd=ROOT, timeout=600,
            )  # fmt: skip
            record: dict[str, Any] = {"group": "slow", "name": f"ours-{transport}", "rep": 0}
            if done.returncode != 0:
                record["problem"] = done.stderr.strip()[-2000:]
            else:
                record.update(json.loads(done.stdout), problem=None)
                record["rss_growth_mib"] = record["rss_peak_mib"] - record["rss_baseline_mib"]
                print(
                    f"  slow consumer ours-{transport}: {record['messages']} x 1 KiB at 10 ms "
                    f"each, {n * 1024 // 2**20} MiB waiting: RSS +{record['rss_growth_mib']:.1f}"
                    f" MiB (peak {record['rss_peak_mib']:.1f} MiB)",
                    flush=True,
                )
            self.records.append(record)

    def run(self) -> None:
        self.slow_consumers()
        self.fill()
        groups: dict[str, list[Contender]] = {}
        for c in CONTENDERS:
            groups.setdefault(c.group, []).append(c)
        for rep in range(self.plan.reps):
            for members in groups.values():
                k = rep % len(members)
                for c in members[k:] + members[:k]:  # rotating order
                    self.records.append(self.measure(c, rep))


def _ratio_series(
    records: list[dict[str, Any]], ours: str, anchor: str, group: str, metric: str
) -> list[float]:
    by_rep: dict[int, dict[str, dict[str, Any]]] = {}
    for r in records:
        if r["group"] == group:
            by_rep.setdefault(r["rep"], {})[r["name"]] = r
    key = "msgs_per_s" if metric == "rate" else "p50_us"
    out = []
    for rows in by_rep.values():
        a, b = rows.get(ours, {}).get(key), rows.get(anchor, {}).get(key)
        if a and b:
            out.append(a / b)
    return out


def _spread(values: list[float], fmt: str = "{:.2f}") -> str:
    if not values:
        return "-"
    mid = statistics.median(values)
    return f"{fmt.format(mid)} ({fmt.format(min(values))}..{fmt.format(max(values))})"


def summarize(results: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    """The text summary (goal ratios last) and the ratio rows."""
    records = results["records"]
    lines = ["", f"==> medians of {results['plan']['reps']} interleaved repetitions (min..max)"]
    names: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in records:
        if r["group"] != "slow":
            names.setdefault((r["group"], r["name"]), []).append(r)
    header = (
        f"  {'group':<9} {'client':<14} {'msgs/s':>26} {'client CPU us/msg':>18} "
        f"{'server CPU us/msg':>18} {'p50 us':>8}"
    )
    lines.append(header)
    for (group, name), rows in names.items():
        rates = [r["msgs_per_s"] for r in rows if r.get("msgs_per_s")]
        ccpu = [r["client_cpu_us"] for r in rows if r.get("client_cpu_us") is not None]
        scpu = [r["server_cpu_us"] for r in rows]
        p50 = [r["p50_us"] for r in rows if r.get("p50_us") is not None]
        lines.append(
            f"  {group:<9} {name:<14} {_spread(rates, '{:,.0f}'):>26} "
            f"{(statistics.median(ccpu) if ccpu else 0):>18.1f} "
            f"{statistics.median(scpu):>18.1f} "
            f"{(f'{statistics.median(p50):.0f}' if p50 else '-'):>8}"
        )
    rows_out = []
    lines.append("")
    lines.extend(
        f"  slow consumer {r['name']}: {r['messages']} msgs at 10 ms each: "
        f"RSS +{r['rss_growth_mib']:.1f} MiB (peak {r['rss_peak_mib']:.1f} MiB)"
        for r in records
        if r["group"] == "slow" and r.get("rss_growth_mib") is not None
    )
    lines.append("")
    for title, group, ours, anchor, metric in EXTRA + GOALS:
        series = _ratio_series(records, ours, anchor, group, metric)
        mid = statistics.median(series) if series else None
        goal = title in {g[0] for g in GOALS}
        met = None if mid is None else (mid >= 1.0 if metric == "rate" else mid <= 1.0)
        rows_out.append(
            {"title": title, "median": mid, "min": min(series, default=None),
             "max": max(series, default=None), "goal": goal, "met": met, "metric": metric}
        )  # fmt: skip
    lines.append("  side by side:")
    lines.extend(f"    {row['title']:<48} {_fmt_row(row)}" for row in rows_out[: len(EXTRA)])
    lines.append("")
    lines.append("==> the three goals (ratio to go-liftbridge, same node, same run):")
    for row in rows_out[len(EXTRA) :]:
        want = ">= 1.0x" if row["metric"] == "rate" else "<= 1.0x"
        verdict = "-" if row["met"] is None else ("met" if row["met"] else "MISSED")
        lines.append(f"    {row['title']:<48} {_fmt_row(row)}  goal {want}: {verdict}")
    return "\n".join(lines), rows_out


def _fmt_row(row: dict[str, Any]) -> str:
    if row["median"] is None:
        return "-"
    return f"{row['median']:.2f}x ({row['min']:.2f}..{row['max']:.2f})"


def markdown(results: dict[str, Any], chart_name: str | None) -> str:
    """The docs/benchmarks.md section of a ratios run (between the block markers)."""
    plan, machine = results["plan"], results["machine"]
    load = results["load_average"]
    lines = [
        BLOCK_START,
        "## The three goals: interleaved medians",
        "",
        f"Run {results['started']} ({plan['name']}, {results['seconds']:.0f} s) by "
        "`python -m bench.ratios --full --docs` (`make bench-full`; `make bench` runs the quick "
        "plan and prints the same summary). One fresh single node (Liftbridge "
        f"{results['server']['liftbridge']}, embedded NATS, 127.0.0.1); {plan['reps']} "
        "repetitions in a rotating order; every client in a process of its own; each ratio "
        "is taken within one repetition and shown as median (min..max).",
        "",
        f"Machine: {machine.get('cpu_model')}, {machine.get('nproc')} cores, "
        f"{machine.get('ram_gib')} GiB, {machine.get('os')}, Python {machine.get('python')}, "
        f"{machine.get('go')}. Load average (1, 5, 15 min) {load['before']} before and "
        f"{load['after']} after: the cores were shared with other work, so single figures "
        "move a lot from run to run; the ratios, taken side by side, move less.",
        "",
        f"Sizes: publish {plan['n_pub']} x {plan['size']} B (ack LEADER, "
        f"{results.get('window', 1024)} in flight for this client: its default "
        f"`max_inflight`), one at a time {plan['n_one']}, subscribe {plan['n_sub']} x "
        f"{plan['size']} B from EARLIEST. Pipelined publishes count their acks the same way "
        "on both sides: go-liftbridge's PublishAsync calls an ack handler that counts, this "
        "client's futures get a done callback that counts (the futures are not kept), then "
        "each waits for the last ack. CPU per message: the client process's CPU time "
        "(user + system) and the server process's (Liftbridge with its embedded NATS) over "
        "the run, divided by the messages.",
        "",
    ]
    if chart_name:
        lines += [f"![ratios]({chart_name})", ""]
    lines += [
        "| goal | ratio to go-liftbridge | goal | status |",
        "|---|---:|---:|---|",
    ]
    rows = results["ratios"]
    for row in rows:
        if row["goal"]:
            want = ">= 1.0x" if row["metric"] == "rate" else "<= 1.0x"
            status = "-" if row["met"] is None else ("met" if row["met"] else "missed")
            lines.append(f"| {row['title']} | {_fmt_row(row)} | {want} | {status} |")
    lines += ["", "| side by side | ratio |", "|---|---:|"]
    lines += [f"| {row['title']} | {_fmt_row(row)} |" for row in rows if not row["goal"]]
    lines += [
        "",
        "| group | client | msgs/s median (min..max) | client CPU us/msg | "
        "server CPU us/msg | p50 us |",
        "|---|---|---:|---:|---:|---:|",
    ]
    by_name: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in results["records"]:
        if r["group"] != "slow":
            by_name.setdefault((r["group"], r["name"]), []).append(r)
    for (group, name), recs in by_name.items():
        rates = [r["msgs_per_s"] for r in recs if r.get("msgs_per_s")]
        ccpu = [r["client_cpu_us"] for r in recs if r.get("client_cpu_us") is not None]
        scpu = [r["server_cpu_us"] for r in recs]
        p50 = [r["p50_us"] for r in recs if r.get("p50_us") is not None]
        lines.append(
            f"| {group} | {name} | {_spread(rates, '{:,.0f}')} | "
            f"{statistics.median(ccpu) if ccpu else 0:.1f} | {statistics.median(scpu):.1f} | "
            f"{f'{statistics.median(p50):.0f}' if p50 else '-'} |"
        )
    slow = [r for r in results["records"] if r["group"] == "slow" and r.get("rss_growth_mib")]
    if slow:
        lines += [
            "",
            "Slow consumer (sleeps 10 ms per message; 20,000 x 1 KiB wait on the server):",
        ]
        lines += [
            f"- {r['name']}: {r['messages']} messages read, RSS +{r['rss_growth_mib']:.1f} MiB "
            f"(peak {r['rss_peak_mib']:.1f} MiB)"
            for r in slow
        ]
    lines += [
        "",
        "The sections below come from the last full `python -m bench` run (its date is at the "
        "top of the page): one run of each configuration, not interleaved, so its single "
        "ratios move more than the medians above, which are the figures to quote.",
        "",
        BLOCK_END,
    ]
    return "\n".join(lines)


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
        for r in results["records"]:
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


def _load() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ratios", description=__doc__)
    parser.add_argument("--full", action="store_true", help="more messages and repetitions")
    parser.add_argument("--reps", type=int, help="repetitions (default: 3 quick, 5 full)")
    parser.add_argument("--docs", action="store_true", help="write its section of docs/")
    parser.add_argument("--report", type=Path, help="only rewrite the docs from a results file")
    args = parser.parse_args(argv)
    if args.report:
        write_docs(json.loads(args.report.read_text()))
        return 0
    plan = RatioPlan.full() if args.full else RatioPlan.quick()
    if args.reps:
        plan = dataclasses.replace(plan, reps=args.reps)
    go = GoBench()
    go.ensure()
    started = datetime.now(UTC)
    t0 = time.monotonic()
    load_before = _load()
    print(f"==> ratios ({plan.name}): a fresh single node (Liftbridge {LIFTBRIDGE_VERSION})")
    with SingleNode() as node:
        run = RatioRun(plan, node, go)
        run.run()
    results: dict[str, Any] = {
        "started": started.isoformat(timespec="seconds"),
        "plan": {f: getattr(plan, f) for f in plan.__dataclass_fields__},
        "seconds": time.monotonic() - t0,
        "machine": machine_details(),
        "load_average": {"before": load_before, "after": _load()},
        "server": {"liftbridge": LIFTBRIDGE_VERSION, "topology": "single node, embedded NATS"},
        "window": DEFAULT_WINDOW,
        "records": run.records,
    }
    text, rows = summarize(results)
    results["ratios"] = rows
    failures = [r for r in run.records if r["problem"]]
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{started.strftime('%Y%m%dT%H%M%SZ')}-ratios-{plan.name}.json"
    path.write_text(json.dumps(results, indent=1))
    print(f"\nresults: {path.relative_to(ROOT)}  ({results['seconds']:.0f} s, load average "
          f"{load_before} before, {results['load_average']['after']} after)")  # fmt: skip
    if args.docs:
        write_docs(results)
    if failures:
        print(f"{len(failures)} run(s) FAILED (errors, lost or disordered messages)")
    print(text)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
