"""The benchmark run: one fresh single node, every client against it, one results file.

The run never fails on a number. It fails (exit status 1) only when a client errors or
loses messages: every publish run uses a fresh stream whose partitions' high watermarks must
add up to the messages published (and every ack must have arrived), and every subscribe run
must read every offset in order.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import ours, report
from bench.external import GUFO_VERSION, ROOT, GoBench, Gufo
from bench.machine import machine_details
from bench.stats import mb_per_s, per_second, summarize_latencies
from liftbridge_client import Client, StreamConfig
from liftbridge_client.options import ClientOptions, StreamTransport, Transport
from liftbridge_client.testing import LIFTBRIDGE_VERSION, SingleNode

__all__ = ["Plan", "main"]

RESULTS_DIR = ROOT / "bench" / "results" / "raw"  # git-ignored; summaries sit one level up

OURS = "liftbridge-client"
GO = "go-liftbridge"
GUFO = "gufo-liftbridge"


@dataclass(frozen=True, slots=True)
class Plan:
    """How much to measure."""

    name: str
    sizes: tuple[int, ...]
    partitions: tuple[int, ...]
    acks: tuple[str, ...]
    n_pipelined: int
    n_one: int
    rates: tuple[int, ...]
    rate_seconds: float
    n_subscribe: int
    in_flight: int = 10_000
    profile: bool = False

    @classmethod
    def quick(cls) -> Plan:
        return cls("quick", (256,), (1,), ("LEADER",), 20_000, 1_000, (1_000, 10_000), 1.0, 50_000)

    @classmethod
    def full(cls) -> Plan:
        return cls(
            "full",
            (256, 1024),
            (1, 3),
            ("LEADER", "ALL"),
            50_000,
            3_000,
            (1_000, 10_000),
            5.0,
            1_000_000,
            profile=True,
        )


class Run:
    """One benchmark run against one node."""

    def __init__(self, plan: Plan, node: SingleNode, go: GoBench, gufo: Gufo) -> None:
        self.plan = plan
        self.node = node
        self.go = go
        self.gufo = gufo
        self.records: list[dict[str, Any]] = []
        self.profiles: dict[str, Any] = {}
        self._names = itertools.count(1)
        self.sub_stream: str | None = None
        options = ClientOptions(keepalive_time=None)
        self.admin = Client([node.address], options=options)

    # ------------------------------------------------------------ helpers

    async def new_stream(self, partitions: int) -> str:
        name = f"bench-{next(self._names)}"
        await self.admin.create_stream(name, name, StreamConfig(partitions=partitions))
        return name

    async def stored(self, stream: str, partitions: int, expect: int, wait: float = 0.0) -> int:
        """Messages stored in the stream (sum of high watermark + 1), waiting up to ``wait``."""
        deadline = time.monotonic() + wait
        while True:
            total = 0
            for p in range(partitions):
                info = await self.admin.fetch_partition_metadata(stream, p)
                total += info.high_watermark + 1
            if total >= expect or time.monotonic() >= deadline:
                return total
            await asyncio.sleep(0.1)

    def target(self, stream: str, partitions: int) -> ours.Target:
        return ours.Target(self.node.address, self.node.nats_url, stream, partitions)

    def add(self, record: dict[str, Any]) -> dict[str, Any]:
        self.records.append(record)
        status = "ok" if record["ok"] else f"FAILED: {record['problem']}"
        rate = record.get("msgs_per_s")
        lat = record.get("latency_us") or {}
        parts = [
            f"{record['kind']:<9} {record['client']:<17} {record['mode']:<15}",
            f"{record.get('size', '')!s:>5}B p{record.get('partitions', '')}",
            str(record.get("ack", "")),
        ]
        if record["kind"] == "latency":
            parts.append(f"@{record['rate']}/s")
        if rate:
            parts.append(f"{rate:,.0f} msg/s")
        if lat:
            parts.append(f"p50 {lat['p50']:.0f}us p99 {lat['p99']:.0f}us")
        print("  ".join(parts) + f"  {status}", flush=True)
        return record

    async def measure(
        self,
        base: dict[str, Any],
        work: Callable[[], Awaitable[dict[str, Any]]],
    ) -> dict[str, Any]:
        """Run ``work``; an exception becomes the record's problem."""
        try:
            out = await work()
        except Exception as exc:
            return {**base, "ok": False, "problem": f"{type(exc).__name__}: {exc}"}
        return {**base, **out}

    async def finish_publish(
        self,
        record: dict[str, Any],
        stream: str,
        *,
        expect_acks: bool = True,
        extra_stored: int = 0,
    ) -> dict[str, Any]:
        """Fill throughput and latency figures and check that nothing was lost."""
        n = record["messages"]
        problems = [record["problem"]] if record.get("problem") else []
        if record.get("error"):
            problems.append(str(record.pop("error")))
        if record.get("errors"):
            problems.append(f"{record['errors']} errors, first: {record.get('first_error')}")
        seconds = record.get("seconds") or 0.0
        record["msgs_per_s"] = per_second(n, seconds)
        record["mb_per_s"] = mb_per_s(n, record.get("size", 0), seconds)
        lat = record.pop("latencies_us", None)
        if lat:
            record["latency_us"] = summarize_latencies(lat)
        cpu = record.pop("cpu_s", None)
        if cpu is not None and n:
            record["cpu_us_per_msg"] = cpu / n * 1e6
        if expect_acks and record.get("acked") != n:
            problems.append(f"{record.get('acked')} of {n} acked")
        try:
            expect = n + extra_stored
            record["stored"] = await self.stored(
                stream, record.get("partitions", 1), expect, wait=0.0 if expect_acks else 10.0
            )
            if record["stored"] != expect:
                problems.append(f"{record['stored']} of {expect} stored")
        except Exception as exc:
            problems.append(f"verification failed: {exc!r}")
        record["ok"] = not problems
        record["problem"] = "; ".join(problems) or None
        return self.add(record)

    # ------------------------------------------------------------ publish throughput

    async def publish_matrix(self) -> None:
        plan = self.plan
        for size, parts, ack in itertools.product(plan.sizes, plan.partitions, plan.acks):
            cfg = {"kind": "publish", "size": size, "partitions": parts, "ack": ack}
            await self.go_publish(cfg, "sync", plan.n_one)
            await self.go_publish(cfg, "go-async", plan.n_pipelined)  # the pipelined anchor
            await self.go_publish(cfg, "batch-100", plan.n_pipelined)
            rows: tuple[tuple[Transport, StreamTransport, str], ...] = (
                (Transport.NATS, StreamTransport.GRPC, "nats"),
                (Transport.GRPC, StreamTransport.GRPC, "grpc"),
                (Transport.GRPC, StreamTransport.H2, "grpc-h2"),
            )
            for transport, stream_transport, label in rows:
                await self.ours_publish(
                    cfg, f"{label}-pipelined", transport, plan.n_pipelined, stream_transport
                )
                await self.ours_publish(
                    cfg, f"{label}-one", transport, plan.n_one, stream_transport
                )
            await self.gufo_publish(cfg, "publish", plan.n_one)
            await self.gufo_publish(cfg, "publish_bulk", plan.n_pipelined)

    async def go_publish(self, cfg: dict[str, Any], mode: str, n: int) -> None:
        stream = await self.new_stream(cfg["partitions"])
        go_mode = {"batch-100": "batch", "go-async": "async"}.get(mode, mode)
        args = [
            "pub",
            f"-addr={self.node.address}",
            f"-stream={stream}",
            f"-n={n}",
            f"-size={cfg['size']}",
            f"-partitions={cfg['partitions']}",
            f"-ack={cfg['ack'].lower()}",
            f"-mode={go_mode}",
            "-batch=100",
        ]
        out = await asyncio.to_thread(self.go.run, *args)
        record = {**cfg, "client": GO, "mode": mode, "messages": n, **_go_fields(out)}
        await self.finish_publish(record, stream)

    async def ours_publish(
        self,
        cfg: dict[str, Any],
        mode: str,
        transport: Transport,
        n: int,
        stream_transport: StreamTransport = StreamTransport.GRPC,
    ) -> None:
        stream = await self.new_stream(cfg["partitions"])
        target = self.target(stream, cfg["partitions"])
        base = {**cfg, "client": OURS, "mode": mode, "messages": n}
        if mode.endswith("pipelined"):
            base["window"] = ours.DEFAULT_WINDOW
            record = await self.measure(
                base,
                lambda: ours.publish_pipelined(
                    target, transport, n, cfg["size"], cfg["ack"], stream_transport=stream_transport
                ),
            )
        else:
            record = await self.measure(
                base,
                lambda: ours.publish_one(
                    target, transport, n, cfg["size"], cfg["ack"], stream_transport=stream_transport
                ),
            )
        await self.finish_publish(record, stream)

    async def gufo_publish(self, cfg: dict[str, Any], op: str, n: int) -> None:
        stream = await self.new_stream(cfg["partitions"])
        task = {"op": op, "stream": stream, "n": n, "size": cfg["size"]}
        task.update(partitions=cfg["partitions"], ack=cfg["ack"])
        (out,) = await asyncio.to_thread(self.gufo.run, self.node.address, [task])
        out.pop("task", None)
        out.pop("traceback", None)
        record = {**cfg, "client": GUFO, "mode": op, "messages": n, **out}
        if op == "publish":
            record["note"] = "unary Publish without a deadline: the server sends no ack"
        if out.get("async_errors"):
            record["problem"] = f"{out['async_errors']} asyncError responses"
        await self.finish_publish(record, stream, expect_acks=op != "publish")

    # ------------------------------------------------------------ latency at fixed rates

    async def latency(self) -> None:
        for rate in self.plan.rates:
            n = int(rate * self.plan.rate_seconds)
            cfg = {"kind": "latency", "size": 256, "partitions": 1, "ack": "LEADER", "rate": rate}
            stream = await self.new_stream(1)
            args = ["pub", f"-addr={self.node.address}", f"-stream={stream}", f"-n={n}"]
            args += ["-size=256", "-mode=rate", f"-rate={rate}"]
            out = await asyncio.to_thread(self.go.run, *args)
            record = {**cfg, "client": GO, "mode": "async", "messages": n, **_go_fields(out)}
            await self.finish_latency(record, stream)
            for transport in (Transport.NATS, Transport.GRPC):
                stream = await self.new_stream(1)
                target = self.target(stream, 1)
                base = {**cfg, "client": OURS, "mode": transport.name.lower(), "messages": n}
                record = await self.measure(
                    base,
                    lambda t=target, tr=transport, r=rate, k=n: ours.publish_rate(t, tr, k, 256, r),  # type: ignore[misc]
                )
                await self.finish_latency(record, stream)
            stream = await self.new_stream(1)
            task = {"op": "rate", "stream": stream, "n": n, "size": 256, "rate": rate}
            (out,) = await asyncio.to_thread(self.gufo.run, self.node.address, [task])
            out.pop("task", None)
            out.pop("traceback", None)
            record = {**cfg, "client": GUFO, "mode": "publish_bulk", "messages": n, **out}
            await self.finish_latency(record, stream)

    async def finish_latency(self, record: dict[str, Any], stream: str) -> None:
        await self.finish_publish(record, stream)
        record["achieved_rate"] = record.pop("msgs_per_s", None)
        record.pop("mb_per_s", None)

    # ------------------------------------------------------------ subscribe

    async def subscribe(self) -> None:
        n = self.plan.n_subscribe
        stream = await self.new_stream(1)
        print(f"==> filling {stream} with {n:,} messages of 256 B (go-liftbridge)", flush=True)
        args = ["pub", f"-addr={self.node.address}", f"-stream={stream}", f"-n={n}"]
        args += ["-size=256", "-mode=batch", "-batch=1000", "-timeout=600s"]
        out = await asyncio.to_thread(self.go.run, *args, timeout=900)
        if out.get("error") or out.get("acked") != n:
            self.add(
                {
                    "kind": "subscribe",
                    "client": GO,
                    "mode": "fill",
                    "ok": False,
                    "problem": f"filling the stream failed: {out.get('error') or out.get('acked')}",
                }
            )
            return
        base = {"kind": "subscribe", "size": 256, "partitions": 1, "messages": n}
        self.sub_stream = stream
        out = await asyncio.to_thread(
            self.go.run, "sub", f"-addr={self.node.address}", f"-stream={stream}", f"-counts={n}"
        )
        self.finish_subscribe({**base, "client": GO, "mode": "earliest", **_go_fields(out)}, n)
        for stream_transport, mode in (("h2", "earliest-h2"), ("grpc", "earliest")):
            # In a process of its own, as the Go consumer runs in its own.
            task: dict[str, Any] = {"op": "sub", "stream": stream, "n": n}
            task.update(address=self.node.address, nats_url=self.node.nats_url)
            task["stream_transport"] = stream_transport
            record = await self.measure(
                {**base, "client": OURS, "mode": mode},
                lambda t=task: _proc(t),  # type: ignore[misc]
            )
            self.finish_subscribe(record, n)
        task = {"op": "sub", "stream": stream, "counts": [n], "timeout": 900}
        (out,) = await asyncio.to_thread(self.gufo.run, self.node.address, [task])
        out.pop("task", None)
        out.pop("traceback", None)
        self.finish_subscribe({**base, "client": GUFO, "mode": "earliest", **out}, n)

    def finish_subscribe(self, record: dict[str, Any], n: int) -> None:
        problems = [str(p) for p in (record.get("problem"), record.pop("error", None)) if p]
        got = record.pop("messages", None)
        record["messages"] = n
        if got != n:
            problems.append(f"read {got} of {n}")
        if record.get("out_of_order"):
            problems.append(f"{record['out_of_order']} out of order")
        seconds = record.get("seconds") or 0.0
        record["msgs_per_s"] = per_second(n, seconds) if not problems else None
        record["mb_per_s"] = mb_per_s(n, 256, seconds) if not problems else None
        cpu = record.pop("cpu_s", None)
        if cpu is not None:
            record["cpu_us_per_msg"] = cpu / n * 1e6
        record["ok"] = not problems
        record["problem"] = "; ".join(problems) or None
        self.add(record)

    # ------------------------------------------------------------ resources and profiles

    async def resources(self) -> None:
        n = self.plan.in_flight
        stream = await self.new_stream(1)
        argv = [sys.executable, "-m", "bench.rss", self.node.address, self.node.nats_url]
        argv += [stream, str(n), "256"]
        done = await asyncio.to_thread(
            subprocess.run, argv, capture_output=True, text=True, check=False, cwd=ROOT
        )
        base = {"kind": "resources", "client": OURS, "mode": "nats-burst", "size": 256}
        base.update(partitions=1, ack="LEADER", messages=n)
        if done.returncode != 0:
            self.add({**base, "ok": False, "problem": done.stderr.strip()[-2000:]})
            return
        out = json.loads(done.stdout)
        record = {**base, **out}
        await self.finish_publish(record, stream, extra_stored=1)

    async def profile(self) -> None:
        from bench import profiling

        n = min(self.plan.n_pipelined, 30_000)
        stream = await self.new_stream(1)
        target = self.target(stream, 1)
        print("==> profiling pipelined NATS and gRPC publish, and subscribe (cProfile)", flush=True)
        try:
            self.profiles["publish_nats_pipelined"] = await profiling.profile(
                lambda: ours.publish_pipelined(target, Transport.NATS, n, 256, "LEADER"), n
            )
            grpc_n = min(n, 10_000)
            grpc_stream = await self.new_stream(1)
            grpc_target = self.target(grpc_stream, 1)
            self.profiles["publish_grpc_pipelined"] = await profiling.profile(
                lambda: ours.publish_pipelined(grpc_target, Transport.GRPC, grpc_n, 256, "LEADER"),
                grpc_n,
            )
            sub_stream = self.sub_stream or stream
            count = min(self.plan.n_subscribe, 200_000) if sub_stream != stream else n
            sub_target = self.target(sub_stream, 1)
            self.profiles["subscribe"] = await profiling.profile(
                lambda: ours.subscribe(sub_target, [count]), count
            )
        except Exception as exc:
            self.profiles["error"] = f"{type(exc).__name__}: {exc}"

    # ------------------------------------------------------------ all

    async def run(self, sections: set[str]) -> None:
        await self.admin.connect()
        try:
            if "publish" in sections:
                await self.publish_matrix()
            if "latency" in sections:
                await self.latency()
            if "subscribe" in sections:
                await self.subscribe()
            if "resources" in sections:
                await self.resources()
            if self.plan.profile and "profile" in sections:
                await self.profile()
        finally:
            await self.admin.close()


async def _proc(task: dict[str, Any]) -> dict[str, Any]:
    """One measurement of this client in a child process (bench/proc.py)."""
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "bench.proc", json.dumps(task)],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
        timeout=900,
    )
    if done.returncode != 0:
        raise RuntimeError(done.stderr.strip()[-2000:] or f"exit status {done.returncode}")
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def _go_fields(out: dict[str, Any]) -> dict[str, Any]:
    """The Go program's output as record fields."""
    fields = {k: v for k, v in out.items() if k not in {"client", "op", "mode", "messages"}}
    if out.get("first_error"):
        fields["problem"] = out["first_error"]
    if "messages" in out and "acked" not in out:
        fields["messages_read"] = out["messages"]
    if out.get("op") == "sub":
        fields["messages"] = out["messages"]
    return fields


SECTIONS = ("publish", "latency", "subscribe", "resources", "profile")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a run under a minute")
    parser.add_argument("--profile", action="store_true", help="also profile (full mode does)")
    parser.add_argument(
        "--only", default=",".join(SECTIONS), help=f"comma list of {','.join(SECTIONS)}"
    )
    parser.add_argument(
        "--docs", action="store_true", help="write docs/benchmarks.md (full mode always does)"
    )
    parser.add_argument("--report", type=Path, help="only regenerate docs from a results file")
    args = parser.parse_args(argv)
    if args.report:
        report.write_docs(json.loads(args.report.read_text()))
        return 0
    plan = Plan.quick() if args.quick else Plan.full()
    if args.profile:
        plan = Plan(**{**_plan_dict(plan), "profile": True})
    sections = {s.strip() for s in args.only.split(",") if s.strip()}
    go, gufo = GoBench(), Gufo()
    go.ensure()
    gufo.ensure()
    started = datetime.now(UTC)
    t0 = time.monotonic()
    print(f"==> {plan.name} run: starting a single node (Liftbridge {LIFTBRIDGE_VERSION})")
    with SingleNode() as node:
        run = Run(plan, node, go, gufo)
        asyncio.run(run.run(sections))
    results: dict[str, Any] = {
        "started": started.isoformat(timespec="seconds"),
        "plan": _plan_dict(plan),
        "seconds": time.monotonic() - t0,
        "machine": machine_details(),
        "server": {"liftbridge": LIFTBRIDGE_VERSION, "topology": "single node, embedded NATS"},
        "clients": {
            OURS: _our_version(),
            GO: "v2.4.0 (bench/go)",
            GUFO: GUFO_VERSION,
        },
        "records": run.records,
        "profiles": run.profiles,
    }
    results["failures"] = [r for r in run.records if not r["ok"]]
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{started.strftime('%Y%m%dT%H%M%SZ')}-{plan.name}.json"
    path.write_text(json.dumps(results, indent=1))
    print()
    print(report.summary(results))
    print(f"\nresults: {path.relative_to(ROOT)}  ({results['seconds']:.0f} s)")
    if args.docs or plan.name == "full":
        report.write_docs(results)
    if results["failures"]:
        print(f"\n{len(results['failures'])} run(s) FAILED (errors or lost messages):")
        for r in results["failures"]:
            print(f"  {r['kind']} {r['client']} {r['mode']}: {r['problem']}")
        return 1
    return 0


def _plan_dict(plan: Plan) -> dict[str, Any]:
    return {f: getattr(plan, f) for f in plan.__dataclass_fields__}


def _our_version() -> str:
    from liftbridge_client import _version

    version = str(getattr(_version, "__version__", "?"))
    done = subprocess.run(
        ["git", "describe", "--always", "--dirty"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    commit = done.stdout.strip()
    return f"{version} (git {commit})" if done.returncode == 0 and commit else version
