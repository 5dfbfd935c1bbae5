"""The Spark-vs-Kafka benchmark's pure parts: statistics, tables, the docs block, the Kafka
broker's configuration, the Ivy settings and the CPU accounting of process trees."""

from __future__ import annotations

import base64
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from bench import kafka_broker, spark_kafka
from bench.proctree import TreeCpuSampler, parse_stat, subtree, tree_cpu
from bench.spark_kafka import KAFKA, LIFTBRIDGE, Plan, Spread

# --- statistics and tables ------------------------------------------------------------------


def record(
    system: str,
    path: str,
    partitions: int,
    rep: int,
    seconds: float,
    *,
    rows: int = 1000,
    client: float | None = 0.01,
    server: float = 0.005,
    problem: str | None = None,
) -> dict[str, Any]:
    return {
        "system": system,
        "path": path,
        "partitions": partitions,
        "rep": rep,
        "rows": rows,
        "seconds": seconds,
        "client_cpu_s": client,
        "server_cpu_s": server,
        "problem": problem,
    }


def test_spread_is_median_with_range() -> None:
    assert Spread.of([]) is None
    spread = Spread.of([3.0, 1.0, 2.0, 10.0])
    assert spread == Spread(2.5, 1.0, 10.0, 4)
    assert spread.format(lambda v: f"{v:.1f}") == "2.5 (1.0..10.0)"
    one = Spread.of([4.0])
    assert one is not None
    assert one.format(str) == "4.0"  # one value: no range


def test_rate_text_keeps_two_or_three_digits() -> None:
    assert spark_kafka.rate_text(262_400) == "262k"
    assert spark_kafka.rate_text(54_321) == "54.3k"
    assert spark_kafka.rate_text(4_700) == "4.7k"
    assert spark_kafka.rate_text(850.4) == "850"


def test_ratios_are_taken_within_a_repetition() -> None:
    records = [
        record(KAFKA, "count", 1, 0, 1.0),  # 1000 rows/s
        record(LIFTBRIDGE, "count", 1, 0, 2.0),  # 500 rows/s
        record(KAFKA, "count", 1, 1, 0.5),  # 2000 rows/s
        record(LIFTBRIDGE, "count", 1, 1, 0.5),  # 2000 rows/s
        record(KAFKA, "count", 1, 2, 1.0),
        record(LIFTBRIDGE, "count", 1, 2, 1.0, problem="count() gave 3 of 1000"),
        record(KAFKA, "count", 4, 0, 1.0),  # another partition count: apart
    ]
    ratio = spark_kafka.ratio_spread(records, (LIFTBRIDGE, "count"), (KAFKA, "count"), 1)
    assert ratio == Spread(0.75, 0.5, 1.0, 2)  # the failed repetition has no ratio
    rates = spark_kafka.rate_spread(records, LIFTBRIDGE, "count", 1)
    assert rates == Spread(1250.0, 500.0, 2000.0, 2)
    cpu = spark_kafka.cpu_spread(records, KAFKA, "count", 1, "client_cpu_s")
    assert cpu is not None
    assert cpu.median == pytest.approx(10.0)  # 0.01 s over 1000 rows: 10 us/row
    assert spark_kafka.ratio_spread(records, (LIFTBRIDGE, "x"), (KAFKA, "count"), 1) is None


def full_records(reps: int = 2) -> list[dict[str, Any]]:
    records = []
    for rep in range(reps):
        for p in (1, 4):
            for path in spark_kafka.READ_PATHS:
                records.append(record(KAFKA, path, p, rep, 1.0))
                records.append(record(LIFTBRIDGE, path, p, rep, 2.0 + rep))
            records.append(record(KAFKA, "write", p, rep, 0.5))
            records.extend(
                record(LIFTBRIDGE, path, p, rep, 4.0) for path in spark_kafka.LIFTBRIDGE_WRITES
            )
    return records


def test_tables_have_every_path_at_every_partition_count() -> None:
    text = spark_kafka.render_tables(full_records(), (1, 4))
    lines = text.splitlines()
    compact = lines[2 : 2 + len(spark_kafka.ROWS)]
    assert compact[0] == "| batch count() | 1 / 4 | 1.0k / 1.0k | 417 / 417 | 0.42 / 0.42 |"
    assert compact[-1].startswith("| client `send()` pipelined, NATS (no Spark) (")
    assert compact[-1].endswith("| 1 / 4 | - | 250 / 250 | - |")
    # idempotent and exactlyOnce compare with Kafka's plain sink (2000 rows/s).
    assert (
        "| idempotent write, NATS (vs Kafka's plain sink) | 1 / 4 | 2.0k / 2.0k | 250 / 250 |"
        in text
    )
    # Spreads (rates 500 and 333), ratio and CPU per row (us): 0.01 s and 0.005 s / 1000 rows.
    assert "| batch count() | 4 | 1.0k (1.0k..1.0k) | 417 (333..500) | 0.42 (0.33..0.50) |" in text
    assert "| 10.0 / 10.0 | 5.0 / 5.0 |" in text
    assert "| plain write, NATS (`natsServers`) | 1 | 1.00 (1.00..1.00) |" in text  # own publish
    detail = [line for line in lines if line.startswith("| batch to parquet | ")]
    assert [line.split(" | ")[1] for line in detail] == ["1 / 4", "1", "4"]


def test_read_committed_table_compares_with_a_plain_read_of_the_same_stream(
    tmp_path: Path,
) -> None:
    records = []
    for rep, (committed, plain, read) in enumerate([(4.0, 2.0, 1.5), (2.0, 2.0, 1.0)]):
        records.append(record(LIFTBRIDGE, "rc_stream", 4, rep, committed, rows=8000))
        records[-1]["read_per_stored"] = read
        records.append(record(LIFTBRIDGE, "rc_stream_plain", 4, rep, plain, rows=8000))
    text = spark_kafka.render_tables(records, (1, 4))
    row = [line for line in text.splitlines() if line.startswith("| streaming to parquet")]
    # 4.0k and 2.0k messages/s plain; 2.0k and 4.0k read_committed; ratios 0.5 and 1.0.
    assert row == [
        "| streaming to parquet, 8 micro-batches, transactions of 10 producers per partition "
        "interleaved across them | 4 | 4.0k (4.0k..4.0k) | 3.0k (2.0k..4.0k) | "
        "0.75 (0.50..1.00) | 1.25 (1.00..1.50) |"
    ]
    assert "batch count() of an unpacked" not in text  # not measured: no line
    assert "read_committed, against" not in spark_kafka.render_tables([], (1,))

    stats = tmp_path / "stats.jsonl"
    assert spark_kafka.stats_ratio(stats) is None
    stats.write_text('{"bytes": 300, "reread_bytes": 30}\n{"bytes": 100, "reread_bytes": 0}\n')
    assert spark_kafka.stats_ratio(stats) == pytest.approx(430 / 400)


def test_missing_figures_are_dashes() -> None:
    text = spark_kafka.render_tables([record(KAFKA, "count", 1, 0, 1.0)], (1,))
    assert "| batch count() | 1 | 1.0k | - | - | 10.0 / - | 5.0 / - |" in text
    assert "ratio to the client's own" not in text


def results(records: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "started": "2026-11-26T12:00:00+00:00",
        "seconds": 600.0,
        "plan": {"name": "full", "rows": 1000, "size": 256, "reps": 2, "partitions": [1, 4]},
        "environment": {
            "git": "abc1234",
            "pyspark": "4.3.0",
            "java": "OpenJDK 17",
            "python": "3.11.7",
            "liftbridge": "v1.9.0",
            "liftbridge_log_level": "info",
            "kafka": "4.1.2",
            "spark_kafka_package": spark_kafka.SPARK_KAFKA_PACKAGE,
        },
        "machine": {"cpu_model": "CPU", "nproc": 2, "ram_gib": 24, "os": "Linux", "python": "3.11"},
        "load_average": {"before": "1 1 1", "after": "2 2 2"},
        "records": records,
    }


def test_docs_block_names_versions_and_failures_and_splices_in_place() -> None:
    records = [*full_records(), record(LIFTBRIDGE, "count", 1, 1, 1.0, problem="boom")]
    block = spark_kafka.markdown(results(records))
    assert block.startswith(spark_kafka.BLOCK_START)
    assert block.endswith(spark_kafka.BLOCK_END)
    for fact in ("2026-11-26", "pyspark 4.3.0", "Kafka 4.1.2", "v1.9.0", "log level info"):
        assert fact in block
    assert "spark-sql-kafka-0-10_2.13:4.2.0" in block
    assert "- liftbridge count at 1 partition(s), repetition 2: boom" in block

    page = "# Spark connector benchmarks\n\nIntro.\n\n## Other section\n\nkept\n"
    once = spark_kafka.splice(page, block)
    assert once.startswith("# Spark connector benchmarks\n\n" + spark_kafka.BLOCK_START)
    assert once.count(spark_kafka.BLOCK_START) == 1
    assert once.endswith("Intro.\n\n## Other section\n\nkept\n")
    newer = block.replace("2026-11-26T12", "2026-12-01T12")
    twice = spark_kafka.splice(once, newer)
    assert twice == once.replace("2026-11-26T12", "2026-12-01T12")


def test_quick_plan_and_ivy_settings() -> None:
    assert Plan() == Plan("full", 200_000, 256, 3, (1, 4))
    assert (Plan.quick().rows, Plan.quick().reps) == (20_000, 1)
    root = ET.fromstring(spark_kafka.ivy_settings_xml(Path("/c/ivy/cache")))
    resolvers = list(root.find("resolvers") or [])
    # Maven Central only: Spark's default chain also asks a host this machine must not reach.
    assert [(r.get("name"), r.get("root")) for r in resolvers] == [
        ("central", "https://repo1.maven.org/maven2/")
    ]
    assert root.find("caches").get("defaultCacheDir") == "/c/ivy/cache"  # type: ignore[union-attr]


# --- the Kafka broker's configuration -------------------------------------------------------


def test_broker_listens_on_loopback_only(tmp_path: Path) -> None:
    props = kafka_broker.broker_properties(19092, 19093, tmp_path / "data")
    urls = [*props["listeners"].split(","), *props["advertised.listeners"].split(",")]
    assert urls == [
        "PLAINTEXT://127.0.0.1:19092",
        "CONTROLLER://127.0.0.1:19093",
        "PLAINTEXT://127.0.0.1:19092",
    ]
    assert props["controller.quorum.voters"] == "1@127.0.0.1:19093"
    assert props["process.roles"] == "broker,controller"
    assert props["log.dirs"] == str(tmp_path / "data")
    assert props["auto.create.topics.enable"] == "false"
    assert "0.0.0.0" not in kafka_broker.render_properties(props)
    with pytest.raises(ValueError, match="two ports"):
        kafka_broker.broker_properties(9092, 9092, tmp_path)
    with pytest.raises(ValueError, match="out of range"):
        kafka_broker.broker_properties(0, 9093, tmp_path)


def test_properties_render_one_line_each() -> None:
    text = kafka_broker.render_properties({"a.b": "1", "c": "x y"})
    assert text.splitlines()[1:] == ["a.b=1", "c=x y"]
    with pytest.raises(ValueError, match="one properties line"):
        kafka_broker.render_properties({"a": "1\nb=2"})


def test_pom_lists_the_broker_and_its_log_backend() -> None:
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    root = ET.fromstring(kafka_broker.pom_xml(kafka_broker.kafka_artifacts("4.1.2")))
    deps = [
        ":".join(
            d.findtext(f"m:{f}", namespaces=ns) or "" for f in ("groupId", "artifactId", "version")
        )
        for d in root.iterfind("m:dependencies/m:dependency", ns)
    ]
    assert deps == [
        "org.apache.kafka:kafka_2.13:4.1.2",
        f"org.apache.logging.log4j:log4j-slf4j-impl:{kafka_broker.LOG4J_VERSION}",
    ]


def test_cluster_ids_are_kafka_uuids() -> None:
    ids = {kafka_broker.new_cluster_id() for _ in range(20)}
    assert len(ids) == 20
    for cid in ids:
        assert len(cid) == 22
        assert len(base64.urlsafe_b64decode(cid + "==")) == 16
    assert kafka_broker.new_cluster_id(bytes(range(16))) == "AAECAwQFBgcICQoLDA0ODw"
    with pytest.raises(ValueError, match="reserves"):
        kafka_broker.new_cluster_id(bytes(16))
    with pytest.raises(ValueError, match="16 bytes"):
        kafka_broker.new_cluster_id(b"short")


def test_cluster_ids_never_start_with_a_dash() -> None:
    # 0xF8 as the first byte gives "-" as the first base64url character.
    dashed = bytes([0xF8]) + bytes(range(1, 16))
    with pytest.raises(ValueError, match="starts with '-'"):
        kafka_broker.new_cluster_id(dashed)
    drawn = [kafka_broker.new_cluster_id() for _ in range(2000)]  # ~31 dashes expected
    assert not [cid for cid in drawn if cid.startswith("-")]


def test_log4j_configuration_writes_to_stdout_at_the_level() -> None:
    text = kafka_broker.log4j2_properties("WARN")
    assert "rootLogger.level = WARN" in text
    assert "appender.out.type = Console" in text


# --- CPU of process trees -------------------------------------------------------------------


def stat_line(
    pid: int, ppid: int, utime: int, stime: int, *, comm: str = "x", start: int = 7
) -> str:
    # pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt
    # utime stime cutime cstime priority nice threads itrealvalue starttime ...
    return f"{pid} ({comm}) S {ppid} 1 1 0 -1 0 0 0 0 0 {utime} {stime} 3 4 20 0 1 0 {start} 0 0\n"


def test_parse_stat_survives_odd_command_names() -> None:
    times = parse_stat(stat_line(42, 7, 100, 50, comm="a) (b c", start=99))
    assert (times.ppid, times.utime, times.stime, times.cutime, times.cstime) == (7, 100, 50, 3, 4)
    assert times.starttime == 99
    assert times.own(100) == 1.5
    assert times.total(100) == 1.57


def test_subtree_leaves_out_excluded_servers_and_their_children() -> None:
    stats = {
        pid: parse_stat(stat_line(pid, ppid, 100, 0))
        for pid, ppid in {1: 0, 10: 1, 11: 10, 12: 11, 20: 10, 21: 20, 30: 1}.items()
    }
    assert subtree(10, stats) == {10, 11, 12, 20, 21}
    assert subtree(10, stats, exclude=[20]) == {10, 11, 12}
    assert subtree(99, stats) == set()
    assert tree_cpu(10, [20], stats, tick=100) == pytest.approx(3 * 1.07)


def write_proc(proc: Path, table: dict[int, tuple[int, int, int]]) -> None:
    """A fake /proc: pid -> (ppid, utime, starttime)."""
    for entry in proc.iterdir():
        if entry.name.isdigit() and int(entry.name) not in table:
            (entry / "stat").unlink()
            entry.rmdir()
    for pid, (ppid, utime, start) in table.items():
        (proc / str(pid)).mkdir(exist_ok=True)
        (proc / str(pid) / "stat").write_text(stat_line(pid, ppid, utime, 0, start=start))


def test_sampler_counts_workers_that_end_and_leaves_servers_out(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    proc.mkdir()
    # 10 = our driver, 11 = its JVM, 12 = a server it started, 13 = a worker of the JVM.
    write_proc(
        proc, {1: (0, 0, 1), 10: (1, 100, 5), 11: (10, 200, 6), 12: (10, 50, 6), 13: (11, 10, 8)}
    )
    sampler = TreeCpuSampler(10, [12], interval=3600, proc=proc, tick=100)
    sampler.start()
    # The JVM forks a worker (14) with a child (15); the worker 13 ends after using 30 ticks
    # more; the server and an unrelated process (16) work too.
    write_proc(
        proc,
        {1: (0, 0, 1), 10: (1, 110, 5), 11: (10, 260, 6), 12: (10, 500, 6), 13: (11, 40, 8),
         14: (11, 20, 9), 15: (14, 5, 9), 16: (1, 900, 9)},
    )  # fmt: skip
    sampler.sample()
    write_proc(
        proc,
        {1: (0, 0, 1), 10: (1, 120, 5), 11: (10, 300, 6), 12: (10, 900, 6), 14: (11, 30, 9),
         15: (14, 5, 9), 16: (1, 1900, 9), 17: (12, 70, 9)},
    )  # fmt: skip
    # driver +20, JVM +100, worker 13 +30 (last seen), worker 14 30, its child 5; the
    # server, its child 17 and the unrelated process are not counted.
    assert sampler.stop() == pytest.approx(1.85)


def test_sampler_tells_a_reused_pid_from_the_old_process(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    proc.mkdir()
    write_proc(proc, {1: (0, 0, 1), 10: (1, 0, 5), 13: (10, 500, 6)})
    sampler = TreeCpuSampler(10, interval=3600, proc=proc, tick=100).start()
    write_proc(proc, {1: (0, 0, 1), 10: (1, 0, 5), 13: (10, 40, 9)})  # 13 ended; pid reused
    # Neither 500 - 40 subtracted nor the new process's 40 taken for the old one's.
    assert sampler.stop() == pytest.approx(0.0)


def test_sampler_measures_a_real_child_that_burns_cpu() -> None:
    import os

    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\n"
    sampler = TreeCpuSampler(os.getpid(), interval=0.02).start()
    subprocess.run([sys.executable, "-c", burn], check=True)
    # The child's 0.3 s and its interpreter's start, less at most one interval it was not
    # sampled; this process's own CPU meanwhile is small.
    assert 0.25 <= sampler.stop() <= 1.5
