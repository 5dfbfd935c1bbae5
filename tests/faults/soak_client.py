"""The client under test of a soak: one process, one `Client`, publishing and consuming.

    python -m faults.soak_client --config CONFIG.json --out DIR

Started by the soak runner (faults.soak_runner) inside the run's namespace, after the
streams exist; a process of its own so that its RSS, descriptors, threads and tasks are
the client's and its workload's only (the cluster's harness lives in the runner).

For ``seconds`` it publishes at a steady ``rate`` (ack ALL; workers alternate NATS and
gRPC, each value retried as itself until acked), follows every partition with a
subscriber, optionally reads the stream as a consumer-group member, and optionally runs
an exactly-once publisher with a live read_committed reader. Every ``interval`` seconds
it appends a sample to ``client.jsonl``: RSS, open fds, asyncio tasks, OS threads,
publish latency p50/p99/max of the interval, counts and errors by type. Then it stops
publishing, waits (bounded) until the subscribers have consumed every acked value,
closes the client and writes ``final.json``: what was lost, the futures still pending
after close, the tasks left. Values are ``w<worker>-<n>``; what happened to each is one
byte of a per-worker ``bytearray`` (a flat cost: 1 byte per message).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import linecache
import os
import sys
import time
import tracemalloc
from collections import Counter
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from faults.soak_stats import percentile
from liftbridge_client import (
    AckPolicy,
    Client,
    ClientOptions,
    ConsumerOptions,
    RetryPolicy,
    Transport,
    errors,
)
from liftbridge_client.exactly_once import Checkpoint, CommittedReader, ExactlyOncePublisher

OPTIONS = ClientOptions(
    ack_wait=4.0,
    rpc_timeout=3.0,
    max_inflight=1024,
    retry=RetryPolicy(attempts=8, initial_backoff=0.1, max_backoff=1.0),
    resubscribe_wait=60.0,
)
EO_RETRY = RetryPolicy(attempts=20, initial_backoff=0.1, max_backoff=1.0)

ACKED, CONSUMED, GROUP, GAVE_UP = 1, 2, 4, 8  # bits of a value's state byte


def _kind(exc: BaseException) -> str:
    return type(exc).__name__


class Ledger:
    """What happened to each value of each writer (``prefix`` + worker index), one byte
    each, grown in chunks so that the soak's own memory stays flat."""

    CHUNK = 1 << 16

    def __init__(self, prefix: str, workers: int) -> None:
        self.prefix = prefix
        self.states = [bytearray(self.CHUNK) for _ in range(workers)]
        self.next = [0] * workers  # the next n each worker publishes
        self.duplicates = 0  # a value consumed again (retries store it twice: expected)

    def value(self, worker: int, n: int) -> str:
        """The value worker ``worker`` publishes as its ``n``-th."""
        return f"{self.prefix}{worker}-{n:07d}"

    def mark(self, worker: int, n: int, bit: int) -> bool:
        """Set ``bit`` on a value; True if it was already set."""
        states = self.states[worker]
        while n >= len(states):
            states.extend(bytes(self.CHUNK))
        seen = bool(states[n] & bit)
        states[n] |= bit
        return seen

    def parse(self, value: bytes) -> tuple[int, int] | None:
        """(worker, n) of one of this ledger's values, else None."""
        text = value.decode(errors="replace")
        if not text.startswith(self.prefix):
            return None
        worker, _, n = text[len(self.prefix) :].partition("-")
        if not worker.isdigit() or not n.isdigit() or int(worker) >= len(self.states):
            return None
        return int(worker), int(n)

    def missing(self, bit: int) -> list[tuple[int, int]]:
        """Acked values without ``bit``."""
        return [
            (worker, n)
            for worker, states in enumerate(self.states)
            for n in range(self.next[worker])
            if states[n] & ACKED and not states[n] & bit
        ]

    def count(self, bit: int) -> int:
        """Values with ``bit`` set."""
        return sum(
            1
            for w, states in enumerate(self.states)
            for n in range(self.next[w])
            if states[n] & bit
        )


class Soak:
    """The workloads of the client process and their counters."""

    def __init__(self, client: Client, config: dict[str, Any], out: Path) -> None:
        self.client = client
        self.config = config
        self.out = out
        self.stream: str = config["stream"]
        self.partitions: int = config["partitions"]
        self.workers: int = config["workers"]
        self.plain = Ledger("w", self.workers)
        self.eo = Ledger("e", 1)
        self.stop = asyncio.Event()
        self.latencies: list[float] = []  # ms, acked publishes of the current interval
        self.counts: Counter[str] = Counter()  # of the current interval
        self.totals: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()  # of the current interval
        self.error_totals: Counter[str] = Counter()
        self.error_examples: dict[str, str] = {}  # the first message of each kind
        self.t0 = time.monotonic()

    def count(self, what: str, n: int = 1) -> None:
        self.counts[what] += n
        self.totals[what] += n

    def error(self, where: str, exc: BaseException) -> None:
        name = f"{where}:{_kind(exc)}"
        self.errors[name] += 1
        self.error_totals[name] += 1
        self.error_examples.setdefault(name, str(exc)[:300])

    # ------------------------------------------------------------------ workloads

    async def publisher(self, worker: int) -> None:
        """Publish ``w<worker>-<n>`` at rate / workers per second, each value retried
        (as itself) until acked, or until ``attempts`` ran out (then it is unknown)."""
        transport = Transport.NATS if worker % 2 == 0 else Transport.GRPC
        period = self.workers / float(self.config["rate"])
        loop = asyncio.get_running_loop()
        due = loop.time()
        n = 0
        while not self.stop.is_set():
            value = self.plain.value(worker, n)
            self.plain.next[worker] = n + 1
            for _attempt in range(30):
                self.count("published")
                started = loop.time()
                try:
                    await self.client.publish(
                        self.stream,
                        value.encode(),
                        partition=n % self.partitions,
                        ack_policy=AckPolicy.ALL,
                        transport=transport,
                    )
                except errors.LiftbridgeError as exc:
                    self.error("publish", exc)
                    await asyncio.sleep(0.2)
                    continue
                self.latencies.append((loop.time() - started) * 1000)
                self.plain.mark(worker, n, ACKED)
                self.count("acked")
                break
            else:
                self.plain.mark(worker, n, GAVE_UP)
            n += 1
            # A steady rate: after a stall, carry on from now rather than burst.
            due = max(due + period, loop.time() - 1.0)
            await asyncio.sleep(max(0.0, due - loop.time()))

    def consumed(self, ledger: Ledger, value: bytes, bit: int, what: str) -> None:
        parsed = ledger.parse(value)
        if parsed is None:
            return
        if ledger.mark(*parsed, bit) and bit != GROUP:
            ledger.duplicates += 1
        self.count(what)

    async def subscriber(self, partition: int) -> None:
        """Follow one partition from offset 0; resume after the last offset if the
        client's own resubscribing gives up."""
        next_offset = 0
        while True:
            try:
                async with self.client.subscribe(
                    self.stream, partition, start_offset=next_offset
                ) as sub:
                    async for message in sub:
                        self.consumed(self.plain, message.value, CONSUMED, "consumed")
                        next_offset = message.offset + 1
            except errors.LiftbridgeError as exc:
                self.error("subscribe", exc)
                await asyncio.sleep(0.5)

    async def group_member(self) -> None:
        """One member of a consumer group over the stream (it gets every partition)."""
        group = f"soak-{self.stream}"
        options = ConsumerOptions(consumer_id="soak-member", commit_interval=2.0)
        while True:
            try:
                async with self.client.consumer(group, [self.stream], options=options) as member:
                    async for message in member:
                        self.consumed(self.plain, message.value, GROUP, "group")
            except errors.LiftbridgeError as exc:
                self.error("group", exc)
                await asyncio.sleep(0.5)

    async def eo_publisher(self) -> None:
        """``e0-<n>`` through an ExactlyOncePublisher at ``eo_rate``; a publish that still
        fails after its own retries is unknown (never re-sent under a new UUID)."""
        stream = self.config["eo_stream"]
        publisher = ExactlyOncePublisher(self.client, retry=EO_RETRY)
        period = 1.0 / float(self.config["eo_rate"])
        n = 0
        while not self.stop.is_set():
            self.eo.next[0] = n + 1
            try:
                await publisher.publish_committed(
                    stream, self.eo.value(0, n).encode(), partition=n % 2
                )
            except errors.LiftbridgeError as exc:
                self.error("eo-publish", exc)
                self.eo.mark(0, n, GAVE_UP)
            else:
                self.eo.mark(0, n, ACKED)
                self.count("eo_acked")
            n += 1
            await asyncio.sleep(period)

    async def committed_reader(self) -> None:
        """A live read_committed reader of the exactly-once stream, resumed from its
        checkpoint when a failover cuts it short."""
        parts = [(self.config["eo_stream"], p) for p in range(2)]
        checkpoint: Checkpoint | None = None
        while True:
            try:
                async with CommittedReader(self.client, parts, checkpoint=checkpoint) as reader:
                    async for message in reader:
                        self.consumed(self.eo, message.value, CONSUMED, "eo_read")
                        checkpoint = reader.checkpoint()
            except errors.LiftbridgeError as exc:
                self.error("read-committed", exc)
                await asyncio.sleep(0.5)

    # ------------------------------------------------------------------ sampling

    def sample(self, phase: str) -> dict[str, Any]:
        """This process's figures now, and the interval's counters (then reset)."""
        status = _proc_status("self")
        lat = self.latencies
        row: dict[str, Any] = {
            "t": round(time.monotonic() - self.t0, 2),
            "wall": time.time(),
            "phase": phase,
            "rss_mib": round(status.get("VmRSS", 0) / 1024, 2),
            "fds": len(os.listdir("/proc/self/fd")),
            "fd_kinds": fd_kinds(),
            "tasks": len(asyncio.all_tasks()),
            "threads": status.get("Threads", 0),
            # Python objects alive: RSS growing while this stays flat is native memory.
            "py_blocks": sys.getallocatedblocks(),
            "published": self.counts["published"],
            "acked": self.counts["acked"],
            "consumed": self.counts["consumed"],
            "group": self.counts["group"],
            "eo_acked": self.counts["eo_acked"],
            "eo_read": self.counts["eo_read"],
            "lat_n": len(lat),
            "lat_p50_ms": _round(percentile(lat, 50)),
            "lat_p99_ms": _round(percentile(lat, 99)),
            "lat_max_ms": _round(max(lat) if lat else None),
            "pending": self.client.stats().pending,
            "errors": dict(self.errors),
        }
        self.latencies = []
        self.counts.clear()
        self.errors.clear()
        return row

    async def sampler(self, path: Path, interval: float) -> None:
        baseline = None
        with path.open("a", buffering=1) as log:
            for index in itertools.count():
                await asyncio.sleep(interval)
                if tracemalloc.is_tracing():
                    # What grows after warm-up, by where it was allocated (SOAK_TRACEMALLOC).
                    if index == 4:
                        baseline = tracemalloc.take_snapshot()
                    elif baseline is not None:
                        _write_growth(baseline, self.out / "tracemalloc.txt")
                phase = "drain" if self.stop.is_set() else "run"
                log.write(json.dumps(self.sample(phase)) + "\n")


def fd_kinds() -> dict[str, int]:
    """This process's open descriptors by kind (pipe, anon_inode, file), its TCP sockets
    by remote address (``tcp 127.0.0.11:9292``) and in what TCP state (``state 01``...)."""
    kinds: Counter[str] = Counter()
    sockets = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # the listing's own descriptor, closed by now
        if target.startswith("socket:["):
            sockets.add(target[len("socket:[") : -1])
            continue
        kind = target.split(":", 1)[0] if ":" in target and not target.startswith("/") else "file"
        kinds[kind] += 1
    for remote, state in _tcp_peers(sockets):
        kinds[f"tcp {remote}"] += 1
        kinds[f"state {state}"] += 1
    kinds["sockets"] = len(sockets)
    return dict(kinds)


def _tcp_peers(inodes: set[str]) -> list[tuple[str, str]]:
    """(remote address, TCP state in hex) of the IPv4 sockets among ``inodes``."""
    out = []
    with contextlib.suppress(OSError), open("/proc/self/net/tcp") as handle:
        next(handle)
        for line in handle:
            fields = line.split()
            if fields[9] in inodes:
                host, port = fields[2].split(":")
                quad = ".".join(str(b) for b in reversed(bytes.fromhex(host)))
                out.append((f"{quad}:{int(port, 16)}", fields[3]))
    return out


def _write_growth(baseline: tracemalloc.Snapshot, path: Path) -> None:
    """The allocation sites that grew most since ``baseline``, with their tracebacks."""
    ignore = [
        tracemalloc.Filter(False, tracemalloc.__file__),
        tracemalloc.Filter(False, linecache.__file__),
    ]
    now = tracemalloc.take_snapshot().filter_traces(ignore)
    lines = []
    for stat in now.compare_to(baseline.filter_traces(ignore), "traceback")[:15]:
        lines.append(f"{stat.size_diff / 1024:+.1f} KiB, {stat.count_diff:+d} blocks")
        lines += [f"    {line}" for line in stat.traceback.format(most_recent_first=True)[:16]]
    path.write_text("\n".join(lines) + "\n")


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def _proc_status(pid: str) -> dict[str, int]:
    """VmRSS (KiB) and Threads of ``/proc/<pid>/status``."""
    out = {}
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "Threads"):
                out[key] = int(rest.split()[0])
    return out


async def _cancel(tasks: list[asyncio.Task[None]]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def run(config: dict[str, Any], out: Path) -> dict[str, Any]:
    """The whole client side of a soak; returns the final report."""
    final: dict[str, Any] = {}
    if config.get("tracemalloc"):
        tracemalloc.start(24)
    client = Client(config["brokers"], nats_servers=[config["nats_url"]], options=OPTIONS)
    await client.connect()
    soak = Soak(client, config, out)
    samples = out / "client.jsonl"
    publishers = [asyncio.create_task(soak.publisher(w)) for w in range(soak.workers)]
    followers: list[Coroutine[Any, Any, None]] = [
        soak.subscriber(p) for p in range(soak.partitions)
    ]
    if config.get("group"):
        followers.append(soak.group_member())
    if config.get("eo_stream"):
        publishers.append(asyncio.create_task(soak.eo_publisher()))
        followers.append(soak.committed_reader())
    readers = [asyncio.create_task(f) for f in followers]
    sampler = asyncio.create_task(soak.sampler(samples, float(config["interval"])))
    try:
        await asyncio.sleep(float(config["seconds"]))
    finally:
        soak.stop.set()
        # A publish in flight may be retrying for a while: bounded, then cancelled.
        _done, late = await asyncio.wait(publishers, timeout=60)
        await _cancel(list(late))
        final["publishers_cancelled"] = len(late)
    # Every acked value must come out of the subscribers (and the read_committed reader).
    started = time.monotonic()
    deadline = started + float(config.get("catchup_s", 120))
    while time.monotonic() < deadline:
        if not soak.plain.missing(CONSUMED) and not (
            config.get("eo_stream") and soak.eo.missing(CONSUMED)
        ):
            break
        await asyncio.sleep(1.0)
    final["catchup_s"] = round(time.monotonic() - started, 1)
    await asyncio.sleep(1.0)  # the group member commits and reads what is left
    sampler.cancel()
    await asyncio.gather(sampler, return_exceptions=True)
    with samples.open("a") as log:
        log.write(json.dumps(soak.sample("end")) + "\n")
    await _cancel(readers)
    missing = soak.plain.missing(CONSUMED)
    eo_missing = soak.eo.missing(CONSUMED) if config.get("eo_stream") else []
    final.update(
        {
            "published": soak.totals["published"],
            "acked": soak.plain.count(ACKED),
            "consumed_values": soak.plain.count(CONSUMED),
            "gave_up": soak.plain.count(GAVE_UP),
            "duplicates": soak.plain.duplicates,
            "lost": len(missing),
            "lost_values": [soak.plain.value(w, n) for w, n in missing[:50]],
            "group_consumed_values": soak.plain.count(GROUP),
            "group_missing": len(soak.plain.missing(GROUP)) if config.get("group") else None,
            "eo_acked": soak.eo.count(ACKED),
            "eo_lost": len(eo_missing),
            "eo_lost_values": [soak.eo.value(w, n) for w, n in eo_missing[:50]],
            "eo_duplicates": soak.eo.duplicates,
            "errors": dict(soak.error_totals),
            "error_examples": soak.error_examples,
        }
    )
    # The publisher's own count: the futures close() must have settled.
    publisher = client._publisher
    await client.close()
    final["pending_after_close"] = publisher.pending if publisher is not None else None
    # Give cancelled library tasks one turn to finish, then list what is left.
    await asyncio.sleep(0.5)
    current = asyncio.current_task()
    left = [t for t in asyncio.all_tasks() if t is not current]
    final["tasks_after_close"] = sorted(_task_name(t) for t in left)
    final["fds_after_close"] = len(os.listdir("/proc/self/fd"))
    if missing:
        final["lost_in_log"] = await _where_lost(config, soak, missing)
    return final


def _task_name(task: asyncio.Task[Any]) -> str:
    coro = task.get_coro()
    return getattr(coro, "__qualname__", None) or task.get_name()


async def _where_lost(
    config: dict[str, Any], soak: Soak, missing: list[tuple[int, int]]
) -> dict[str, int]:
    """Of the acked values no subscriber saw, how many the final log holds (a reader's
    gap) and how many it does not (the server lost them), read with a fresh client."""
    wanted = {soak.plain.value(w, n) for w, n in missing}
    found: set[str] = set()
    async with Client(config["brokers"], options=OPTIONS) as reader:
        for partition in range(soak.partitions):
            info = await reader.fetch_partition_metadata(soak.stream, partition)
            last = int(info.high_watermark)
            if last < 0:
                continue
            with contextlib.suppress(TimeoutError, errors.LiftbridgeError):
                async with asyncio.timeout(60):
                    async with reader.subscribe(
                        soak.stream, partition, start_offset=0, stop_offset=last
                    ) as sub:
                        async for message in sub:
                            text = message.value.decode(errors="replace")
                            if text in wanted:
                                found.add(text)
    return {"in_log": len(found), "not_in_log": len(wanted) - len(found)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    config = json.loads(args.config.read_text())
    final: dict[str, Any]
    try:
        final = asyncio.run(run(config, args.out))
    except Exception as exc:  # the report says so; the runner's exit status follows
        final = {"crash": f"{_kind(exc)}: {exc}"[:400]}
    (args.out / "final.json").write_text(json.dumps(final, indent=1))
    return 1 if final.get("crash") else 0


if __name__ == "__main__":
    raise SystemExit(main())
