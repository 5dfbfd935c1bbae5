"""Apache Kafka as a benchmark peer: one KRaft node from Maven Central jars, on 127.0.0.1.

The jars are fetched once with Maven (``mvn dependency:copy-dependencies`` of a generated
pom: ``kafka_2.13`` and a log4j backend for its slf4j logging) into the same cache as the
Liftbridge servers (``$LIFTBRIDGE_CLIENT_CACHE``, the clone's git-ignored ``.servers/cache``
under ``make``)::

    <cache>/kafka-4.1.2/lib/*.jar        the broker's classpath
    <cache>/maven-repo/                  Maven's local repository for the download

A :class:`KafkaBroker` is a single node that is both broker and controller, with both
listeners on 127.0.0.1 only, its log directory in a fresh temporary directory (formatted
with a new cluster id at start, removed at stop) and ``auto.create.topics.enable=false``.
Topics are created and their offsets read by ``bench/java/KafkaAdmin.java``, run with the
broker's own jars (Java's single-file source launcher), so no Python Kafka client is needed.

Pure parts (the pom, the properties, the cluster id) are unit-tested without Java.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

from liftbridge_client.testing._config import LOOPBACK
from liftbridge_client.testing._process import ServerProcess, free_ports
from liftbridge_client.testing._provision import cache_root

__all__ = [
    "KAFKA_VERSION",
    "KafkaBroker",
    "KafkaError",
    "broker_properties",
    "kafka_artifacts",
    "log4j2_properties",
    "new_cluster_id",
    "pom_xml",
    "provision_kafka",
    "render_properties",
]

KAFKA_VERSION = "4.1.2"
"""The broker release (Scala 2.13 build). Kafka 4.x runs KRaft only, on Java 17+."""

LOG4J_VERSION = "2.25.3"
"""log4j-core as kafka-server 4.1.2 depends on it; its slf4j 1.x binding must match."""

ADMIN_SOURCE = Path(__file__).resolve().parent / "java" / "KafkaAdmin.java"
_STAMP = ".complete"
_READY_TIMEOUT = 60.0
_JVM_OPTIONS = (
    # What kafka-server-start.sh gives a broker by default.
    "-Xms1g",
    "-Xmx1g",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-Djava.awt.headless=true",
)


class KafkaError(RuntimeError):
    """The broker could not be provisioned, started or asked something."""


def kafka_artifacts(version: str = KAFKA_VERSION) -> tuple[str, ...]:
    """Maven coordinates (group:artifact:version) the broker's classpath is made of."""
    return (
        f"org.apache.kafka:kafka_2.13:{version}",
        f"org.apache.logging.log4j:log4j-slf4j-impl:{LOG4J_VERSION}",
    )


def pom_xml(artifacts: Sequence[str]) -> str:
    """A pom whose runtime dependencies are ``artifacts`` (for ``copy-dependencies``)."""
    deps = []
    for coordinate in artifacts:
        group, artifact, version = coordinate.split(":")
        deps.append(
            f"    <dependency><groupId>{group}</groupId><artifactId>{artifact}</artifactId>"
            f"<version>{version}</version></dependency>"
        )
    return (
        '<project xmlns="http://maven.apache.org/POM/4.0.0">\n'
        "  <modelVersion>4.0.0</modelVersion>\n"
        "  <groupId>liftbridge-client.bench</groupId><artifactId>kafka-broker</artifactId>"
        "<version>0</version>\n"
        "  <packaging>pom</packaging>\n"
        "  <dependencies>\n" + "\n".join(deps) + "\n  </dependencies>\n</project>\n"
    )


def kafka_home(version: str = KAFKA_VERSION) -> Path:
    """The cache directory of one Kafka version (``lib/`` holds its jars)."""
    return cache_root() / f"kafka-{version}"


def provision_kafka(version: str = KAFKA_VERSION) -> Path:
    """The directory of the broker's jars, fetched with Maven first when missing.

    Under an exclusive lock, into a temporary directory renamed into place, as the
    Liftbridge builds are: concurrent runs fetch once and never see half a download.
    """
    home = kafka_home(version)
    lib = home / "lib"
    if (home / _STAMP).is_file():
        return lib
    mvn = shutil.which("mvn")
    if mvn is None:
        raise KafkaError("Maven (`mvn`) is not on PATH: it fetches Kafka from Maven Central")
    home.mkdir(parents=True, exist_ok=True)
    with _exclusive_lock(home / ".lock"):
        if (home / _STAMP).is_file():
            return lib
        print(f"==> fetching Kafka {version} from Maven Central into {home}", flush=True)
        with tempfile.TemporaryDirectory(prefix=".fetch-", dir=home) as tmp:
            work = Path(tmp)
            (work / "pom.xml").write_text(pom_xml(kafka_artifacts(version)))
            done = subprocess.run(
                [
                    mvn, "-B", "-q", f"-Dmaven.repo.local={cache_root() / 'maven-repo'}",
                    "dependency:copy-dependencies", "-DincludeScope=runtime",
                    f"-DoutputDirectory={work / 'lib'}",
                ],
                cwd=work, capture_output=True, text=True, check=False, timeout=1200,
            )  # fmt: skip
            if done.returncode != 0 or not any((work / "lib").glob("kafka_2.13-*.jar")):
                raise KafkaError(
                    f"mvn could not fetch Kafka {version}:\n{(done.stdout + done.stderr)[-3000:]}"
                )
            shutil.rmtree(lib, ignore_errors=True)
            os.replace(work / "lib", lib)
        (home / _STAMP).write_text(f"{' '.join(kafka_artifacts(version))}\n")
    return lib


@contextlib.contextmanager
def _exclusive_lock(path: Path) -> Iterator[None]:
    with path.open("a") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def new_cluster_id(raw: bytes | None = None) -> str:
    """A KRaft cluster id: 16 random bytes, base64url without padding (as Kafka's Uuid).

    Kafka reserves the all-zero id and the id 1 (its metadata topic's), and, like Kafka's
    own ``Uuid.randomUuid``, a draw whose text starts with ``-`` is drawn again: one in 64
    does, and ``kafka-storage format -t -x...`` reads it as an option (the id goes missing).
    ``raw`` may be given (tests); then such ids are refused instead.
    """
    while True:
        data = uuid.uuid4().bytes if raw is None else raw
        if len(data) != 16:
            raise ValueError("a cluster id is 16 bytes")
        if int.from_bytes(data, "big") in (0, 1):
            raise ValueError("Kafka reserves this id")
        text = base64.urlsafe_b64encode(data).rstrip(b"=").decode()
        if not text.startswith("-"):
            return text
        if raw is not None:
            raise ValueError(f"the cluster id {text!r} starts with '-', which reads as an option")


def broker_properties(
    port: int, controller_port: int, log_dir: Path, node_id: int = 1
) -> dict[str, str]:
    """``server.properties`` of a combined broker and controller on 127.0.0.1 only."""
    for p in (port, controller_port):
        if not 0 < p < 65536:
            raise ValueError(f"port {p} is out of range")
    if port == controller_port:
        raise ValueError("the broker and controller listeners need two ports")
    return {
        "process.roles": "broker,controller",
        "node.id": str(node_id),
        "controller.quorum.voters": f"{node_id}@{LOOPBACK}:{controller_port}",
        "listeners": f"PLAINTEXT://{LOOPBACK}:{port},CONTROLLER://{LOOPBACK}:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://{LOOPBACK}:{port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(log_dir),
        "num.partitions": "1",
        "default.replication.factor": "1",
        "offsets.topic.replication.factor": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        "auto.create.topics.enable": "false",
    }


def render_properties(properties: Mapping[str, str]) -> str:
    """Java properties text, one ``key=value`` line each (values must be single-line)."""
    lines = ["# generated by bench/kafka_broker.py"]
    for key, value in properties.items():
        if "\n" in value or "\n" in key or "=" in key:
            raise ValueError(f"cannot write {key!r}={value!r} as one properties line")
        lines.append(f"{key}={value}")
    return "\n".join(lines) + "\n"


def log4j2_properties(level: str = "INFO") -> str:
    """log4j2 configuration: everything at ``level`` to stdout (the broker's log file)."""
    return (
        "status = warn\n"
        "appender.out.type = Console\n"
        "appender.out.name = STDOUT\n"
        "appender.out.layout.type = PatternLayout\n"
        "appender.out.layout.pattern = [%d] %p %m (%c)%n\n"
        f"rootLogger.level = {level}\n"
        "rootLogger.appenderRef.out.ref = STDOUT\n"
    )


class KafkaBroker:
    """One KRaft Kafka node on 127.0.0.1; ``with`` starts it and stops it, data wiped."""

    def __init__(self, version: str = KAFKA_VERSION, *, java: str | None = None) -> None:
        """Fetch the jars if needed, pick ports, write the configuration; nothing runs yet."""
        self.version = version
        self.java = java or shutil.which("java") or "java"
        self.lib = provision_kafka(version)
        self.dir = Path(tempfile.mkdtemp(prefix="kafka-bench-"))
        self.port, self.controller_port = free_ports(2)
        self.config = self.dir / "server.properties"
        self.config.write_text(
            render_properties(broker_properties(self.port, self.controller_port, self.dir / "data"))
        )
        (self.dir / "log4j2.properties").write_text(log4j2_properties())
        self.classpath = f"{self.lib}/*"
        self.process = ServerProcess(
            f"kafka:{self.port}",
            [
                self.java, *_JVM_OPTIONS,
                f"-Dlog4j2.configurationFile={self.dir / 'log4j2.properties'}",
                "-cp", self.classpath, "kafka.Kafka", str(self.config),
            ],
            self.dir / "server.log",
        )  # fmt: skip

    @property
    def bootstrap(self) -> str:
        """``127.0.0.1:<port>``, for ``kafka.bootstrap.servers``."""
        return f"{LOOPBACK}:{self.port}"

    @property
    def pid(self) -> int | None:
        """The broker JVM's pid while it runs."""
        return self.process.pid

    def start(self) -> Self:
        """Format the log directory with a new cluster id, start, wait for the port."""
        done = subprocess.run(
            [
                self.java, "-cp", self.classpath, "kafka.tools.StorageTool", "format",
                f"--cluster-id={new_cluster_id()}", "-c", str(self.config),
            ],
            capture_output=True, text=True, check=False, timeout=120,
        )  # fmt: skip
        if done.returncode != 0:
            raise KafkaError(f"formatting the log directory failed:\n{done.stdout}{done.stderr}")
        self.process.start()
        deadline = time.monotonic() + _READY_TIMEOUT
        while True:
            if not self.process.running:
                raise KafkaError(f"the broker exited while starting:\n{self.process.tail(60)}")
            with contextlib.suppress(OSError), socket.create_connection((LOOPBACK, self.port), 1):
                break
            if time.monotonic() > deadline:
                raise KafkaError(f"the broker did not listen within {_READY_TIMEOUT:.0f} s")
            time.sleep(0.2)
        return self

    def admin(self, *args: str) -> dict[str, int]:
        """Run ``KafkaAdmin.java`` against the broker; its RESULT object."""
        done = subprocess.run(
            [self.java, "-cp", self.classpath, str(ADMIN_SOURCE), self.bootstrap, *args],
            capture_output=True, text=True, check=False, timeout=300,
        )  # fmt: skip
        for line in done.stdout.splitlines():
            if line.startswith("RESULT "):
                result: dict[str, int] = json.loads(line.removeprefix("RESULT "))
                return result
        raise KafkaError(
            f"KafkaAdmin {' '.join(args)} failed (exit {done.returncode}):\n"
            f"{(done.stdout + done.stderr)[-3000:]}"
        )

    def create_topics(self, topics: Mapping[str, int]) -> None:
        """Create topics (name -> partitions) and wait until each partition has a leader."""
        if topics:
            self.admin("create", *(f"{name}:{parts}" for name, parts in topics.items()))

    def latest_offsets(self, topics: Sequence[str]) -> dict[str, int]:
        """Messages stored per topic (sum of each partition's latest offset)."""
        return self.admin("offsets", *topics) if topics else {}

    def close(self) -> None:
        """Stop the broker (SIGINT, SIGKILL after 15 s) and remove its data and log."""
        if self.process.exited_unexpectedly:
            print(f"the Kafka broker had exited; its log ended with:\n{self.process.tail(40)}")
        self.process.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> Self:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
