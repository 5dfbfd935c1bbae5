"""The "liftbridge" data source on a real Spark standalone cluster (a Master and two Workers
of one core each on 127.0.0.1, from the pyspark wheel), not only ``local[N]``: executors in
JVMs of their own that can die, against a real Liftbridge v1.9.0 node.

Each test runs its Spark application in a driver process of its own
(spark_cluster_driver.py): one SparkSession per Python process, and the pytest process
keeps the local one of the other Spark modules.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from spark_cluster_support import StandaloneCluster, start_standalone_cluster, wait_for_no_executors
from spark_support import create_stream, publish, read_all
from test_spark_exactly_once import read_committed

from liftbridge_client.testing import Deployment, StreamNames

# Not in `make test` (tests/conftest.py): `make test-spark-cluster`. Each test
# starts one or two Spark applications (30-50 s each on a shared 2-core machine, twice that
# under load).
pytestmark = [pytest.mark.integration, pytest.mark.spark_cluster, pytest.mark.timeout(420)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    yield from start_standalone_cluster(tmp_path_factory.mktemp("standalone"))


def test_batch_read_on_the_cluster_equals_what_was_published(
    cluster: StandaloneCluster, liftbridge_server: Deployment, stream_names: StreamNames
) -> None:
    name, subject = stream_names()
    create_stream(liftbridge_server.addresses, subject, name, partitions=3)
    sent = [(b"k%d" % i, b"v%d" % i, i % 3) for i in range(3000)]
    publish(liftbridge_server.addresses, name, sent)

    result = cluster.run_driver(
        "batch_read", {"broker": liftbridge_server.addresses[0], "stream": name}
    )

    assert result["spark_partitions"] == 3
    rows = result["rows"]
    assert len(rows) == 3000
    assert {(k.encode(), v.encode(), p) for p, _, k, v in rows} == set(sent)
    for p in range(3):
        assert sorted(o for q, o, _, _ in rows if q == p) == list(range(1000))


def test_streaming_query_stopped_and_restarted_reads_each_message_once(
    cluster: StandaloneCluster,
    liftbridge_server: Deployment,
    stream_names: StreamNames,
    tmp_path: Path,
) -> None:
    name, subject = stream_names()
    create_stream(liftbridge_server.addresses, subject, name, partitions=2)
    publish(liftbridge_server.addresses, name, [(b"k", b"a%d" % i, i % 2) for i in range(2000)])
    query: dict[str, Any] = {
        "broker": liftbridge_server.addresses[0],
        "stream": name,
        "out": str(tmp_path / "out"),
        "checkpoint": str(tmp_path / "checkpoint"),
        "max_offsets_per_trigger": 400,
    }

    # Stopped after two micro-batches of 400, with 1200 messages left (a third batch may be
    # running: it is cut short, and the restart replays it from the checkpoint).
    first = cluster.run_driver("stream_to_parquet", {**query, "stop_after_batches": 2})
    assert len(first["batches"]) >= 2
    assert len(first["rows"]) < 2000
    publish(liftbridge_server.addresses, name, [(b"k", b"b%d" % i, i % 2) for i in range(600)])
    # A new driver process on the same checkpoint, until everything is in the sink.
    second = cluster.run_driver("stream_to_parquet", query)

    assert min(second["batches"]) > max(first["batches"])  # went on from the checkpoint
    counts = Counter((p, o, v) for p, o, v in second["rows"])
    assert sum(counts.values()) == 2600  # each message once
    assert {v for _, _, v in counts} == {f"a{i}" for i in range(2000)} | {
        f"b{i}" for i in range(600)
    }
    assert {(p, o) for p, o, _ in counts} == {(p, o) for p in (0, 1) for o in range(1300)}


def test_exactly_once_write_survives_a_killed_executor(
    cluster: StandaloneCluster,
    liftbridge_server: Deployment,
    stream_names: StreamNames,
    tmp_path: Path,
) -> None:
    name, subject = stream_names()
    create_stream(liftbridge_server.addresses, subject, name, partitions=2)
    flag, record = tmp_path / "kill", tmp_path / "record"
    flag.touch()
    record.mkdir()
    rows = 6000

    result = cluster.run_driver(
        "exactly_once_write_killed",
        {
            "broker": liftbridge_server.addresses[0],
            "stream": name,
            "rows": rows,
            # Task 0 holds rows 0-2999; it kills its executor at row 2500, once the sink
            # published (uncommitted) its first chunk of 1000 rows.
            "kill_at": 2500,
            "published_before_kill": 1000,
            "flag": str(flag),
            "record": str(record),
        },
    )

    killed = json.loads((record / "killed.json").read_text())
    assert result["app_id"] in killed["argv"]  # the JVM of this application's executor
    attempts = sorted(p.name.split("-")[1:] for p in record.glob("attempt-*"))
    # Task 0 ran again, in another executor: the Worker replaced the killed one, and the
    # other Worker's executor may have taken it first.
    retried = [(int(a), int(pid)) for task, a, pid in attempts if task == "0" and a != "0"]
    assert retried, attempts
    assert all(pid != killed["pid"] for _, pid in retried)
    # The standalone Worker replaced the killed executor: two at the start, then one more.
    assert cluster.launched_executors(result["app_id"]) >= 3
    assert wait_for_no_executors(result["app_id"]) == []  # the application's executors ended

    stored = Counter(m.value for m in read_all(liftbridge_server.addresses, name, 2))
    assert stored.pop(b"") == 2  # the ACK intents: one per partition
    copies = sum(n - 1 for n in stored.values())
    print(f"killed pid {killed['pid']}; attempts {attempts}; {copies} copies stored")
    assert copies >= 1000, "the executor was killed before its first chunks were published"
    committed = Counter(m.value for m in read_committed(liftbridge_server.addresses, name))
    assert set(committed) == {b"row-%d" % i for i in range(rows)}
    assert sum(committed.values()) == rows  # each row exactly once
