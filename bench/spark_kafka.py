"""The Spark connector side by side with Spark's Kafka connector on a real Kafka broker.

``python -m bench.spark_kafka [--quick] [--rows N] [--reps R] [--docs]`` (``make bench-spark``;
never part of ``make test``). One SparkSession (``local[2]``, UI off, 127.0.0.1) holds both
connectors: the ``liftbridge`` data source of this project and Spark's own ``kafka`` source
and sink, loaded through ``spark.jars.packages`` from Maven Central (Ivy cache under
``$LIFTBRIDGE_CLIENT_CACHE``). The servers: one fresh Liftbridge node of the harness
(embedded NATS) and one KRaft Kafka node from Maven Central jars (bench/kafka_broker.py),
both on 127.0.0.1, both removed at the end.

Both systems get the same rows (``rows`` keyed messages of ``size`` bytes) and the same
queries; every path runs at 1 and 4 partitions, ``reps`` times, interleaved (the system that
goes first alternates). A ratio is Liftbridge's rows/s over Kafka's in the same repetition;
figures are medians with min..max. Client CPU is the Spark side's: the driver JVM (which runs
the executors in local mode) and every Python process under it, from /proc; server CPU is
the broker process's (Liftbridge with its embedded NATS; the Kafka JVM).

A run fails (exit status 1) when a count is wrong or a job fails, never on the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.kafka_broker import KAFKA_VERSION, KafkaBroker
from bench.proctree import TreeCpuSampler, pid_cpu
from liftbridge_client import StreamConfig

__all__ = [
    "DOC",
    "ROWS",
    "SPARK_KAFKA_PACKAGE",
    "Plan",
    "Spread",
    "main",
    "markdown",
    "ratio_spread",
    "render_tables",
    "splice",
    "summarize",
]

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "spark-benchmarks.md"
RESULTS_DIR = ROOT / "bench" / "results" / "raw"  # git-ignored; summaries sit one level up
BLOCK_START = "<!-- spark-kafka:start (python -m bench.spark_kafka --docs) -->"
BLOCK_END = "<!-- spark-kafka:end -->"

SPARK_KAFKA_VERSION = "4.2.0"
"""spark-sql-kafka-0-10_2.13: the newest on Maven Central (4.3.0 is not published there);
it runs inside pyspark 4.3 (it brings kafka-clients 3.9.2)."""
SPARK_KAFKA_PACKAGE = f"org.apache.spark:spark-sql-kafka-0-10_2.13:{SPARK_KAFKA_VERSION}"
# Its dependencies that pyspark's own jars already hold (the same versions in 4.3.0): left
# out, so the classpath has one copy of each and a fresh cache fetches ~40 MB less.
SPARK_KAFKA_EXCLUDES = (
    "org.apache.hadoop:hadoop-client-api",
    "org.apache.hadoop:hadoop-client-runtime",
    "org.slf4j:slf4j-api",
    "at.yawk.lz4:lz4-java",
    "org.xerial.snappy:snappy-java",
    "com.google.code.findbugs:jsr305",
    "org.scala-lang.modules:scala-parallel-collections_2.13",
)

CORES = 2
COLUMNS = ("key", "value", "partition", "offset", "timestamp")
KAFKA = "kafka"
LIFTBRIDGE = "liftbridge"


@dataclass(frozen=True, slots=True)
class Plan:
    """How much to measure."""

    name: str = "full"
    rows: int = 200_000
    size: int = 256
    reps: int = 3
    partitions: tuple[int, ...] = (1, 4)
    paths: tuple[str, ...] = ()  # only these paths (read paths, write paths); () = all

    @classmethod
    def quick(cls) -> Plan:
        """A smoke run: 20,000 rows, one repetition."""
        return cls(name="quick", rows=20_000, reps=1)


@dataclass(frozen=True, slots=True)
class Row:
    """One line of the table: a path, and what each system runs for it."""

    label: str
    kafka: str | None  # the Kafka path compared with (None: none)
    liftbridge: str
    note: str = ""


EO_PRODUCERS = 16  # producersPerPartition on the exactlyOnce path that sets it

ROWS: tuple[Row, ...] = (
    Row("batch count()", "count", "count"),
    Row("batch to parquet", "parquet", "parquet"),
    Row("Trigger.AvailableNow to parquet", "available_now", "available_now"),
    Row(
        "Trigger.AvailableNow to parquet, a Python source without IO",
        "available_now",
        "available_now_floor",
        "no Liftbridge: the same columns in Arrow batches from memory, the floor of any "
        "Python streaming source",
    ),
    Row("plain write, gRPC", "write", "write_grpc"),
    Row("plain write, NATS (`natsServers`)", "write", "write_nats"),
    Row("idempotent write, NATS", "write", "write_idempotent", "vs Kafka's plain sink"),
    Row("exactlyOnce write, NATS", "write", "write_exactly_once", "vs Kafka's plain sink"),
    Row(
        f"exactlyOnce write, NATS, `producersPerPartition={EO_PRODUCERS}`",
        "write",
        "write_exactly_once_producers",
        "vs Kafka's plain sink",
    ),
    Row(
        "plain write, NATS, `packRows=1000`",
        "write",
        "write_packed",
        "vs Kafka's plain sink; readers must unpack",
    ),
    Row(
        "exactlyOnce write, NATS, `packRows=1000`",
        "write",
        "write_exactly_once_packed",
        "vs Kafka's plain sink; readers must unpack",
    ),
    Row(
        "client `send()` pipelined, NATS (no Spark)",
        None,
        "client_publish",
        "this client alone, one process, no key",
    ),
)
"""The table, in order. The Liftbridge write paths are all compared with Kafka's one sink
(Spark's Kafka sink has no idempotent or exactly-once mode)."""

READ_PATHS = ("count", "parquet", "available_now")
FLOOR_PATH = "available_now_floor"  # runs after each available_now pair

# read_committed against a plain read of the same stream (Liftbridge alone: Spark's Kafka
# connector has no such mode over these writes). Each path runs with isolation
# read_committed and, as ``<path>_plain``, read_uncommitted; "rows" are the stream's
# messages for both, so the ratio is of their times.
COMMITTED_ROWS: tuple[tuple[str, str], ...] = (
    ("rc_count", "batch count() of an unpacked exactlyOnce write"),
    (
        "rc_stream",
        "streaming to parquet, 8 micro-batches, transactions of 10 producers per partition "
        "interleaved across them",
    ),
)
COMMITTED_PATHS = tuple(path for path, _ in COMMITTED_ROWS)
COMMITTED_TRIGGERS = 8  # micro-batches of rc_stream: maxOffsetsPerTrigger = messages / 8
LIFTBRIDGE_WRITES = (
    "write_grpc",
    "write_nats",
    "write_idempotent",
    "write_exactly_once",
    "write_exactly_once_producers",
    "write_packed",
    "write_exactly_once_packed",
    "client_publish",
)
PACK_ROWS = 1000  # rows per Liftbridge message on the packed paths

# The goal of issue 23: the sink against this client's own pipelined publish.
OWN_PUBLISH = "client_publish"
OWN_PUBLISH_ROWS = (
    "write_grpc",
    "write_nats",
    "write_idempotent",
    "write_exactly_once",
    "write_exactly_once_producers",
)


# --- statistics and tables (pure) ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Spread:
    """Median with min and max of a few values."""

    median: float
    low: float
    high: float
    count: int

    @classmethod
    def of(cls, values: Iterable[float]) -> Spread | None:
        """None for no values."""
        data = sorted(values)
        if not data:
            return None
        return cls(statistics.median(data), data[0], data[-1], len(data))

    def format(self, fmt: Callable[[float], str]) -> str:
        """``median (low..high)``, or the median alone for one value."""
        if self.count == 1:
            return fmt(self.median)
        return f"{fmt(self.median)} ({fmt(self.low)}..{fmt(self.high)})"


def rate_text(value: float) -> str:
    """Rows per second: ``104k``, ``4.7k``, ``850``."""
    if value >= 100_000:
        return f"{value / 1000:.0f}k"
    if value >= 1000:
        return f"{value / 1000:.1f}k"
    return f"{value:.0f}"


def ratio_text(value: float) -> str:
    return f"{value:.2f}"


def cpu_text(value: float) -> str:
    return f"{value:.1f}" if value < 100 else f"{value:.0f}"


def _rate(record: Mapping[str, Any]) -> float | None:
    if record.get("problem") or not record.get("seconds"):
        return None
    return float(record["rows"]) / float(record["seconds"])


def _records(
    records: Sequence[Mapping[str, Any]], system: str, path: str, partitions: int
) -> list[Mapping[str, Any]]:
    return [
        r
        for r in records
        if r["system"] == system and r["path"] == path and r["partitions"] == partitions
    ]


def rate_spread(
    records: Sequence[Mapping[str, Any]], system: str, path: str, partitions: int
) -> Spread | None:
    """Rows/s of one system's path at one partition count, over the repetitions."""
    rates = [_rate(r) for r in _records(records, system, path, partitions)]
    return Spread.of(r for r in rates if r is not None)


def cpu_spread(
    records: Sequence[Mapping[str, Any]], system: str, path: str, partitions: int, key: str
) -> Spread | None:
    """Microseconds of CPU per row (``key`` = ``client_cpu_s`` or ``server_cpu_s``)."""
    values = [
        float(r[key]) / float(r["rows"]) * 1e6
        for r in _records(records, system, path, partitions)
        if r.get(key) is not None and not r.get("problem") and r["rows"]
    ]
    return Spread.of(values)


def ratio_spread(
    records: Sequence[Mapping[str, Any]],
    numerator: tuple[str, str],
    denominator: tuple[str, str],
    partitions: int,
) -> Spread | None:
    """``numerator`` rows/s over ``denominator``'s, (system, path) each, per repetition."""
    by_rep: dict[int, dict[tuple[str, str], float]] = {}
    for r in records:
        rate = _rate(r)
        if r["partitions"] == partitions and rate is not None:
            by_rep.setdefault(int(r["rep"]), {})[(r["system"], r["path"])] = rate
    ratios = [
        rates[numerator] / rates[denominator]
        for rates in by_rep.values()
        if numerator in rates and denominator in rates and rates[denominator] > 0
    ]
    return Spread.of(ratios)


def _fmt(spread: Spread | None, fmt: Callable[[float], str], *, median_only: bool = False) -> str:
    if spread is None:
        return "-"
    return fmt(spread.median) if median_only else spread.format(fmt)


def summarize(
    records: Sequence[Mapping[str, Any]], partitions: Sequence[int]
) -> list[dict[str, Any]]:
    """One entry per table row and partition count: spreads of rates, ratio and CPU."""
    out: list[dict[str, Any]] = []
    for row in ROWS:
        for p in partitions:
            kafka = rate_spread(records, KAFKA, row.kafka, p) if row.kafka else None
            ours = rate_spread(records, LIFTBRIDGE, row.liftbridge, p)
            ratio = (
                ratio_spread(records, (LIFTBRIDGE, row.liftbridge), (KAFKA, row.kafka), p)
                if row.kafka
                else None
            )
            cpu: dict[str, Spread | None] = {}
            for system, path in ((KAFKA, row.kafka), (LIFTBRIDGE, row.liftbridge)):
                for key in ("client_cpu_s", "server_cpu_s"):
                    cpu[f"{system}_{key}"] = (
                        cpu_spread(records, system, path, p, key) if path else None
                    )
            own = (
                ratio_spread(records, (LIFTBRIDGE, row.liftbridge), (LIFTBRIDGE, OWN_PUBLISH), p)
                if row.liftbridge in OWN_PUBLISH_ROWS
                else None
            )
            out.append(
                {
                    "row": row,
                    "partitions": p,
                    "kafka": kafka,
                    "liftbridge": ours,
                    "ratio": ratio,
                    "own_publish_ratio": own,
                    **cpu,
                }
            )
    return out


def read_per_stored(
    records: Sequence[Mapping[str, Any]], path: str, partitions: int
) -> Spread | None:
    """Bytes the tasks read per byte of their ranges (``taskStatsFile``), per repetition."""
    return Spread.of(
        float(r["read_per_stored"])
        for r in _records(records, LIFTBRIDGE, path, partitions)
        if r.get("read_per_stored") is not None and not r.get("problem")
    )


def committed_table(records: Sequence[Mapping[str, Any]], partitions: Sequence[int]) -> list[str]:
    """read_committed against read_uncommitted of the same stream; [] when not measured."""
    lines: list[str] = []
    for path, label in COMMITTED_ROWS:
        for p in partitions:
            committed = rate_spread(records, LIFTBRIDGE, path, p)
            plain = rate_spread(records, LIFTBRIDGE, f"{path}_plain", p)
            if committed is None and plain is None:
                continue
            ratio = ratio_spread(records, (LIFTBRIDGE, path), (LIFTBRIDGE, f"{path}_plain"), p)
            read = read_per_stored(records, path, p)
            lines.append(
                f"| {label} | {p} | {_fmt(plain, rate_text)} | {_fmt(committed, rate_text)} | "
                f"{_fmt(ratio, ratio_text)} | {_fmt(read, ratio_text)} |"
            )
    if not lines:
        return []
    return [
        "",
        "| read_committed, against read_uncommitted of the same stream | partitions | "
        "plain messages/s | read_committed messages/s | ratio | bytes read per byte stored, "
        "read_committed |",
        "|---|---:|---:|---:|---:|---:|",
        *lines,
    ]


def render_tables(records: Sequence[Mapping[str, Any]], partitions: Sequence[int]) -> str:
    """The Markdown tables of a run: compact (as issue 23's), then with spreads and CPU."""
    entries = summarize(records, partitions)
    by_row: dict[str, list[dict[str, Any]]] = {}
    for entry in entries:
        by_row.setdefault(entry["row"].label, []).append(entry)
    parts_label = " / ".join(str(p) for p in partitions)

    def joined(cells: list[dict[str, Any]], key: str, fmt: Callable[[float], str]) -> str:
        return " / ".join(_fmt(c[key], fmt, median_only=True) for c in cells)

    lines = [
        "| path | partitions | Kafka rows/s | Liftbridge rows/s | ratio |",
        "|---|---|---|---|---|",
    ]
    for row in ROWS:
        cells = by_row[row.label]
        kafka = joined(cells, "kafka", rate_text) if row.kafka else "-"
        ratio = joined(cells, "ratio", ratio_text) if row.kafka else "-"
        label = f"{row.label} ({row.note})" if row.note else row.label
        lines.append(
            f"| {label} | {parts_label} | {kafka} | "
            f"{joined(cells, 'liftbridge', rate_text)} | {ratio} |"
        )
    lines += [
        "",
        "| path | partitions | Kafka rows/s | Liftbridge rows/s | ratio | "
        "client CPU us/row, Kafka / Liftbridge | server CPU us/row, Kafka / Liftbridge |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for entry in entries:
        row = entry["row"]
        client = (
            f"{_fmt(entry['kafka_client_cpu_s'], cpu_text, median_only=True)} / "
            f"{_fmt(entry['liftbridge_client_cpu_s'], cpu_text, median_only=True)}"
        )
        server = (
            f"{_fmt(entry['kafka_server_cpu_s'], cpu_text, median_only=True)} / "
            f"{_fmt(entry['liftbridge_server_cpu_s'], cpu_text, median_only=True)}"
        )
        lines.append(
            f"| {row.label} | {entry['partitions']} | {_fmt(entry['kafka'], rate_text)} | "
            f"{_fmt(entry['liftbridge'], rate_text)} | {_fmt(entry['ratio'], ratio_text)} | "
            f"{client} | {server} |"
        )
    own = [e for e in entries if e["own_publish_ratio"] is not None]
    if own:
        lines += [
            "",
            "| Liftbridge sink | partitions | ratio to the client's own pipelined publish |",
            "|---|---:|---:|",
        ]
        lines += [
            f"| {e['row'].label} | {e['partitions']} | {_fmt(e['own_publish_ratio'], ratio_text)} |"
            for e in own
        ]
    lines += committed_table(records, partitions)
    return "\n".join(lines) + "\n"


def markdown(results: Mapping[str, Any]) -> str:
    """The docs/spark-benchmarks.md block of a run (between the block markers)."""
    plan, env, machine = results["plan"], results["environment"], results["machine"]
    load = results["load_average"]
    parts = tuple(plan["partitions"])
    lines = [
        BLOCK_START,
        "## Side by side with Spark's Kafka connector",
        "",
        f"Run {results['started']} ({plan['name']}: {plan['rows']:,} rows of {plan['size']} B "
        f"with keys, {plan['reps']} interleaved repetition(s), "
        f"{results['seconds'] / 60:.0f} min) by `python -m bench.spark_kafka"
        + (" --quick" if plan["name"] == "quick" else "")
        + " --docs` (`make bench-spark`), git "
        f"{env['git']}. Machine: {machine.get('cpu_model')}, {machine.get('nproc')} cores, "
        f"{machine.get('ram_gib')} GiB, {machine.get('os')}; load average (1, 5, 15 min) "
        f"{load['before']} before and {load['after']} after: the cores were shared with other "
        "work, so single figures move from run to run; the ratios, taken within one "
        "repetition, move less."
        + (
            " **A quick run: a smoke test of the benchmark at a tenth of its size, where "
            "fixed costs (job start, Python workers) weigh far more; not figures to quote.**"
            if plan["name"] == "quick"
            else ""
        ),
        "",
        f"Versions: pyspark {env['pyspark']} (`local[{CORES}]`, UI off, one SparkSession for "
        f"both systems), Python {machine.get('python')}, {env['java']}; Liftbridge "
        f"{env['liftbridge']} (one node of the test harness, embedded NATS, log level "
        f"{env['liftbridge_log_level']}); Kafka {env['kafka']} (one KRaft node, broker and "
        "controller, from Maven Central jars, default JVM options of kafka-server-start); "
        f"Spark's Kafka connector `{env['spark_kafka_package']}` through "
        "`spark.jars.packages` (it brings kafka-clients 3.9.2; producer and consumer "
        "defaults). Everything on 127.0.0.1.",
        "",
        "What runs: the same DataFrame (keys `key-<n>`, values padded to the size; cached, "
        f"{CORES} Spark partitions) is written to each system, and the same queries read it "
        "back: `count()`, the columns key, value, partition, offset and timestamp to parquet "
        "in a batch job, and the same through a streaming query with "
        "`Trigger.AvailableNow` (a fresh checkpoint each time). Writes go to a new topic or "
        "stream each time: Spark's Kafka sink (`acks=all`, on one broker the leader) against "
        "the `liftbridge` sink (ack policy leader) over gRPC, over NATS, with "
        "`idempotent=true` and with `exactlyOnce=true`; Spark's Kafka sink has neither mode, "
        "so those rows compare with its plain sink. The last row is this client alone "
        "(`send()` with its default window, one process, NATS, values without keys). Every "
        "figure is wall time of the job (or query) alone, after a warm-up of each connector; "
        "rows/s are medians with min..max; a ratio is Liftbridge's rows/s over Kafka's in "
        "the same repetition. CPU per row: the client side is the driver JVM (the executors, "
        "in local mode) and every Python worker under it; the server side is the Liftbridge "
        "process (with its embedded NATS) or the Kafka JVM. Counts are checked after each "
        "job (exactlyOnce: a read_committed read). The AvailableNow row without IO reads "
        "no server: a Python data source builds the same columns in Arrow batches from "
        "memory (bench.spark_available_now), so it is the most any Python streaming source "
        "can reach here. The last table is Liftbridge alone: `isolation=read_committed` "
        "against `read_uncommitted` over the same stream (an unpacked exactlyOnce write of "
        "the rows; interleaved transactions of 10 producers per partition, one in nine "
        "rolled back, read in 8 micro-batches), rates in messages/s, and the bytes the "
        "tasks read per byte of their ranges (`taskStatsFile`).",
        "",
        render_tables(results["records"], parts).rstrip("\n"),
    ]
    problems = [r for r in results["records"] if r.get("problem")]
    if problems:
        lines += ["", "Failed measurements (left out of the figures):", ""]
        lines += [
            f"- {r['system']} {r['path']} at {r['partitions']} partition(s), repetition "
            f"{r['rep'] + 1}: {r['problem']}"
            for r in problems
        ]
    lines += ["", BLOCK_END]
    return "\n".join(lines)


def splice(doc: str, block: str) -> str:
    """``doc`` with its block replaced by ``block`` (inserted after the title if absent)."""
    if BLOCK_START in doc and BLOCK_END in doc:
        head, rest = doc.split(BLOCK_START, 1)
        return head + block + rest.split(BLOCK_END, 1)[1]
    title, sep, rest = doc.partition("\n")
    if title.startswith("# "):
        return f"{title}\n\n{block}\n{sep}{rest.lstrip(chr(10))}"
    return f"{block}\n\n{doc}"


# --- the run ----------------------------------------------------------------------------


def _git() -> str:
    done = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        capture_output=True, text=True, check=False, cwd=ROOT,
    )  # fmt: skip
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"],
        capture_output=True, text=True, check=False, cwd=ROOT,
    )  # fmt: skip
    rev = done.stdout.strip() or "?"
    return rev + (" (with uncommitted changes)" if dirty.stdout.strip() else "")


def _java_version() -> str:
    done = subprocess.run(
        [shutil.which("java") or "java", "-version"], capture_output=True, text=True, check=False
    )
    lines = (done.stderr or done.stdout).splitlines()
    runtime = lines[1] if len(lines) > 1 else (lines[0] if lines else "java ?")
    return runtime.strip()


def _load() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


MAVEN_CENTRAL = "https://repo1.maven.org/maven2/"


def ivy_settings_xml(cache_dir: Path) -> str:
    """Ivy settings with Maven Central as the only remote (Spark's default chain also asks
    repos.spark-packages.org, which this machine must not reach)."""
    return (
        "<ivysettings>\n"
        '  <settings defaultResolver="central"/>\n'
        f'  <caches defaultCacheDir="{cache_dir}"/>\n'
        "  <resolvers>\n"
        f'    <ibiblio name="central" m2compatible="true" root="{MAVEN_CENTRAL}"/>\n'
        "  </resolvers>\n"
        "</ivysettings>\n"
    )


def ivy_settings(ivy_home: Path) -> Path:
    """Write the Ivy settings beside Ivy's cache; their path."""
    ivy_home.mkdir(parents=True, exist_ok=True)
    path = ivy_home / "ivysettings.xml"
    path.write_text(ivy_settings_xml(ivy_home / "cache"))
    return path


def session(tmp: Path, cache: Path) -> Any:
    """The SparkSession for both systems: local[2], UI off, 127.0.0.1, Kafka connector."""
    for var in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON"):
        os.environ[var] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from pyspark.sql import SparkSession

    from liftbridge_client.spark import register

    spark = (
        SparkSession.builder.master(f"local[{CORES}]")
        .appName("bench.spark_kafka")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", str(CORES))
        .config("spark.sql.warehouse.dir", str(tmp / "warehouse"))
        .config("spark.driver.extraJavaOptions", f"-Dderby.system.home={tmp / 'derby'}")
        .config("spark.jars.packages", SPARK_KAFKA_PACKAGE)
        .config("spark.jars.excludes", ",".join(SPARK_KAFKA_EXCLUDES))
        .config("spark.jars.ivy", str(cache / "ivy"))
        .config("spark.jars.ivySettings", str(ivy_settings(cache / "ivy")))
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


class Run:
    """One benchmark run: the servers, the session, the records."""

    def __init__(self, plan: Plan, spark: Any, kafka: KafkaBroker, node: Any, tmp: Path) -> None:
        self.plan = plan
        self.spark = spark
        self.kafka = kafka
        self.node = node
        self.tmp = tmp
        self.address: str = node.address
        self.nats_url: str = node.nats_url
        self.records: list[dict[str, Any]] = []
        self.kafka_written: list[tuple[dict[str, Any], str]] = []  # checked at the end
        self._count = 0
        self.data: Any = None
        self.sources: dict[tuple[str, int], str] = {}
        # (path, partitions) -> (stream, messages, committed rows) of the read_committed rows
        self.committed_sources: dict[tuple[str, int], tuple[str, int, int]] = {}
        self._floor_registered = False

    # -- helpers --

    def _name(self, what: str) -> str:
        self._count += 1
        return f"sk-{what}-{self._count}-{uuid.uuid4().hex[:6]}"

    def _client(self) -> Any:
        from liftbridge_client import Client, ClientOptions

        return Client([self.address], options=ClientOptions(keepalive_time=None))

    def create_stream(self, what: str, partitions: int) -> str:
        name = self._name(what)

        async def create() -> None:
            async with self._client() as client:
                await client.create_stream(
                    f"bench.sk.{name}", name, StreamConfig(partitions=partitions)
                )

        asyncio.run(create())
        return name

    def stored(self, stream: str, partitions: int) -> int:
        async def fetch() -> int:
            async with self._client() as client:
                infos = [
                    await client.fetch_partition_metadata(stream, p) for p in range(partitions)
                ]
                return sum(i.high_watermark + 1 for i in infos)

        return asyncio.run(fetch())

    def _out(self, what: str) -> Path:
        return self.tmp / "out" / self._name(what)

    def reader(self, system: str, source: str, *, streaming: bool = False) -> Any:
        spark = self.spark
        base = spark.readStream if streaming else spark.read
        if system == KAFKA:
            r = (
                base.format("kafka")
                .option("kafka.bootstrap.servers", self.kafka.bootstrap)
                .option("subscribe", source)
            )
        else:
            r = base.format("liftbridge").option("brokers", self.address).option("stream", source)
        return r.option("startingOffsets", "earliest").load()

    def parquet_count(self, path: Path) -> int:
        return int(self.spark.read.parquet(str(path)).count())

    def measure(
        self,
        system: str,
        path: str,
        partitions: int,
        rep: int,
        action: Callable[[], Callable[[], str | None]],
        rows: int | None = None,
    ) -> dict[str, Any]:
        """Time ``action`` (which returns a check to run after the clock stops) over
        ``rows`` (default: the plan's)."""
        server = self.kafka.pid if system == KAFKA else self.node.node.process.pid
        servers = [p for p in (self.kafka.pid, self.node.node.process.pid) if p is not None]
        sampler = TreeCpuSampler(os.getpid(), servers).start()
        server0 = pid_cpu(server)
        start = time.perf_counter()
        problem: str | None = None
        check: Callable[[], str | None] | None = None
        try:
            check = action()
        except Exception as exc:
            problem = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:300]}"
        seconds = time.perf_counter() - start
        server_cpu = pid_cpu(server) - server0
        client_cpu = sampler.stop()
        if problem is None and check is not None:
            try:
                problem = check()
            except Exception as exc:
                problem = f"check failed: {type(exc).__name__}: {exc}"[:400]
        record: dict[str, Any] = {
            "rep": rep,
            "system": system,
            "path": path,
            "partitions": partitions,
            "rows": self.plan.rows if rows is None else rows,
            "seconds": seconds,
            "client_cpu_s": client_cpu,
            "server_cpu_s": server_cpu,
            "problem": problem,
        }
        self.records.append(record)
        self._print(record)
        return record

    @staticmethod
    def _print(r: Mapping[str, Any]) -> None:
        rate = _rate(r)
        rows = float(r["rows"]) or 1.0
        print(
            f"  rep {r['rep'] + 1} p={r['partitions']} {r['system']:<10} {r['path']:<19}"
            + (f"{rate:>10,.0f} rows/s" if rate else "          -     ")
            + f"  {r['seconds']:6.2f} s  cpu client {r['client_cpu_s'] / rows * 1e6:6.1f}"
            f" server {r['server_cpu_s'] / rows * 1e6:6.1f} us/row"
            + (f"  FAILED: {r['problem']}" if r.get("problem") else ""),
            flush=True,
        )

    # -- set-up --

    def prepare(self) -> None:
        """The data, the read sources of both systems, the Kafka write topics; warm-ups."""
        plan = self.plan
        self.data = (
            self.spark.range(plan.rows, numPartitions=CORES)
            .selectExpr(
                "cast(concat('key-', cast(id AS string)) AS binary) AS key",
                f"cast(lpad(cast(id AS string), {plan.size}, 'x') AS binary) AS value",
            )
            .cache()
        )
        assert self.data.count() == plan.rows
        topics = {f"src-p{p}": p for p in plan.partitions}
        topics["warm"] = 1
        for rep in range(plan.reps):
            topics.update({f"w-r{rep}-p{p}": p for p in plan.partitions})
        self.kafka.create_topics(topics)
        print(f"==> filling the read sources ({plan.rows:,} rows each)", flush=True)
        for p in plan.partitions:
            self.kafka_sink(self.data, f"src-p{p}")
            self.sources[(KAFKA, p)] = f"src-p{p}"
            stream = self.create_stream(f"src-p{p}", p)
            self.liftbridge_sink(self.data, stream, nats=True)
            stored = self.stored(stream, p)
            if stored != plan.rows:
                raise SystemExit(f"filling {stream}: {stored} of {plan.rows} stored")
            self.sources[(LIFTBRIDGE, p)] = stream
        offsets = self.kafka.latest_offsets([f"src-p{p}" for p in plan.partitions])
        if any(n != plan.rows for n in offsets.values()):
            raise SystemExit(f"filling the Kafka topics: {offsets} of {plan.rows} each")
        print("==> warming up both connectors (not measured)", flush=True)
        small = self.data.limit(1000)
        self.kafka_sink(small, "warm")
        self.liftbridge_sink(small, self.create_stream("warm", 1), nats=True)
        self.liftbridge_sink(small, self.create_stream("warm", 1), nats=False)
        self.liftbridge_sink(
            small, self.create_stream("warm", 1), nats=True, idempotent="true", writeId="warm"
        )
        self.liftbridge_sink(small, self.create_stream("warm", 1), nats=True, exactlyOnce="true")
        for system in (KAFKA, LIFTBRIDGE):
            source = self.sources[(system, plan.partitions[0])]
            self.reader(system, source).count()
            self.reader(system, source).selectExpr(*COLUMNS).write.mode("overwrite").parquet(
                str(self._out("warm"))
            )
            self.stream_to_parquet(system, source, self._out("warm-stream"))
        if self.wants("available_now"):
            self.floor_to_parquet(1, self._out("warm-floor"))
        self.prepare_committed()

    def wants(self, path: str) -> bool:
        return not self.plan.paths or path in self.plan.paths

    def prepare_committed(self) -> None:
        """The streams the read_committed rows read: an unpacked exactlyOnce write of the
        rows, and interleaved transactions of about as many messages."""
        from bench.spark_read_committed import publish_interleaved

        plan = self.plan
        for p in plan.partitions:
            if self.wants("rc_count"):
                stream = self.create_stream("eo-src", p)
                self.liftbridge_sink(self.data, stream, nats=True, exactlyOnce="true")
                self.committed_sources[("rc_count", p)] = (
                    stream, self.stored(stream, p), plan.rows,
                )  # fmt: skip
            if self.wants("rc_stream"):
                stream = self.create_stream("txn-src", p)
                sent, committed = asyncio.run(
                    publish_interleaved(self.address, stream, p, plan.rows, plan.size)
                )
                self.committed_sources[("rc_stream", p)] = (stream, sent, committed)
        if self.committed_sources:  # warm-up: the exactly-once layer's imports
            stream = next(iter(self.committed_sources.values()))[0]
            self.committed_reader(stream, "read_committed", None).count()

    def committed_reader(
        self, stream: str, isolation: str, stats: Path | None, *, per_trigger: int = 0
    ) -> Any:
        spark = self.spark
        r = (
            (spark.readStream if per_trigger else spark.read)
            .format("liftbridge")
            .option("brokers", self.address)
            .option("stream", stream)
            .option("startingOffsets", "earliest")
            .option("isolation", isolation)
        )
        if per_trigger:
            r = r.option("maxOffsetsPerTrigger", str(per_trigger))
        if stats is not None:
            r = r.option("taskStatsFile", str(stats))
        return r.load()

    def committed_path(self, path: str, partitions: int, rep: int) -> None:
        """One read_committed row's read, with isolation read_committed, or read_uncommitted
        for ``<path>_plain``; the tasks' counts give the bytes read per byte stored."""
        base = path.removesuffix("_plain")
        stream, messages, committed = self.committed_sources[(base, partitions)]
        isolation = "read_uncommitted" if path.endswith("_plain") else "read_committed"
        want = committed if isolation == "read_committed" else messages
        stats = self.tmp / f"{self._name('stats')}.jsonl"

        def count() -> Callable[[], str | None]:
            got = int(self.committed_reader(stream, isolation, stats).count())
            return lambda: _expect(got, want, "rows counted")

        def streaming() -> Callable[[], str | None]:
            out = self._out(path)
            per_trigger = max(1, messages // COMMITTED_TRIGGERS)
            query = (
                self.committed_reader(stream, isolation, stats, per_trigger=per_trigger)
                .select("value")
                .writeStream.format("parquet")
                .option("path", str(out))
                .option("checkpointLocation", str(out) + "-checkpoint")
                .start()
            )
            try:
                query.processAllAvailable()
            finally:
                query.stop()
            return lambda: _expect(self.parquet_count(out), want, "parquet rows")

        action = count if base == "rc_count" else streaming
        record = self.measure(LIFTBRIDGE, path, partitions, rep, action, rows=messages)
        record["read_per_stored"] = stats_ratio(stats)

    def floor_path(self, partitions: int, rep: int) -> None:
        """AvailableNow to parquet from bench.spark_available_now's source without IO."""
        out = self._out("floor")

        def floor() -> Callable[[], str | None]:
            self.floor_to_parquet(partitions, out)
            return lambda: _expect(self.parquet_count(out), self.plan.rows, "parquet rows")

        self.measure(LIFTBRIDGE, FLOOR_PATH, partitions, rep, floor)

    def floor_to_parquet(self, partitions: int, out: Path) -> None:
        if not self._floor_registered:
            from bench.spark_available_now import FloorSource

            self.spark.dataSource.register(FloorSource)
            self._floor_registered = True
        floor = (
            self.spark.readStream.format("floor")
            .option("rows", str(self.plan.rows))
            .option("partitions", str(partitions))
            .load()
        )
        self._available_now(floor, out)

    def stream_to_parquet(self, system: str, source: str, out: Path) -> None:
        """A Trigger.AvailableNow query from ``source`` to parquet, with a new checkpoint."""
        self._available_now(self.reader(system, source, streaming=True), out)

    @staticmethod
    def _available_now(df: Any, out: Path) -> None:
        query = (
            df.selectExpr(*COLUMNS)
            .writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(out) + "-checkpoint")
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        if query.exception() is not None:
            raise RuntimeError(str(query.exception()))

    def kafka_sink(self, df: Any, topic: str) -> None:
        (
            df.write.format("kafka")
            .option("kafka.bootstrap.servers", self.kafka.bootstrap)
            .option("topic", topic)
            .mode("append")
            .save()
        )

    def liftbridge_sink(self, df: Any, stream: str, *, nats: bool, **options: str) -> None:
        writer = df.write.format("liftbridge").option("brokers", self.address)
        writer = writer.option("stream", stream)
        if nats:
            writer = writer.option("natsServers", self.nats_url)
        for key, value in options.items():
            writer = writer.option(key, value)
        writer.mode("append").save()

    # -- the paths --

    def read_path(self, system: str, path: str, partitions: int, rep: int) -> None:
        source = self.sources[(system, partitions)]
        rows = self.plan.rows

        def count() -> Callable[[], str | None]:
            got = int(self.reader(system, source).count())
            return lambda: None if got == rows else f"count() gave {got} of {rows}"

        def parquet() -> Callable[[], str | None]:
            out = self._out("parquet")
            self.reader(system, source).selectExpr(*COLUMNS).write.mode("overwrite").parquet(
                str(out)
            )
            return lambda: _expect(self.parquet_count(out), rows, "parquet rows")

        def available_now() -> Callable[[], str | None]:
            out = self._out("stream")
            self.stream_to_parquet(system, source, out)
            return lambda: _expect(self.parquet_count(out), rows, "parquet rows")

        action = {"count": count, "parquet": parquet, "available_now": available_now}[path]
        self.measure(system, path, partitions, rep, action)

    def write_path(self, system: str, path: str, partitions: int, rep: int) -> None:
        rows = self.plan.rows
        if system == KAFKA:
            topic = f"w-r{rep}-p{partitions}"

            def kafka() -> Callable[[], str | None]:
                self.kafka_sink(self.data, topic)
                return lambda: None

            record = self.measure(KAFKA, "write", partitions, rep, kafka)
            self.kafka_written.append((record, topic))
            return
        if path == "client_publish":
            self.client_publish(partitions, rep)
            return
        stream = self.create_stream(path.replace("_", "-"), partitions)
        options: dict[str, str] = {}
        if path == "write_idempotent":
            options = {"idempotent": "true", "writeId": f"bench-{uuid.uuid4().hex}"}
        elif path == "write_exactly_once":
            options = {"exactlyOnce": "true"}
        elif path == "write_exactly_once_producers":
            options = {"exactlyOnce": "true", "producersPerPartition": str(EO_PRODUCERS)}
        elif path == "write_packed":
            options = {"packRows": str(PACK_ROWS)}
        elif path == "write_exactly_once_packed":
            options = {"exactlyOnce": "true", "packRows": str(PACK_ROWS)}
        committed = path.startswith("write_exactly_once")

        def write() -> Callable[[], str | None]:
            self.liftbridge_sink(self.data, stream, nats=path != "write_grpc", **options)
            if committed or path == "write_packed":  # rows, as the source unpacks them
                return lambda: _expect(
                    int(
                        self.spark.read.format("liftbridge")
                        .option("brokers", self.address)
                        .option("stream", stream)
                        .option("isolation", "read_committed" if committed else "read_uncommitted")
                        .load()
                        .count()
                    ),
                    rows,
                    "rows read back",
                )
            return lambda: _expect(self.stored(stream, partitions), rows, "messages stored")

        self.measure(LIFTBRIDGE, path, partitions, rep, write)

    def client_publish(self, partitions: int, rep: int) -> None:
        """This client's pipelined ``send()`` in a process of its own (bench.ours)."""
        stream = self.create_stream("client", partitions)
        task = {
            "address": self.address,
            "nats_url": self.nats_url,
            "stream": stream,
            "partitions": partitions,
            "rows": self.plan.rows,
            "size": self.plan.size,
        }
        server0 = pid_cpu(self.node.node.process.pid)
        done = subprocess.run(
            [sys.executable, "-m", "bench.spark_kafka", "--client-publish", json.dumps(task)],
            capture_output=True, text=True, check=False, cwd=ROOT, timeout=900,
        )  # fmt: skip
        server_cpu = pid_cpu(self.node.node.process.pid) - server0
        record: dict[str, Any] = {
            "rep": rep,
            "system": LIFTBRIDGE,
            "path": "client_publish",
            "partitions": partitions,
            "rows": self.plan.rows,
            "seconds": 0.0,
            "client_cpu_s": None,
            "server_cpu_s": server_cpu,
            "problem": None,
        }
        if done.returncode != 0:
            record["problem"] = (done.stderr.strip() or f"exit {done.returncode}")[-400:]
        else:
            out = json.loads(done.stdout.strip().splitlines()[-1])
            record.update(seconds=out["seconds"], client_cpu_s=out["cpu_s"])
            if out.get("first_error") or out.get("acked") != self.plan.rows:
                record["problem"] = f"{out.get('acked')} acked; {out.get('first_error')}"
            else:
                record["problem"] = _expect(
                    self.stored(stream, partitions), self.plan.rows, "stored"
                )
        self.records.append(record)
        self._print(record)

    def run(self) -> None:
        plan = self.plan
        pair = 0
        for rep in range(plan.reps):
            print(f"==> repetition {rep + 1} of {plan.reps}", flush=True)
            for path in READ_PATHS:
                if plan.paths and path not in plan.paths:
                    continue
                for p in plan.partitions:
                    order = (KAFKA, LIFTBRIDGE) if pair % 2 == 0 else (LIFTBRIDGE, KAFKA)
                    pair += 1
                    for system in order:
                        self.read_path(system, path, p, rep)
                    if path == "available_now":
                        self.floor_path(p, rep)
            for path in COMMITTED_PATHS:
                if not self.wants(path):
                    continue
                for p in plan.partitions:
                    pair += 1
                    both = (path, f"{path}_plain")
                    for which in both if pair % 2 else both[::-1]:
                        self.committed_path(which, p, rep)
            for p in plan.partitions:
                writers = [(KAFKA, "write"), *((LIFTBRIDGE, w) for w in LIFTBRIDGE_WRITES)]
                if plan.paths:
                    writers = [(sys_, w) for sys_, w in writers if w in plan.paths]
                    if writers == [(KAFKA, "write")]:
                        writers = []
                if not writers:
                    continue
                k = (rep + p) % len(writers)
                for system, path in writers[k:] + writers[:k]:
                    self.write_path(system, path, p, rep)
        if self.kafka_written:
            offsets = self.kafka.latest_offsets([t for _, t in self.kafka_written])
            for record, topic in self.kafka_written:
                problem = _expect(offsets.get(topic, -1), plan.rows, f"messages in {topic}")
                if problem and not record["problem"]:
                    record["problem"] = problem
                    print(f"  FAILED: kafka write {topic}: {problem}", flush=True)


def stats_ratio(path: Path) -> float | None:
    """Bytes the tasks of a read read per byte of their ranges, from ``taskStatsFile``."""
    if not path.exists():
        return None
    tasks = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    ranged = sum(int(t["bytes"]) for t in tasks)
    if not ranged:
        return None
    return (ranged + sum(int(t["reread_bytes"]) for t in tasks)) / ranged


def _expect(got: int, want: int, what: str) -> str | None:
    return None if got == want else f"{got} {what}, expected {want}"


def client_publish_main(task: Mapping[str, Any]) -> None:
    """``--client-publish``: bench.ours' pipelined publish, NATS, one JSON line out."""
    from bench.ours import Target, publish_pipelined
    from liftbridge_client.options import Transport

    target = Target(task["address"], task["nats_url"], task["stream"], int(task["partitions"]))
    out = asyncio.run(
        publish_pipelined(target, Transport.NATS, int(task["rows"]), int(task["size"]), "LEADER")
    )
    print(json.dumps(out))


def write_docs(results: Mapping[str, Any], doc: Path = DOC) -> None:
    text = doc.read_text() if doc.exists() else "# Spark connector benchmarks\n"
    doc.write_text(splice(text, markdown(results)))
    print(f"wrote {doc.relative_to(ROOT)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.spark_kafka", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="20,000 rows, one repetition")
    parser.add_argument("--rows", type=int, help="rows per measurement (default 200,000)")
    parser.add_argument("--size", type=int, help="value size in bytes (default 256)")
    parser.add_argument("--reps", type=int, help="repetitions (default 3)")
    parser.add_argument(
        "--partitions", help="comma-separated partition counts (default 1,4)", default=None
    )
    parser.add_argument(
        "--paths",
        help=f"comma-separated paths to run only ({', '.join(READ_PATHS)}, write, "
        f"{', '.join(LIFTBRIDGE_WRITES)}, {', '.join(COMMITTED_PATHS)}); default all",
    )
    parser.add_argument("--docs", action="store_true", help="write the table into docs/")
    parser.add_argument("--report", type=Path, help="only print (and --docs) a results file")
    parser.add_argument("--client-publish", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.client_publish:
        client_publish_main(json.loads(args.client_publish))
        return 0
    if args.report:
        results = json.loads(args.report.read_text())
        print(render_tables(results["records"], tuple(results["plan"]["partitions"])))
        if args.docs:
            write_docs(results)
        return 0
    plan = Plan.quick() if args.quick else Plan()
    changes: dict[str, Any] = {}
    if args.rows:
        changes["rows"] = args.rows
    if args.size:
        changes["size"] = args.size
    if args.reps:
        changes["reps"] = args.reps
    if args.partitions:
        changes["partitions"] = tuple(int(p) for p in args.partitions.split(","))
    if args.paths:
        changes["paths"] = tuple(p.strip() for p in args.paths.split(",") if p.strip())
    plan = dataclasses.replace(plan, **changes)
    return run(plan, docs=args.docs)


def byte_compile() -> bool:
    """Byte-compile the package, as installing a wheel does: run from a source tree with
    PYTHONDONTWRITEBYTECODE set, every Python process Spark starts (the streaming source's,
    each worker) would compile it again, 0.2-0.5 s each on this machine, which no user of
    an installed package pays (pyspark's own modules are compiled in site-packages)."""
    import compileall

    return bool(compileall.compile_dir(ROOT / "liftbridge_client", quiet=1))


def run(plan: Plan, *, docs: bool) -> int:
    import pyspark

    from bench.machine import machine_details
    from liftbridge_client.testing import LIFTBRIDGE_VERSION, SingleNode
    from liftbridge_client.testing._config import default_log_level
    from liftbridge_client.testing._provision import cache_root

    started = datetime.now(UTC)
    t0 = time.monotonic()
    compiled = byte_compile()
    load_before = _load()
    print(
        f"==> Spark connectors side by side ({plan.name}: {plan.rows:,} rows x {plan.size} B, "
        f"{plan.reps} repetition(s), partitions {plan.partitions}); Liftbridge "
        f"{LIFTBRIDGE_VERSION}, Kafka {KAFKA_VERSION}, {SPARK_KAFKA_PACKAGE}",
        flush=True,
    )
    environment = {
        "git": _git(),
        "pyspark": pyspark.__version__,
        "java": _java_version(),
        "python": platform.python_version(),
        "liftbridge": LIFTBRIDGE_VERSION,
        "liftbridge_log_level": default_log_level(),
        "bytecode": "compiled" if compiled else "not compiled",
        "kafka": KAFKA_VERSION,
        "spark_kafka_package": SPARK_KAFKA_PACKAGE,
    }
    with (
        tempfile.TemporaryDirectory(prefix="bench-spark-kafka-") as tmp,
        KafkaBroker() as kafka,
        SingleNode() as node,
    ):
        spark = session(Path(tmp), cache_root())
        try:
            bench = Run(plan, spark, kafka, node, Path(tmp))
            bench.prepare()
            bench.run()
        finally:
            spark.stop()
    results: dict[str, Any] = {
        "started": started.isoformat(timespec="seconds"),
        "seconds": time.monotonic() - t0,
        "plan": dataclasses.asdict(plan),
        "environment": environment,
        "machine": machine_details(),
        "load_average": {"before": load_before, "after": _load()},
        "records": bench.records,
    }
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{started.strftime('%Y%m%dT%H%M%SZ')}-spark-kafka-{plan.name}.json"
    path.write_text(json.dumps(results, indent=1))
    print()
    print(render_tables(bench.records, plan.partitions))
    print(
        f"results: {path.relative_to(ROOT)} ({results['seconds']:.0f} s; load average "
        f"{load_before} before, {results['load_average']['after']} after)"
    )
    if docs:
        write_docs(results)
    failures = [r for r in bench.records if r.get("problem")]
    if failures:
        print(f"{len(failures)} measurement(s) FAILED (a wrong count or a failed job)")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
