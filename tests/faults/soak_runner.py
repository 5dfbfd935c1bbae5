"""The cluster side of a soak, run inside a private network and PID namespace.

    cd tests && unshare --net --pid --kill-child -- env LIFTBRIDGE_PARENT_NETNS=<inode> \
        python -m faults.soak_runner --out DIR --seconds S --interval I

(``faults.soak`` builds that command.) Starts an AddressedCluster (3 nodes, NATS, each on
its own loopback address, the harness's failover timeouts, consumer-group timeouts of
3 s), creates the streams (plain: 3 partitions, exactly-once: 2; replication 3, min ISR
2), starts the client under test as a process of its own (faults.soak_client), and while
it runs applies one fault every ``--every`` seconds (drawn between 0.75x and 1.25x),
cycling through ``--kinds`` (kill-leader, isolate-leader, pause-leader by default), each
for ``--fault-s`` seconds, healed, then waits for a full ISR. The last fault is healed
well before the client stops publishing. Every interval it samples each server's RSS and
open descriptors into ``servers.jsonl``; faults go to ``nemesis.jsonl`` (the fault
suite's history format).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from faults.fault_history import Recorder, error_name
from faults.fault_nemesis import Nemesis
from faults.fault_runner import wait_full_isr
from faults.fault_workloads import OPTIONS, Streams
from liftbridge_client import Client, StreamConfig
from liftbridge_client.testing import GROUP_SETTINGS, AddressedCluster

DEFAULT_KINDS = ("kill-leader", "isolate-leader", "pause-leader")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--interval", type=float, default=30.0)
    parser.add_argument("--every", type=float, default=75.0, help="mean seconds between faults")
    parser.add_argument("--first", type=float, default=None, help="first fault after (s)")
    parser.add_argument("--fault-s", type=float, default=10.0)
    parser.add_argument("--kinds", default=",".join(DEFAULT_KINDS))
    parser.add_argument("--rate", type=float, default=200.0, help="plain messages per second")
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--eo-rate", type=float, default=20.0, help="0: no exactly-once")
    parser.add_argument("--no-group", action="store_true")
    parser.add_argument("--version", default="v1.9.0")
    parser.add_argument("--seed", type=int, default=None)
    return parser.parse_args(argv)


def _ns_pid_map() -> dict[int, int]:
    """PIDs of this PID namespace -> the same processes' PIDs in /proc.

    The namespace has no /proc of its own (no mount namespace: the fault harness reads
    the host's /proc/1), so /proc lists processes by their outer PID; the ``NSpid`` line
    of each status gives the inner one.
    """
    own = os.stat("/proc/self/ns/pid").st_ino
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.stat(f"/proc/{entry}/ns/pid").st_ino != own:
                continue
            with open(f"/proc/{entry}/status") as handle:
                for line in handle:
                    if line.startswith("NSpid:"):
                        found[int(line.split()[-1])] = int(entry)
                        break
        except OSError:
            continue  # it ended meanwhile, or is not ours to read
    return found


def _figures(proc_pid: int) -> dict[str, Any]:
    try:
        with open(f"/proc/{proc_pid}/status") as handle:
            rss = next(int(line.split()[1]) for line in handle if line.startswith("VmRSS:"))
        return {"rss_mib": round(rss / 1024, 1), "fds": len(os.listdir(f"/proc/{proc_pid}/fd"))}
    except (OSError, StopIteration):
        return {"rss_mib": None, "fds": None}


def server_figures(cluster: AddressedCluster) -> dict[str, dict[str, Any]]:
    """RSS (MiB) and open descriptors of NATS and each node (None while down)."""
    pids = _ns_pid_map()
    out = {}
    nats = cluster.nats_servers
    named = [("nats" if len(nats) == 1 else f"nats{i}", s) for i, s in enumerate(nats, 1)]
    for name, server in [*named, *((n.server_id, n) for n in cluster.nodes)]:
        pid = server.process.pid
        running = server.process.running
        outer = pids.get(pid) if pid is not None and running else None
        out[name] = _figures(outer) if outer is not None else {"rss_mib": None, "fds": None}
    return out


async def soak(cluster: AddressedCluster, args: argparse.Namespace) -> int:
    rng = random.Random(args.seed)
    history = Recorder(args.out / "nemesis.jsonl")
    token = f"{rng.randrange(16**6):06x}"
    streams = Streams(f"soak-{token}", 3, f"soak-eo-{token}", 2 if args.eo_rate > 0 else 0)
    async with Client(cluster.addresses, nats_servers=[cluster.nats_url], options=OPTIONS) as admin:
        for name, partitions in ((streams.plain, 3), (streams.eo, streams.eo_partitions)):
            if partitions:
                await admin.create_stream(
                    f"soak.{name}",
                    name,
                    StreamConfig(partitions=partitions, replication_factor=3, min_isr=2),
                )
        if late := await wait_full_isr(admin, streams, 60):
            raise RuntimeError(f"ISR never full after creating the streams: {late}")
        config = {
            "brokers": cluster.addresses,
            "nats_url": cluster.nats_url,
            "stream": streams.plain,
            "partitions": 3,
            "eo_stream": streams.eo if args.eo_rate > 0 else None,
            "eo_rate": args.eo_rate,
            "group": not args.no_group,
            "rate": args.rate,
            "workers": args.workers,
            "seconds": args.seconds,
            "interval": args.interval,
            "tracemalloc": bool(os.environ.get("SOAK_TRACEMALLOC")),
        }
        (args.out / "client-config.json").write_text(json.dumps(config, indent=1))
        history.emit("note", f="setup", data=config)
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        with (args.out / "client.log").open("w") as log:
            client = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "faults.soak_client",
                "--config",
                str(args.out / "client-config.json"),
                "--out",
                str(args.out),
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
            )
        sampler = asyncio.create_task(sample_servers(cluster, args, history))
        nemesis = Nemesis(cluster, admin, history, streams.plain, rng)
        kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
        started = time.monotonic()
        # The last fault is healed, and the cluster whole again, before the client stops.
        last_start = args.seconds - args.fault_s - 20
        wait = args.first if args.first is not None else args.every * rng.uniform(0.75, 1.25)
        cycle = 0
        try:
            while client.returncode is None:
                elapsed = time.monotonic() - started
                if elapsed + wait > last_start:
                    break
                await asyncio.sleep(wait)
                if client.returncode is not None:
                    break
                kind = kinds[cycle % len(kinds)]
                cycle += 1
                active = await nemesis.start(kind)
                FAULTS.update(active=kind, interval=kind)
                try:
                    await asyncio.sleep(args.fault_s)
                finally:
                    nemesis.heal(active)
                    FAULTS["active"] = ""
                healed = time.monotonic()
                late = await wait_full_isr(admin, streams, 60)
                history.emit(
                    "note",
                    f="recovered" if not late else "not-recovered",
                    data={"seconds": round(time.monotonic() - healed, 2), "late": late},
                )
                wait = max(1.0, args.every * rng.uniform(0.75, 1.25) - args.fault_s)
        finally:
            nemesis.heal_all()
        bound = args.seconds + 300  # its catch-up (120 s) and close are bounded too
        try:
            await asyncio.wait_for(client.wait(), max(1.0, bound - (time.monotonic() - started)))
        except TimeoutError:
            client.kill()
            history.emit("note", f="client-killed", error=f"still running after {bound} s")
        status = await client.wait()
        sampler.cancel()
        await asyncio.gather(sampler, return_exceptions=True)
        history.emit("note", f="client-exit", data={"status": status})
        history.close()
        return status


# The fault in effect now, and the one started in the current interval (the next server
# sample reports either).
FAULTS = {"active": "", "interval": ""}


async def sample_servers(
    cluster: AddressedCluster, args: argparse.Namespace, history: Recorder
) -> None:
    started = time.monotonic()
    with (args.out / "servers.jsonl").open("a", buffering=1) as log:
        while True:
            await asyncio.sleep(args.interval)
            try:
                servers = await asyncio.to_thread(server_figures, cluster)
            except Exception as exc:  # a sample is worth less than the run
                history.emit("note", f="sample", error=error_name(exc))
                continue
            row = {
                "t": round(time.monotonic() - started, 2),
                "wall": time.time(),
                "servers": servers,
                "fault": FAULTS["interval"] or FAULTS["active"],
            }
            FAULTS["interval"] = ""
            log.write(json.dumps(row) + "\n")


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args.seed is None:
        args.seed = random.randrange(2**32)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "runner-args.json").write_text(
        json.dumps({k: str(v) for k, v in vars(args).items()}, indent=1)
    )
    servers = args.out / "servers"
    cluster = AddressedCluster(
        3, base_dir=servers, settings=dict(GROUP_SETTINGS), version=args.version, log_level="info"
    )
    status = 1
    try:
        cluster.start(timeout=60)
        status = asyncio.run(soak(cluster, args))
    finally:
        exits = cluster.unexpected_exits()
        if exits:
            (args.out / "server-exits.json").write_text(json.dumps(exits, default=str))
        cluster.close()
        for node in cluster.nodes:
            shutil.rmtree(node.data_dir, ignore_errors=True)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
