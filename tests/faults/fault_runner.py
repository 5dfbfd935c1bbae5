"""One fault round, run inside a private network namespace (fault_suite starts it there).

    cd tests && unshare --net --pid --kill-child -- env LIFTBRIDGE_PARENT_NETNS=<inode> \
        python -m faults.fault_runner --kind KIND --out DIR

(``fault_suite.run_round`` builds that command: ``private_netns_argv``.)

Starts an AddressedCluster (3 nodes, NATS, each on its own loopback address), creates a
plain stream (3 partitions) and an exactly-once stream (2 partitions), both replicated
3 ways with min ISR 2, runs the workloads (consumer-group members among them), applies
``--cycles`` faults of ``--kind`` (each ``--fault-s`` long, then healed for
``--quiet-s``), waits for the cluster to recover, stops the workloads, lets the group
drain the plain stream, reads everything back and checks the history. A ``crash-all``
round also publishes to its still streams before each crash and reads them back after
the restart, within the quiet time when it can (fault_restart).

DIR gets ``history.jsonl`` (written as the run goes), ``summary.json`` (the verdict) and
``servers/`` (each server's log; the data directories are removed unless --keep-data).
Bounded: every wait has a deadline, and the namespace (rules, shaping, processes) dies with
this process.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import faulthandler
import itertools
import json
import os
import random
import shutil
import sys
import time
from collections.abc import Coroutine, Sequence
from pathlib import Path
from typing import Any

import grpc

from faults.fault_checkers import PROBE, STRANDED_BOUND, VIA, acked_since, check, unexpected
from faults.fault_groups import MEMBERS, GroupProgress, drain_group, group_member, record_committed
from faults.fault_history import Recorder, error_name, load
from faults.fault_nemesis import CRASH_KINDS, KINDS, ROUTED_KINDS, Nemesis
from faults.fault_restart import StillStreams, create_still, publish_still, read_back
from faults.fault_workloads import (
    OPTIONS,
    Streams,
    committed_follower,
    eo_publisher,
    final_reads,
    plain_publisher,
    run_workers,
    subscriber,
    within,
)
from liftbridge_client import AckPolicy, Client, RetryPolicy, StreamConfig, Transport, errors
from liftbridge_client.testing import GROUP_SETTINGS, AddressedCluster
from liftbridge_client.testing._probe import broker_ids

# The harness's failover timeouts (CLUSTER_SETTINGS: 1 s fetch, 3 s leader and lag), the
# server's own defaults, which the issue asks to compare, or "equal": a fetch timeout equal
# to the leader timeout (3 s each), the setting under which stock servers lost acked
# messages at leader kills (docs/compatibility.md).
TIMEOUTS = {
    "harness": {},
    "equal": {"clustering.replica.fetch.timeout": "3s"},
    "server": {
        "clustering.replica.fetch.timeout": "3s",
        "clustering.replica.max.leader.timeout": "15s",
        "clustering.replica.max.lag.time": "15s",
        "clustering.replica.max.idle.wait": "10s",
    },
}


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--kind", choices=KINDS, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--round", type=int, default=0)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--version", default="v1.9.0")
    parser.add_argument("--timeouts", choices=sorted(TIMEOUTS), default="harness")
    parser.add_argument("--cycles", type=int, default=1)
    parser.add_argument("--fault-s", type=float, default=8.0)
    parser.add_argument("--quiet-s", type=float, default=5.0)
    parser.add_argument("--warmup-s", type=float, default=3.0)
    parser.add_argument("--tail-s", type=float, default=3.0)
    parser.add_argument("--keep-data", action="store_true")
    parser.add_argument("--strict", action="store_true")
    # Seconds from the start by which the final checks must be done, so that the verdict
    # is written before whoever started the round kills it (fault_suite: its bound).
    parser.add_argument("--deadline-s", type=float, default=3600.0)
    return parser.parse_args(argv)


async def wait_full_isr(
    client: Client, parts: Streams | Sequence[tuple[str, int]], timeout: float
) -> list[str]:
    """Wait until every partition's leader reports a full ISR; return those that never did."""
    pairs = parts.all() if isinstance(parts, Streams) else parts
    missing = {f"{s}/{p}": (s, p) for s, p in pairs}
    deadline = time.monotonic() + timeout
    while missing and time.monotonic() < deadline:
        for name, (stream, partition) in list(missing.items()):
            try:
                info = await client.fetch_partition_metadata(stream, partition)
            except errors.LiftbridgeError:
                continue
            if info.leader and set(info.isr) == set(info.replicas):
                del missing[name]
        await asyncio.sleep(0.2)
    return sorted(missing)


def broker_lists(cluster: AddressedCluster) -> dict[str, object]:
    """The brokers each node's FetchMetadata lists (or why it did not answer)."""
    lists: dict[str, object] = {}
    for node in cluster.nodes:
        try:
            lists[node.server_id] = sorted(broker_ids(node.address))
        except grpc.RpcError as exc:
            lists[node.server_id] = repr(exc)[:200]
    return lists


async def run_round(cluster: AddressedCluster, history: Recorder, args: argparse.Namespace) -> None:
    rng = random.Random(args.seed)
    async with Client(cluster.addresses, nats_servers=cluster.nats_urls, options=OPTIONS) as client:
        token = f"{args.round}{rng.randrange(16**6):06x}"
        streams = Streams(f"plain-{token}", 3, f"eo-{token}", 2)
        for name, partitions in ((streams.plain, 3), (streams.eo, 2)):
            await client.create_stream(
                f"faults.{name}",
                name,
                StreamConfig(partitions=partitions, replication_factor=3, min_isr=2),
            )
        still = StillStreams.named(token) if args.kind in CRASH_KINDS else None
        if still is not None:
            await create_still(client, still)
        parts = streams.all() + (still.all() if still is not None else [])
        # ALL acks mean "on every replica" only once the ISR is full (replication_support).
        if late := await wait_full_isr(client, parts, 60):
            raise RuntimeError(f"ISR never full after creating the streams: {late}")
        history.emit(
            "note",
            f="setup",
            data={
                "streams": [streams.plain, streams.eo],
                "addresses": cluster.addresses,
                "kind": args.kind,
                "seed": args.seed,
            },
        )
        stop = asyncio.Event()
        pace = 0.03
        publishers = [
            plain_publisher(client, history, streams, 0, Transport.NATS, stop, pace=pace),
            plain_publisher(client, history, streams, 1, Transport.NATS, stop, pace=pace),
            plain_publisher(client, history, streams, 2, Transport.GRPC, stop, pace=pace),
            plain_publisher(client, history, streams, 3, Transport.GRPC, stop, pace=pace),
            eo_publisher(client, history, streams, 0, stop, pace=pace),
            eo_publisher(client, history, streams, 1, stop, pace=pace),
        ]
        if args.kind in ROUTED_KINDS:
            # One NATS publisher per node's NATS server (connected before any split): the
            # one on the minority's side must move on (ClientOptions.nats_detour).
            publishers += [
                pinned_nats_publisher(cluster, server_id, history, streams, stop, pace)
                for server_id in cluster.server_ids
            ]
        followers = [
            *(subscriber(client, history, streams.plain, p, stop) for p in range(3)),
            committed_follower(client, history, streams, stop),
        ]
        running = asyncio.ensure_future(run_workers(publishers, followers, stop, grace=45))
        # The group outlives the other readers: it drains the stream once publishing ends.
        group, group_stop, progress = f"faults-{token}", asyncio.Event(), GroupProgress()
        members = [
            asyncio.ensure_future(
                group_member(
                    cluster.addresses, history, streams.plain, group, i, group_stop, progress
                )
            )
            for i in range(MEMBERS)
        ]
        nemesis = Nemesis(cluster, client, history, streams.plain, rng)
        try:
            await asyncio.sleep(args.warmup_s)
            for cycle in range(args.cycles):
                if still is not None:
                    await publish_still(client, history, still, cycle)
                active = await nemesis.start(args.kind)
                probe = None
                if args.kind in ROUTED_KINDS:
                    node = cluster.node(active.targets[0])
                    probe = asyncio.ensure_future(
                        minority_probe(node.address, cluster.addresses, history, streams, 3)
                    )
                try:
                    await asyncio.sleep(args.fault_s)
                    if args.kind in ROUTED_KINDS:
                        # From the start event, as the checker counts: a publish invoked
                        # while the rules went in can be acked by the old leader.
                        via = f"{VIA}{active.targets[0]}"
                        await hold_split(history, streams, started=active.started, via=via)
                finally:
                    if probe is not None:
                        probe.cancel()
                        await asyncio.gather(probe, return_exceptions=True)
                    nemesis.heal(active)
                healed = history.now()
                if still is not None:
                    # Before the next cycle publishes to them again.
                    await read_back(client, history, still, cycle, healed)
                await asyncio.sleep(max(0.0, args.quiet_s - (history.now() - healed)))
        finally:
            nemesis.heal_all()
        healed = time.monotonic()
        # The checks from here on share what is left of the round's bound: on a cluster
        # that lost a node for good, each would wait its full timeout and the round would
        # be killed without a verdict; cut short, a check says "not-recovered" instead.
        end_by = args.started + args.deadline_s
        try:
            # Each node can create a stream (so a metadata leader exists), not the cluster's
            # whole readiness check: that also wants every node to list every broker, and a
            # node restarted while another was down keeps a short list for
            # metadata.cache.max.age (1 h here; docs/testing.md), which is worth a note,
            # not a failed recovery. One 90 s budget for all nodes, not 90 s each.
            ready_by = min(healed + 90, end_by - 120)
            for node in cluster.nodes:
                await asyncio.to_thread(
                    node.wait_ready, timeout=max(ready_by - time.monotonic(), 1)
                )
            late = await wait_full_isr(client, parts, within(90, end_by - 120))
        except Exception as exc:
            history.emit("note", f="not-recovered", error=error_name(exc))
            late = []
        history.emit("note", f="broker-lists", data=await asyncio.to_thread(broker_lists, cluster))
        for name in late:
            history.emit("note", f="not-recovered", error=f"ISR of {name} not full 90 s after")
        history.emit("note", f="recovered", data={"seconds": round(time.monotonic() - healed, 2)})
        await asyncio.sleep(args.tail_s)
        stop.set()
        cancelled = await running
        history.emit("note", f="workloads-stopped", data={"cancelled": cancelled})
        await drain_group(client, history, streams.plain, 3, progress, timeout=within(120, end_by))
        group_stop.set()
        # asyncio.wait, not a timeout around gather: a member stuck past its cancellation
        # would keep gather (and the round) waiting.
        _left, staying = await asyncio.wait(members, timeout=(wait := within(60, end_by)))
        outcomes: list[object] = [
            t.exception() if not t.cancelled() else "cancelled" for t in _left
        ]
        if staying:
            for task in staying:
                task.print_stack(file=sys.stderr)
                task.cancel()
            outcomes.append(f"{len(staying)} members did not leave within {wait:.0f} s")
        if crashed := [repr(o)[:200] for o in outcomes if o is not None]:
            history.emit("note", f="not-recovered", error=f"group members: {crashed}")
        await record_committed(client, history, streams.plain, group, 3, timeout=within(60, end_by))
        try:
            replicas = {node.server_id: node.address for node in cluster.nodes}
            async with asyncio.timeout(within(240, end_by)):
                await final_reads(client, history, streams, replicas, cluster.nats_url)
        except Exception as exc:
            history.emit("note", f="not-recovered", error=f"final reads: {error_name(exc)}")


async def hold_split(history: Recorder, streams: Streams, started: float, via: str) -> None:
    """Keep a split until the majority has acked a write on every partition of the plain
    stream (at most 60 s more), then until ``via`` (the NATS publisher on the minority's
    NATS server) has too, or STRANDED_BOUND has passed: whether they do is the checkers'
    question, how soon under this machine's load is not."""
    deadline = time.monotonic() + 60
    parts = set(range(streams.plain_partitions))
    majority_at: float | None = None
    while time.monotonic() < deadline:
        if majority_at is None:
            if parts <= set(acked_since(history.events, streams.plain, started)):
                majority_at = time.monotonic()
        else:
            moved = parts <= set(acked_since(history.events, streams.plain, started, via))
            if moved or time.monotonic() > majority_at + STRANDED_BOUND + 1.0:
                return
        await asyncio.sleep(0.5)


async def pinned_nats_publisher(
    cluster: AddressedCluster,
    server_id: str,
    history: Recorder,
    streams: Streams,
    stop: asyncio.Event,
    pace: float,
) -> None:
    """A plain publisher over NATS (the default transport) given only node ``server_id``'s
    NATS server, as a service configured with one NATS URL (nats-py learns the others)."""
    index = cluster.server_ids.index(server_id)
    nats_url = cluster.nats_servers[index].url
    # FAULTS_NATS_DETOUR=0: the publisher without its detour, to see the check fail.
    options = dataclasses.replace(OPTIONS, nats_detour=os.environ.get("FAULTS_NATS_DETOUR") != "0")
    async with Client(cluster.addresses, nats_servers=[nats_url], options=options) as client:
        await plain_publisher(
            client, history, streams, 10 + index, None, stop, pace=pace, process=f"{VIA}{server_id}"
        )


async def minority_probe(
    address: str, addresses: list[str], history: Recorder, streams: Streams, partitions: int
) -> None:
    """Publish (ack ALL, one attempt each) to every partition through the minority's node
    only, until cancelled; what it acks is checked like any plain publish."""
    pinned = dataclasses.replace(
        OPTIONS,
        address_overrides=dict.fromkeys(addresses, address),
        retry=RetryPolicy(attempts=1),
    )
    async with Client([address], options=pinned) as one:
        for n in itertools.count():
            value, partition = f"m-{n:06d}", n % partitions
            fields = {"process": PROBE, "f": "publish", "stream": streams.plain, "value": value}
            history.emit("invoke", partition=partition, **fields)
            try:
                ack = await one.publish(
                    streams.plain,
                    value.encode(),
                    partition=partition,
                    ack_policy=AckPolicy.ALL,
                    transport=Transport.GRPC,
                )
            except errors.LiftbridgeError as exc:
                history.emit("info", partition=partition, error=error_name(exc), **fields)
                await asyncio.sleep(0.2)
            else:
                history.emit("ok", partition=partition, offset=ack.offset, **fields)


async def watched(round_: Coroutine[Any, Any, None], end_by: float) -> None:
    """Run ``round_``; once the checks' deadline ``end_by`` (monotonic) passes, print
    every task's stack (the suite kills a round that runs 25 s past it, and its output
    says where it was)."""

    async def dump() -> None:
        await asyncio.sleep(end_by - time.monotonic())
        print("the round is still running at its deadline; its tasks:", file=sys.stderr)
        for task in asyncio.all_tasks():
            task.print_stack(file=sys.stderr)

    watchdog = asyncio.create_task(dump())
    try:
        await round_
    finally:
        watchdog.cancel()


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args.seed is None:
        args.seed = random.randrange(2**32)
    args.out.mkdir(parents=True, exist_ok=True)
    history = Recorder(args.out / "history.jsonl")
    history.emit("note", f="config", data={k: str(v) for k, v in vars(args).items()})
    started = args.started = time.monotonic()
    servers = args.out / "servers"
    crash = None
    cluster = AddressedCluster(
        3,
        routed=args.kind in ROUTED_KINDS,
        base_dir=servers,
        settings={**GROUP_SETTINGS, **TIMEOUTS[args.timeouts]},
        version=args.version,
    )
    # Should the round still run when its checks' deadline has passed, the runner's output
    # gets every thread's stack (the suite kills the round 25 s after the deadline).
    faulthandler.dump_traceback_later(args.deadline_s + 10, exit=False)
    try:
        cluster.start(timeout=60)
        asyncio.run(watched(run_round(cluster, history, args), started + args.deadline_s))
    except Exception as exc:
        crash = error_name(exc)
        history.emit("note", f="not-recovered", error=f"run crashed: {crash}")
        raise
    finally:
        faulthandler.cancel_dump_traceback_later()
        exits = cluster.unexpected_exits()
        if exits:
            history.emit("note", f="server-exits", data=exits)
        cluster.close()
        history.close()
        if not args.keep_data:
            for node in cluster.nodes:
                shutil.rmtree(node.data_dir, ignore_errors=True)
        verdict = check(load(args.out / "history.jsonl"))
        bad = unexpected(verdict, strict=args.strict)
        summary = {
            "kind": args.kind,
            "round": args.round,
            "seed": args.seed,
            "version": args.version,
            "timeouts": args.timeouts,
            "cycles": args.cycles,
            "fault_s": args.fault_s,
            "duration_s": round(time.monotonic() - started, 1),
            "crash": crash,
            "server_exits": exits,
            "verdict": verdict.to_dict(),
            "unexpected": [a.kind for a in bad],
        }
        (args.out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
