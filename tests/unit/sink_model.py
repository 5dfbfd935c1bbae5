"""The exactly-once Spark sink under a failure schedule, in process (no Spark, no server).

The sink's own writer (`_transactional.publish_rows`, every task attempt) and committer
(`_journal.plan_commit` and `_transactional.write_intents`, the driver) run against
`MemoryCluster`, an in-memory Liftbridge that stores each publish in a partition log and
injects the schedule's faults.
Each task attempt and each driver commit is an actor on its own thread; `Turns` lets one
actor run at a time and picks the next one at every publish from the schedule's seed, so
a failed attempt that keeps publishing its cut-short input interleaves with its retry and
with the driver, and the same schedule always stores the same rows in the same order (the
producer ids, random per attempt, differ).

What a schedule varies (see `Schedule`): the data (batches of tasks of rows, keyed,
keyless or mixed, empty tasks), the sink's options (packRows, producersPerPartition, the
target's partitions, the writer's chunk size), and for every run of a batch each task's
failing attempts (input cut at any row - a UDF or a shuffle read upstream of the writer
failed, so Spark ends the writer's input early without an error -, a publish that fails
for good, the executor killed at a publish, the message stored or not) and transient
faults (a publish lost, stored with its ack lost, stored late after a later one, or
acked but stored after a later one; acks come back a few loop turns late, so several
publishes are in flight), then the driver's fate (commits, dies before its commit, after
recording the intents in the journal, in the middle of or after writing them: the batch
runs again). `check` is the oracle: read committed, every row of every batch comes
exactly once, and the rows of one key of one task keep their order.
"""

from __future__ import annotations

import asyncio
import json
import random
import threading
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from types import SimpleNamespace
from typing import Any, cast

from liftbridge_client import errors
from liftbridge_client.client import Client
from liftbridge_client.exactly_once.publisher import intents_from_json
from liftbridge_client.exactly_once.reader import delivered, envelope_of
from liftbridge_client.exactly_once.sequencer import (
    Checkpoint,
    PartitionRef,
    QueueOutcome,
    Sequencer,
)
from liftbridge_client.exactly_once.uuids import Flags, flags_of
from liftbridge_client.models import AckPolicy, Message
from liftbridge_client.packing import is_packed, unpack
from liftbridge_client.spark import _transactional
from liftbridge_client.spark._idempotent import TaskIdentity
from liftbridge_client.spark._journal import plan_commit
from liftbridge_client.spark._options import SinkOptions
from liftbridge_client.spark._rows import PublishedRow

STREAM = "orders"

# ---- the schedule -------------------------------------------------------------------------

# A publish fault: "lost" (never stored, times out: retried), "acklost" (stored, the ack
# lost: retried, so stored twice), "late" (times out, and is stored after the sender's
# next message), "swapped" (acked, but stored after the sender's next message: landed out
# of order), "error" (a non-retriable error: the attempt fails), "crash" (the executor
# dies there: nothing more from the attempt). For error and crash, ``stored`` says whether
# the message reached the log first.
TRANSIENT = ("lost", "acklost", "late", "swapped")
FATAL = ("error", "crash")


@dataclass(frozen=True)
class Fault:
    at: int  # the attempt's publish number it strikes (0-based; past the last: none)
    kind: str
    stored: bool = False


@dataclass(frozen=True)
class Attempt:
    """One attempt of a task. It fails when ``cut`` is set (its input ends after that many
    rows) or a fatal fault strikes; the next attempt then starts, alongside it."""

    cut: int | None = None
    faults: tuple[Fault, ...] = ()

    @property
    def can_fail(self) -> bool:
        return self.cut is not None or any(f.kind in FATAL for f in self.faults)


@dataclass(frozen=True)
class Run:
    """One run of a batch: per task its attempts (the last never fails), and the driver's
    fate: "commit", "before" (dies before its commit), "journaled" (after recording the
    intents in the journal, before writing any), "mid" (after ``mid`` of them), "after"
    (after all: the batch is replayed)."""

    attempts: tuple[tuple[Attempt, ...], ...]
    driver: str = "commit"
    mid: int = 0
    driver_faults: tuple[Fault, ...] = ()


@dataclass(frozen=True)
class Batch:
    rows: tuple[int, ...]  # rows per task (Spark partition)
    runs: tuple[Run, ...]  # the last one commits


@dataclass(frozen=True)
class Schedule:
    seed: int  # picks the interleaving of actors
    partitions: int  # of the target stream
    pack_rows: int
    lanes: int  # producersPerPartition
    keys: str  # "none", "all" or "mixed"
    key_space: int
    chunk_rows: int
    ring: int  # the reader's Sequencer buffer (small: replays)
    batches: tuple[Batch, ...]

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> Schedule:
        doc = json.loads(text)

        def attempt(a: dict[str, Any]) -> Attempt:
            return Attempt(a["cut"], tuple(Fault(**f) for f in a["faults"]))

        def run(r: dict[str, Any]) -> Run:
            return Run(
                tuple(tuple(attempt(a) for a in t) for t in r["attempts"]),
                r["driver"],
                r["mid"],
                tuple(Fault(**f) for f in r["driver_faults"]),
            )

        batches = tuple(
            Batch(tuple(b["rows"]), tuple(run(r) for r in b["runs"])) for b in doc["batches"]
        )
        return cls(**{**doc, "batches": batches})

    def options(self) -> SinkOptions:
        return SinkOptions(
            brokers=("127.0.0.1:1",),
            nats_servers=(),
            stream=STREAM,
            ack_policy=AckPolicy.ALL,
            transport=None,
            max_inflight=64,
            ack_timeout=5.0,
            connect_timeout=5.0,
            exactly_once=True,
            write_id="w",
            delivery_timeout=30.0,
            pack_rows=self.pack_rows,
            producers_per_partition=self.lanes,
        )

    def rows_of(self, batch: int, task: int) -> list[PublishedRow]:
        """A task's input, the same on every attempt: values name the row, keys repeat."""
        out = []
        for i in range(self.batches[batch].rows[task]):
            keyed = self.keys == "all" or (self.keys == "mixed" and i % 3 != 1)
            key = f"k{(i * 7 + task) % self.key_space}".encode() if keyed else None
            out.append(PublishedRow(STREAM, f"b{batch}t{task}r{i}".encode(), key))
        return out


# ---- turns: one actor at a time, in a seeded order -----------------------------------------


class Crashed(BaseException):
    """The executor of an attempt died: nothing after this point runs (not an Exception,
    so no layer of the sink takes it for an error it could handle)."""


class Turns:
    """Actors (threads) run one at a time; at every `yield_turn` the seeded RNG picks who
    runs next among the live ones, so a schedule is replayed exactly."""

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(seed)
        self._cond = threading.Condition()
        self._live: list[str] = []
        self._holder: str | None = None
        self._threads: list[threading.Thread] = []
        self.errors: list[BaseException] = []

    def spawn(self, name: str, body: Callable[[], None]) -> None:
        """A new actor; it waits for its turn before it runs ``body``."""
        with self._cond:
            self._live.append(name)

        def main() -> None:
            self._wait(name)
            try:
                body()
            except Crashed:
                pass
            except BaseException as exc:
                self.errors.append(exc)
            finally:
                self._finish(name)

        thread = threading.Thread(target=main, name=name, daemon=True)
        self._threads.append(thread)
        thread.start()

    def start(self) -> None:
        with self._cond:
            self._pass()

    def join(self, timeout: float = 60.0) -> None:
        i = 0
        while i < len(self._threads):  # actors spawn actors
            self._threads[i].join(timeout)
            if self._threads[i].is_alive():
                raise AssertionError(f"actor {self._threads[i].name} hangs")
            i += 1

    def yield_turn(self, name: str) -> None:
        with self._cond:
            self._pass()
        self._wait(name)

    def _pass(self) -> None:
        self._holder = self._rng.choice(self._live) if self._live else None
        self._cond.notify_all()

    def _wait(self, name: str) -> None:
        with self._cond:
            self._cond.wait_for(lambda: self._holder == name)

    def _finish(self, name: str) -> None:
        with self._cond:
            self._live.remove(name)
            self._pass()


# ---- the in-memory cluster -----------------------------------------------------------------


@dataclass
class Actor:
    name: str
    faults: dict[int, Fault] = field(default_factory=dict)
    publishes: int = 0


class ListSubscription:
    """A subscription (as `Client.subscribe` returns) over messages already in a list."""

    def __init__(self, messages: list[Message]) -> None:
        self._messages = messages

    async def __aenter__(self) -> ListSubscription:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def __aiter__(self) -> Any:
        for m in self._messages:
            yield m


class MemoryCluster:
    """Partition logs of the target stream (and of the streams the sink creates, such as
    its journal), and a client per actor that publishes into them."""

    def __init__(self, partitions: int, turns: Turns) -> None:
        self.streams: dict[str, dict[int, list[Message]]] = {
            STREAM: {p: [] for p in range(partitions)}
        }
        self.turns = turns
        self._lock = threading.Lock()

    @property
    def logs(self) -> dict[int, list[Message]]:
        return self.streams[STREAM]

    def client(self, actor: Actor) -> Client:
        return cast(Client, _MemoryClient(self, actor))

    def store(
        self, stream: str, partition: int, value: bytes, key: bytes | None, headers: Any
    ) -> int:
        with self._lock:
            log = self.streams[stream][partition]
            log.append(
                Message(stream, partition, len(log), value, key or b"", headers=dict(headers))
            )
            return len(log) - 1


def _later(future: asyncio.Future[Any], settle: Callable[[], None], turns: int) -> None:
    # Acks arrive a few loop turns later, so that several publishes are in flight.
    if future.done():
        return
    if turns > 0:
        asyncio.get_running_loop().call_soon(_later, future, settle, turns - 1)
    else:
        settle()


# Faults a one-step send leaves to `send`: they raise, or store the message later.
_NOT_NOW = frozenset({"late", "swapped", "crash", "error"})


class _MemoryClient:
    def __init__(self, cluster: MemoryCluster, actor: Actor) -> None:
        self._cluster = cluster
        self._actor = actor
        self._rng = random.Random(actor.name)
        self._held: list[Callable[[], None]] = []  # stores after the next message's

    async def fetch_metadata(self, stream: str | None = None) -> Any:
        streams = {
            name: SimpleNamespace(partitions=dict.fromkeys(logs))
            for name, logs in self._cluster.streams.items()
        }
        return SimpleNamespace(streams=streams, brokers={"b1": None})

    async def create_stream(self, subject: str, name: str, config: Any, **_: Any) -> None:
        with self._cluster._lock:
            self._cluster.streams.setdefault(name, {0: []})

    async def fetch_partition_metadata(self, stream: str, partition: int) -> Any:
        log = self._cluster.streams[stream][partition]
        return SimpleNamespace(high_watermark=len(log) - 1)

    def subscribe(self, stream: str, partition: int, **kw: Any) -> Any:
        log = self._cluster.streams[stream][partition]
        return ListSubscription(log[kw["start_offset"] : kw["stop_offset"] + 1])

    def _fault(self) -> Fault | None:
        actor = self._actor
        self._cluster.turns.yield_turn(actor.name)  # others may run before this publish
        fault = actor.faults.get(actor.publishes)
        actor.publishes += 1
        return fault

    def _store(self, stream: str, partition: int, value: bytes, key: Any, headers: Any) -> int:
        offset = self._cluster.store(stream, partition, value, key, headers or {})
        self._flush_held()
        return offset

    async def publish(
        self,
        stream: str,
        value: bytes,
        *,
        key: bytes | None = None,
        headers: Any = None,
        partition: int = 0,
        ack_policy: Any = None,
    ) -> Any:
        future = await self.send(
            stream, value, key=key, headers=headers, partition=partition, ack_policy=ack_policy
        )
        return await future

    async def send(
        self,
        stream: str,
        value: bytes,
        *,
        key: bytes | None = None,
        headers: Any = None,
        partition: int = 0,
        ack_policy: Any = None,
    ) -> Any:
        actor = self._actor
        fault = self._fault()
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        kind = None if fault is None else fault.kind
        if kind in ("late", "swapped"):

            def store_late() -> None:
                offset = self._cluster.store(stream, partition, value, key, headers or {})
                if kind == "swapped" and not future.done():
                    future.set_result(
                        SimpleNamespace(stream=stream, partition=partition, offset=offset)
                    )

            self._held.append(store_late)
            if kind == "late":
                future.set_exception(errors.AckTimeoutError(f"{actor.name}: injected late"))
            else:
                _later(future, self._flush_held, 1 + self._rng.randrange(3))
            await asyncio.sleep(0)
            return future
        self._go(future, fault, stream, value, key, headers, partition)
        await asyncio.sleep(0)
        return future

    def _send_now(
        self,
        stream: str,
        value: bytes,
        key: bytes | None,
        headers: Any,
        partition: int,
        ack_policy: Any,
    ) -> Any:
        """The client's one-step send: None half the time (a full window: the caller
        awaits `send`) and whenever the publish's fault raises or stores late."""
        actor = self._actor
        fault = actor.faults.get(actor.publishes)
        if self._rng.random() < 0.5 or (fault is not None and fault.kind in _NOT_NOW):
            return None
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._go(future, self._fault(), stream, value, key, headers, partition)
        return future

    def _go(
        self,
        future: asyncio.Future[Any],
        fault: Fault | None,
        stream: str,
        value: bytes,
        key: bytes | None,
        headers: Any,
        partition: int,
    ) -> None:
        """Store the message as ``fault`` says, and settle ``future`` (acks come later)."""
        kind = None if fault is None else fault.kind
        stored = fault is None or kind == "acklost" or fault.stored
        offset = self._store(stream, partition, value, key, headers) if stored else -1
        if fault is not None:
            if kind == "crash":
                raise Crashed
            if kind == "error":
                raise errors.PermissionDeniedError(f"{self._actor.name}: injected publish error")
            future.set_exception(errors.AckTimeoutError(f"{self._actor.name}: injected {kind}"))
        else:
            ack = SimpleNamespace(stream=stream, partition=partition, offset=offset)
            _later(future, lambda: future.set_result(ack), self._rng.randrange(4))

    def _flush_held(self) -> None:
        held, self._held = self._held, []
        for store in held:
            store()


# ---- running a schedule --------------------------------------------------------------------


def execute(schedule: Schedule) -> MemoryCluster:
    """Run every batch of ``schedule`` to its commit; the cluster holds what was stored."""
    turns = Turns(schedule.seed)
    cluster = MemoryCluster(schedule.partitions, turns)
    options = schedule.options()
    plan = [(b, r) for b, batch in enumerate(schedule.batches) for r in range(len(batch.runs))]
    _start_run(schedule, options, cluster, plan, 0)
    turns.start()
    turns.join()
    if turns.errors:
        raise turns.errors[0]
    return cluster


def _start_run(
    schedule: Schedule,
    options: SinkOptions,
    cluster: MemoryCluster,
    plan: list[tuple[int, int]],
    step: int,
) -> None:
    """Spawn the first attempt of every task of run ``plan[step]``; the last final attempt
    to end spawns the driver, which spawns the next run."""
    b, r = plan[step]
    run = schedule.batches[b].runs[r]
    results: dict[int, str] = {}
    tasks = len(run.attempts)

    def task_done(task: int, intents: str) -> None:
        results[task] = intents
        if len(results) == tasks:
            cluster.turns.spawn(f"driver-b{b}r{r}", driver)

    def driver() -> None:
        actor = Actor(f"driver-b{b}r{r}", {f.at: f for f in run.driver_faults})
        intents = [i for t in sorted(results) for i in intents_from_json(results[t])]
        if run.driver != "before" and intents:
            client = cluster.client(actor)
            with asyncio.Runner() as loop:
                planned = loop.run(plan_commit(client, "w", b, intents))
                if run.driver == "journaled":
                    planned = []
                elif run.driver == "mid":
                    planned = planned[: run.mid]
                loop.run(_transactional.write_intents(client, options, planned))
        if step + 1 < len(plan):
            _start_run(schedule, options, cluster, plan, step + 1)

    if tasks == 0:
        cluster.turns.spawn(f"driver-b{b}r{r}", driver)
    for task in range(tasks):
        _spawn_attempt(schedule, options, cluster, (b, r, task), 0, task_done)


def _spawn_attempt(
    schedule: Schedule,
    options: SinkOptions,
    cluster: MemoryCluster,
    where: tuple[int, int, int],
    number: int,
    task_done: Callable[[int, str], None],
) -> None:
    b, r, task = where
    attempts = schedule.batches[b].runs[r].attempts[task]
    attempt = attempts[number]
    last = number == len(attempts) - 1
    name = f"b{b}r{r}t{task}a{number}"
    actor = Actor(name, {f.at: f for f in attempt.faults})
    retried = False

    def retry() -> None:
        nonlocal retried
        if not retried and not last:
            retried = True
            _spawn_attempt(schedule, options, cluster, where, number + 1, task_done)

    def rows() -> Iterator[PublishedRow]:
        for i, row in enumerate(schedule.rows_of(b, task)):
            if attempt.cut is not None and i >= attempt.cut:
                retry()  # Spark saw the failure upstream; the writer's input just ends
                return
            yield row

    def body() -> None:
        identity = TaskIdentity("w", b, task)
        try:
            with asyncio.Runner() as loop:
                result = _transactional.publish_rows(
                    loop.run, cluster.client(actor), rows(), options, identity
                )
        except errors.LiftbridgeError:
            if last or not attempt.can_fail:
                raise
            retry()  # the injected error failed this attempt, as Spark sees it
            return
        except BaseException:
            retry()
            raise
        if last:
            task_done(task, result.intents)
        else:
            retry()  # its commit message is dropped: the task failed

    cluster.turns.spawn(name, body)


# ---- the oracle ----------------------------------------------------------------------------


def committed_rows(cluster: MemoryCluster, partition: int, ring: int) -> list[str]:
    """What a read_committed reader of one partition yields, row by row."""
    log = cluster.logs[partition]
    ref = PartitionRef(STREAM, partition)
    sequencer = Sequencer(Checkpoint({ref: 0}), buffer=ring)
    out: list[str] = []
    for message in log:
        if sequencer.queue(envelope_of(message)) is QueueOutcome.ACK_COMMIT_REPLAY:
            _, begin, end = sequencer.replay_range()
            sequencer.start_replay(envelope_of(m) for m in log[begin:end])
        while (env := sequencer.step()) is not None:
            if env.uuid != bytes(16) and flags_of(env.uuid) == Flags.ACK_TXN:
                continue
            m = delivered(env)
            if is_packed(m.headers):
                out.extend(row.value.decode() for row in unpack(m.value))
            else:
                out.append(m.value.decode())
    return out


def check(schedule: Schedule, cluster: MemoryCluster) -> None:
    """Every row of every batch committed exactly once; one key's rows of one task in order."""
    expected = {
        row.value.decode(): row.key
        for b, batch in enumerate(schedule.batches)
        for t in range(len(batch.rows))
        for row in schedule.rows_of(b, t)
    }
    seen: dict[str, int] = defaultdict(int)
    for partition in cluster.logs:
        rows = committed_rows(cluster, partition, schedule.ring)
        last: dict[tuple[str, bytes], int] = {}
        for value in rows:
            seen[value] += 1
            key = expected.get(value)
            if key is not None:
                where, _, i = value.rpartition("r")
                previous = last.get((where, key), -1)
                assert int(i) > previous, f"{value} after row {previous} of its key"
                last[(where, key)] = int(i)
    missing = sorted(set(expected) - set(seen))
    twice = sorted(v for v, n in seen.items() if n > 1)
    strange = sorted(set(seen) - set(expected))
    found = f"lost {len(missing)} {missing[:8]}, duplicated {len(twice)} {twice[:8]}"
    assert not missing, found
    assert not twice, found
    assert not strange, f"rows never written: {strange[:8]}"
