"""The ratios to go-liftbridge, measured so that they cannot flatter (``make bench``).

One fresh single node per run. Every contender - go-liftbridge (bench/go) and this
client - runs in a fresh process of its own, one at a time, so nothing but the server is
shared between them. What makes the ratios stable on a small shared machine:

- phases of seconds: a short warm-up run of each contender (not counted) calibrates its
  message count so that each measured phase lasts about ``phase_s`` seconds (3 s quick,
  4 s full); the contenders of a group get the same count (the largest their warm-ups
  ask for; for one at a time the median), except the grpc.aio ones, 10x slower; a
  repetition whose phases were far from ``phase_s`` (the machine got busier or quieter)
  scales the counts for the next ones;
- a balanced order: each group's contenders run in the orders of a Williams design
  (`bench.order`), and each group runs a multiple of its size in repetitions, so every
  contender runs first (and last) equally often; which group runs first rotates too;
- the same server state for every phase: each publish goes to a fresh stream, deleted
  after its stored count was checked, and a phase starts once the server is idle;
- each ratio is taken inside one repetition, then summarised as the median with min..max
  (and the quartiles in the results file).

Groups: pipelined publish (``send()`` with the client's default window, over NATS and over
gRPC h2, against go-liftbridge's PublishAsync without a barrier, go-async); subscribe
(EARLIEST to a stop offset of one pre-filled partition, h2 against go's consumer); one at a
time (p50 of ``await publish()`` against go's synchronous Publish; lower is better). The
full plan adds the side contenders: grpc.aio for publish and subscribe, go's batch-100.

A run fails (exit status 1) when a contender errors, loses or disorders a message.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import math
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import ratio_report
from bench.external import ROOT, GoBench
from bench.machine import machine_details
from bench.order import balanced_orders, balanced_reps
from bench.ours import DEFAULT_WINDOW
from liftbridge_client import Client
from liftbridge_client.options import ClientOptions
from liftbridge_client.testing import LIFTBRIDGE_VERSION, SingleNode

__all__ = ["CONTENDERS", "Contender", "RatioPlan", "RatioRun", "main"]

RAW_DIR = ROOT / "bench" / "results" / "raw"
_TICK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True, slots=True)
class RatioPlan:
    name: str
    reps: int  # at least this many repetitions per group (rounded up to a balanced count)
    phase_s: float  # each measured phase lasts about this long
    side: bool  # also the side-by-side contenders (grpc.aio, go batch-100)
    n_slow: int  # messages the slow consumer reads
    size: int = 256
    uvloop: bool = False  # also this client's publishers on uvloop's event loop

    @classmethod
    def quick(cls) -> RatioPlan:
        return cls("quick", reps=6, phase_s=3.0, side=False, n_slow=200)

    @classmethod
    def full(cls) -> RatioPlan:
        return cls("full", reps=5, phase_s=4.0, side=True, n_slow=1_000, uvloop=True)


@dataclass(frozen=True, slots=True)
class Contender:
    group: str  # "publish" | "subscribe" | "one"
    name: str
    go_mode: str | None = None  # a Go contender: its pub mode ("sub" for the consumer)
    task: dict[str, Any] | None = None  # one of ours: the bench.proc task (less target)
    side: bool = False  # only in plans with side contenders
    uvloop: bool = False  # only in plans with uvloop contenders
    slow: bool = False  # an order of magnitude slower: its own count, a smaller warm-up
    lib: Path | None = None  # bench-compare: liftbridge_client imported from this directory


CONTENDERS: tuple[Contender, ...] = (
    Contender("publish", "go-async", go_mode="async"),
    Contender("publish", "ours-nats", task={"op": "pub", "transport": "nats"}),
    Contender(
        "publish", "ours-grpc-h2", task={"op": "pub", "transport": "grpc", "stream_transport": "h2"}
    ),
    Contender("publish", "go-batch-100", go_mode="batch", side=True),
    Contender(
        "publish",
        "ours-grpc-aio",
        task={"op": "pub", "transport": "grpc", "stream_transport": "grpc"},
        side=True,
        slow=True,
    ),
    # A user's fastest configuration: the same client on uvloop's event loop.
    Contender(
        "publish",
        "ours-nats-uvloop",
        task={"op": "pub", "transport": "nats", "loop": "uvloop"},
        uvloop=True,
    ),
    Contender(
        "publish",
        "ours-grpc-h2-uvloop",
        task={"op": "pub", "transport": "grpc", "stream_transport": "h2", "loop": "uvloop"},
        uvloop=True,
    ),
    Contender("subscribe", "go-consumer", go_mode="sub"),
    Contender("subscribe", "ours-h2", task={"op": "sub", "stream_transport": "h2"}),
    Contender(
        "subscribe",
        "ours-grpc-aio",
        task={"op": "sub", "stream_transport": "grpc"},
        side=True,
        slow=True,
    ),
    Contender("one", "go-sync", go_mode="sync"),
    Contender("one", "ours-nats", task={"op": "one", "transport": "nats"}),
    Contender(
        "one", "ours-grpc-h2", task={"op": "one", "transport": "grpc", "stream_transport": "h2"}
    ),
)

# Warm-up counts (a fraction of a second each); the measured count comes from their rate.
PROBE = {"publish": 20_000, "subscribe": 50_000, "one": 1_000}
PROBE_SLOW = {"publish": 3_000, "subscribe": 10_000, "one": 300}
ROUND_TO = {"publish": 1_000, "subscribe": 1_000, "one": 100}
MAX_COUNT = 3_000_000
GROUPS = frozenset(PROBE)


def contenders_for(plan: RatioPlan, trees: dict[str, Path] | None = None) -> list[Contender]:
    """The plan's contenders; with ``trees`` (label -> liftbridge_client directory) each of
    ours that is not a side contender runs once per tree, named ``<name>@<label>``."""
    chosen = [c for c in CONTENDERS if (plan.side or not c.side) and (plan.uvloop or not c.uvloop)]
    if not trees:
        return chosen
    out: list[Contender] = []
    for c in chosen:
        if c.go_mode is not None:
            out.append(c)
        elif not c.side and not c.uvloop:
            out += [
                dataclasses.replace(c, name=f"{c.name}@{label}", lib=lib)
                for label, lib in trees.items()
            ]
    return out


def phase_count(rate: float | None, phase_s: float, group: str, slow: bool) -> int:
    """Messages for a phase of ``phase_s`` seconds at ``rate`` msgs/s (the warm-up's)."""
    low = (PROBE_SLOW if slow else PROBE)[group]
    if not rate or rate <= 0:
        return low
    step = ROUND_TO[group]
    wanted = math.ceil(rate * phase_s / step) * step
    return max(low, min(MAX_COUNT, wanted))


def _key(c: Contender) -> str:
    return f"{c.group}/{c.name}"  # names repeat across groups (ours-nats)


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
    def __init__(
        self, plan: RatioPlan, node: SingleNode, go: GoBench, contenders: list[Contender]
    ) -> None:
        self.plan = plan
        self.node = node
        self.go = go
        self.contenders = contenders
        self.records: list[dict[str, Any]] = []
        self.counts: dict[str, int] = {}  # by "group/name"
        self.reps: dict[str, int] = {}
        self._count = 0
        self.sub_stream = ""
        self._filled = 0

    def _server_pid(self) -> int | None:
        return self.node.node.process.pid

    def _admin(self) -> Client:
        return Client([self.node.address], options=ClientOptions(keepalive_time=None))

    def new_stream(self) -> str:
        self._count += 1
        name = f"ratio-{self._count}"

        async def create() -> None:
            async with self._admin() as c:
                await c.create_stream(name, name)

        asyncio.run(create())
        return name

    def stored_then_drop(self, stream: str) -> int:
        """Messages stored in a publish stream; the stream is deleted afterwards, so every
        publish phase finds the server in the same state."""

        async def check() -> int:
            async with self._admin() as c:
                stored = (await c.fetch_partition_metadata(stream)).high_watermark + 1
                await c.delete_stream(stream)
                return stored

        return asyncio.run(check())

    def fill(self, total: int) -> None:
        """Top the subscribe stream up to ``total`` messages."""
        if not self.sub_stream:
            self.sub_stream = self.new_stream()
        more = total - self._filled
        if more <= 0:
            return
        out = self.go.run(
            "pub", f"-addr={self.node.address}", f"-stream={self.sub_stream}",
            f"-n={more}", f"-size={self.plan.size}", "-mode=batch", "-batch=1000",
            "-timeout=600s",
        )  # fmt: skip
        if out.get("error") or out.get("acked") != more:
            raise SystemExit(f"filling the subscribe stream failed: {out}")
        self._filled = total

    def _run_contender(self, c: Contender, stream: str, n: int) -> dict[str, Any]:
        if c.go_mode is not None:
            if c.go_mode == "sub":
                args = ["sub", f"-counts={n}"]
            else:
                args = [
                    "pub", f"-mode={c.go_mode}", "-batch=100", f"-n={n}",
                    f"-size={self.plan.size}", "-timeout=600s",
                ]  # fmt: skip
            out = self.go.run(*args, f"-addr={self.node.address}", f"-stream={stream}")
            lat = out.pop("latencies_us", None)
            if lat and c.group == "one":
                from bench.stats import summarize_latencies

                out["latency_us"] = summarize_latencies(lat)
            return out
        assert c.task is not None
        task = {**c.task, "address": self.node.address, "nats_url": self.node.nats_url}
        task.update(stream=stream, n=n, size=self.plan.size)
        cwd, env = ROOT, None
        if c.lib is not None:
            # The library from the tree under test (first on sys.path as the working
            # directory), the harness (bench.proc, bench.ours) from this tree.
            cwd = c.lib
            env = {**os.environ, "PYTHONPATH": str(ROOT)}
        done = subprocess.run(
            [sys.executable, "-m", "bench.proc", json.dumps(task)],
            capture_output=True, text=True, check=False, cwd=cwd, env=env, timeout=900,
        )  # fmt: skip
        if done.returncode != 0:
            return {"error": done.stderr.strip()[-2000:] or f"exit {done.returncode}"}
        result: dict[str, Any] = json.loads(done.stdout)
        return result

    def settle(self, limit: float = 2.0) -> float:
        """Wait (at most ``limit`` s) until the server is idle: a phase must not pay for
        the previous one's leftovers (a deleted stream's files, the Go runtime's garbage
        collection). The seconds waited."""
        t0 = time.monotonic()
        pid = self._server_pid()
        while time.monotonic() - t0 < limit:
            before = _proc_cpu(pid)
            time.sleep(0.1)
            if _proc_cpu(pid) - before <= 0.01:  # at most 10% of a core
                break
        return time.monotonic() - t0

    def measure(self, c: Contender, rep: int, position: int, n: int) -> dict[str, Any]:
        stream = self.sub_stream if c.group == "subscribe" else self.new_stream()
        settled = self.settle()
        cpu0 = _proc_cpu(self._server_pid())
        out = self._run_contender(c, stream, n)
        server_cpu = _proc_cpu(self._server_pid()) - cpu0
        record: dict[str, Any] = {
            "group": c.group,
            "name": c.name,
            "rep": rep,
            "position": position,
            "messages": n,
            "settle_s": round(settled, 2),
        }
        problems = [str(out[k]) for k in ("error", "first_error") if out.get(k)]
        if c.group == "subscribe":
            if out.get("messages") != n:
                problems.append(f"read {out.get('messages')} of {n}")
            if out.get("out_of_order"):
                problems.append(f"{out['out_of_order']} out of order")
        else:
            if out.get("acked") != n:
                problems.append(f"{out.get('acked')} of {n} acked")
            stored = self.stored_then_drop(stream)
            if stored != n:
                problems.append(f"{stored} of {n} stored")
        seconds = float(out.get("seconds") or 0.0)
        record["seconds"] = seconds
        record["msgs_per_s"] = n / seconds if seconds and not problems else None
        if out.get("cpu_s") is not None:
            record["client_cpu_us"] = float(out["cpu_s"]) / n * 1e6
        record["server_cpu_us"] = server_cpu / n * 1e6
        if out.get("latency_us"):
            record["p50_us"] = out["latency_us"]["p50"]
            record["p99_us"] = out["latency_us"]["p99"]
        if c.lib is not None and not str(out.get("lib", "")).startswith(str(c.lib)):
            problems.append(f"ran the library in {out.get('lib')}, not {c.lib}")
        record["problem"] = "; ".join(problems) or None
        rate = record["msgs_per_s"]
        label = "warm-up" if rep < 0 else f"rep {rep + 1}"
        extra = f"p50 {record['p50_us']:.0f}us" if "p50_us" in record else ""
        print(
            f"  {label:<7} {c.group:<9} {c.name:<18} {n:>8} in {seconds:5.2f}s "
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
        self.stored_then_drop(stream)  # the MiBs it holds are not the other phases' business

    def calibrate(self) -> None:
        """One warm-up phase per contender (recorded as rep -1, never summarised); its
        rate sets the contender's count for phases of ``phase_s`` seconds."""
        plan = self.plan
        self.fill(max(PROBE["subscribe"], PROBE_SLOW["subscribe"]))
        wanted: dict[str, int] = {}
        for c in self.contenders:
            probe = (PROBE_SLOW if c.slow else PROBE)[c.group]
            record = self.measure(c, -1, 0, probe)
            self.records.append(record)
            wanted[_key(c)] = phase_count(record["msgs_per_s"], plan.phase_s, c.group, c.slow)
        # Contenders of a group that are not `slow` share one count, so the close ratios
        # compare the same work: the largest their warm-ups ask for (a warm-up runs cold,
        # so its rate is low), but for one at a time, whose contenders differ 2-3x in
        # latency, the median.
        for group in {c.group for c in self.contenders}:
            fast = [wanted[_key(c)] for c in self.contenders if c.group == group and not c.slow]
            step = ROUND_TO[group]
            pick = statistics.median if group == "one" else max
            shared = math.ceil(pick(fast) / step) * step if fast else 0
            for c in self.contenders:
                if c.group == group:
                    self.counts[_key(c)] = wanted[_key(c)] if c.slow else shared
        subs = [self.counts[_key(c)] for c in self.contenders if c.group == "subscribe"]
        if subs:
            print(f"  filling the subscribe stream to {max(subs):,} messages", flush=True)
            self.fill(max(subs))

    def run(self) -> None:
        self.slow_consumers()
        self.calibrate()
        groups: dict[str, list[Contender]] = {}
        for c in self.contenders:
            groups.setdefault(c.group, []).append(c)
        orders = {
            g: balanced_orders(members, balanced_reps(len(members), self.plan.reps))
            for g, members in groups.items()
        }
        self.reps = {g: len(rows) for g, rows in orders.items()}
        names = list(orders)
        for rep in range(max(self.reps.values(), default=0)):
            k = rep % len(names)
            for group in names[k:] + names[:k]:  # which group runs first rotates too
                if rep >= len(orders[group]):
                    continue
                measured = [
                    self.measure(c, rep, position, self.counts[_key(c)])
                    for position, c in enumerate(orders[group][rep])
                ]
                self.records.extend(measured)
                self.rescale(group, measured)

    def rescale(self, group: str, measured: list[dict[str, Any]]) -> None:
        """Counts that gave phases far from ``phase_s`` (the warm-up ran on a machine
        busier or quieter than now) are scaled for the next repetitions. Every contender
        of the group keeps the same count, so ratios within a repetition compare the
        same work."""
        by_name = {r["name"]: r for r in measured}
        slow = [c for c in self.contenders if c.group == group and c.slow]
        for c in slow:  # each its own count: scaled by its own phase
            self._scale(group, [c], [by_name.get(c.name, {})])
        fast = [c for c in self.contenders if c.group == group and not c.slow]
        self._scale(group, fast, [by_name.get(c.name, {}) for c in fast])
        if group == "subscribe":
            self.fill(max(self.counts[_key(c)] for c in self.contenders if c.group == group))

    def _scale(self, group: str, members: list[Contender], measured: list[dict[str, Any]]) -> None:
        seconds = [r["seconds"] for r in measured if r.get("seconds") and not r.get("problem")]
        if not seconds:
            return
        factor = self.plan.phase_s / statistics.median(seconds)
        # Short phases are what makes ratios jump: those are corrected from 0.6 of the
        # planned length; long ones only cost time, and only from twice the length (the
        # load of a shared machine swings, so a tight band would chase it).
        if 0.5 <= factor <= 1 / 0.6:
            return
        factor = min(factor, 3.0)  # one noisy repetition must not make phases endless
        step = ROUND_TO[group]
        for c in members:
            key = _key(c)
            wanted = math.ceil(self.counts[key] * factor / step) * step
            self.counts[key] = max((PROBE_SLOW if c.slow else PROBE)[group], wanted)
        names = ", ".join(c.name for c in members)
        print(f"  {group} ({names}): phases of {statistics.median(seconds):.2f} s, x{factor:.2f}")


def parse_groups(text: str) -> set[str]:
    groups = {g.strip() for g in text.split(",") if g.strip()}
    if not groups or not groups <= GROUPS:
        raise SystemExit(f"groups must be among {', '.join(sorted(GROUPS))}: {text!r}")
    return groups


def _load() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def measure_run(
    plan: RatioPlan,
    trees: dict[str, Path] | None = None,
    *,
    groups: set[str] | None = None,
    go: GoBench | None = None,
) -> dict[str, Any]:
    """One run on a fresh node (``groups``: only those); its results."""
    if go is None:
        go = GoBench()
        go.ensure()
    started = datetime.now(UTC)
    t0 = time.monotonic()
    load_before = _load()
    commit = ratio_report.git_commit()  # what is measured: the tree as the run starts
    contenders = [c for c in contenders_for(plan, trees) if groups is None or c.group in groups]
    print(
        f"==> ratios ({plan.name}, phases of ~{plan.phase_s:g} s): a fresh single node "
        f"(Liftbridge {LIFTBRIDGE_VERSION})",
        flush=True,
    )
    with SingleNode() as node:
        run = RatioRun(plan, node, go, contenders)
        run.run()
    results: dict[str, Any] = {
        "started": started.isoformat(timespec="seconds"),
        "plan": {f: getattr(plan, f) for f in plan.__dataclass_fields__},
        "reps": run.reps,
        "counts": run.counts,
        "seconds": time.monotonic() - t0,
        "machine": machine_details(),
        "load_average": {"before": load_before, "after": _load()},
        "server": {"liftbridge": LIFTBRIDGE_VERSION, "topology": "single node, embedded NATS"},
        "window": DEFAULT_WINDOW,
        "commit": commit,
        "records": run.records,
    }
    if trees:
        results["trees"] = {label: str(lib) for label, lib in trees.items()}
    results["ratios"] = ratio_report.ratio_rows(results)
    return results


def write_raw(results: dict[str, Any], kind: str) -> Path:
    RAW_DIR.mkdir(parents=True, exist_ok=True)
    stamp = results["started"].replace("-", "").replace(":", "").replace("+0000", "Z")
    path = RAW_DIR / f"{stamp}-{kind}.json"
    path.write_text(json.dumps(results, indent=1))
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ratios", description=__doc__)
    parser.add_argument("--full", action="store_true", help="longer phases, side contenders")
    parser.add_argument("--reps", type=int, help="at least this many repetitions per group")
    parser.add_argument("--phase", type=float, help="seconds per measured phase")
    parser.add_argument(
        "--uvloop", action="store_true", help="also publish on uvloop (in the full plan)"
    )
    parser.add_argument(
        "--groups", help="comma-separated groups to measure (publish, subscribe, one); all"
    )
    parser.add_argument("--docs", action="store_true", help="write its section of docs/")
    parser.add_argument("--report", type=Path, help="only rewrite the docs from a results file")
    parser.add_argument(
        "--no-save", action="store_true", help="keep no summary in bench/results/<commit>.json"
    )
    args = parser.parse_args(argv)
    if args.report:
        ratio_report.write_docs(json.loads(args.report.read_text()))
        return 0
    plan = RatioPlan.full() if args.full else RatioPlan.quick()
    if args.reps:
        plan = dataclasses.replace(plan, reps=args.reps)
    if args.phase:
        plan = dataclasses.replace(plan, phase_s=args.phase)
    if args.uvloop:
        plan = dataclasses.replace(plan, uvloop=True)
    groups = parse_groups(args.groups) if args.groups else None
    if groups is not None and args.docs:
        parser.error("--docs needs every group")
    results = measure_run(plan, groups=groups)
    path = write_raw(results, f"ratios-{plan.name}")
    print(
        f"\nresults: {path.relative_to(ROOT)}  ({results['seconds']:.0f} s, load average "
        f"{results['load_average']['before']} before, {results['load_average']['after']} after)"
    )
    if not args.no_save:
        saved = ratio_report.save_summary(results)
        print(f"summary: {saved.relative_to(ROOT)}")
    if args.docs:
        ratio_report.write_docs(results)
    failures = [r for r in results["records"] if r.get("problem")]
    if failures:
        print(f"{len(failures)} run(s) FAILED (errors, lost or disordered messages)")
    print(ratio_report.summarize(results))
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
