"""A real Spark standalone cluster for the connector's tests: one Master and two Workers of
one core each, started with the pyspark wheel's ``spark-class``, everything bound to
127.0.0.1, work and logs in a temporary directory; and the runner for the driver programs
(tests/integration/spark_cluster_driver.py) that use it.

The drivers run in their own processes: a Python process holds one SparkSession, and the
other Spark test modules share a ``local[2,2]`` one in the pytest process.

Java is required: without it the fixture fails with a message saying so (never skips).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyspark
from spark_support import java_or_fail

from liftbridge_client.testing import free_ports

DRIVER = Path(__file__).with_name("spark_cluster_driver.py")
RESULT_PREFIX = "RESULT "
_READY_TIMEOUT = 90.0
_STOP_TIMEOUT = 20.0


def spark_class() -> Path:
    """The wheel's launcher (it needs no SPARK_HOME: it finds the wheel's jars itself)."""
    return Path(pyspark.__file__).parent / "bin" / "spark-class"


def base_env(scratch: Path) -> dict[str, str]:
    """The environment of every cluster process and driver: loopback only, this venv's
    Python everywhere (executors start their Python workers with PYSPARK_PYTHON)."""
    env = dict(os.environ)
    env.update(
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_LOCAL_HOSTNAME="127.0.0.1",
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        SPARK_LOCAL_DIRS=str(scratch),
        SPARK_LOG_DIR=str(scratch),
        SPARK_PID_DIR=str(scratch),
    )
    # Not inherited from a `local[...]` session's settings of this process.
    for var in ("SPARK_HOME", "PYSPARK_SUBMIT_ARGS", "SPARK_CONF_DIR"):
        env.pop(var, None)
    return env


@dataclass
class _Daemon:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def text(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def stop(self) -> None:
        """SIGTERM to the daemon's process group (its own session: a Worker's executors are
        in it too), SIGKILL to the group after a grace period."""
        pgid = self.popen.pid
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGTERM)
        try:
            self.popen.wait(_STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()
        # Executors a Worker started may outlive it for a moment: none may be left behind.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)


@dataclass
class StandaloneCluster:
    """A running Master with two one-core Workers."""

    master_url: str
    root: Path
    daemons: list[_Daemon] = field(default_factory=list)

    def logs(self, lines: int = 60) -> str:
        """The last ``lines`` lines of each daemon's log and of each executor's stderr."""
        parts = [
            f"----- {d.name} ({d.log}) -----\n" + "\n".join(d.text().splitlines()[-lines:])
            for d in self.daemons
        ]
        for path in sorted((self.root / "work").glob("*/*/stderr")):
            tail = "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
            name = f"{path.parent.parent.name}/{path.parent.name}"
            parts.append(f"----- executor {name} -----\n{tail}")
        return "\n".join(parts)

    def launched_executors(self, app_id: str) -> int:
        """How many executors the Workers were asked to launch for ``app_id`` (a Worker
        launches a replacement when one of them exits)."""
        needle = f"Asked to launch executor {app_id}/"
        return sum(d.text().count(needle) for d in self.daemons if d.name.startswith("worker"))

    def env(self) -> dict[str, str]:
        return base_env(self.root / "scratch")

    def run_driver(
        self, scenario: str, args: Mapping[str, Any], timeout: float = 200.0
    ) -> dict[str, Any]:
        """Run ``scenario`` of spark_cluster_driver.py with ``args`` against this cluster in
        a new Python process and return the JSON it prints. Its output and the cluster's
        logs are printed (pytest shows them when the test fails)."""
        argv = [sys.executable, str(DRIVER), scenario, self.master_url, json.dumps(dict(args))]
        started = time.monotonic()
        popen = subprocess.Popen(
            argv,
            env=self.env(),
            cwd=self.root,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # its JVM and Python workers stopped with it, below
        )
        try:
            out, err = popen.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(popen.pid, signal.SIGKILL)
            out, err = popen.communicate()
        elapsed = time.monotonic() - started
        stdout, stderr = out.decode(errors="replace"), err.decode(errors="replace")
        print(f"===== driver {scenario}: exit {popen.returncode} after {elapsed:.1f} s =====")
        print(stdout)
        print("\n".join(stderr.splitlines()[-150:]))
        print(self.logs())
        results = [ln for ln in stdout.splitlines() if ln.startswith(RESULT_PREFIX)]
        if popen.returncode != 0 or not results:
            tail = "\n".join(stderr.splitlines()[-40:])
            raise AssertionError(
                f"the {scenario} driver exited {popen.returncode} after {elapsed:.0f} s "
                f"(timeout {timeout:.0f} s) without a result:\n{tail}"
            )
        result: dict[str, Any] = json.loads(results[-1][len(RESULT_PREFIX) :])
        result["elapsed_s"] = elapsed
        return result


def _start(name: str, argv: list[str], env: Mapping[str, str], log: Path) -> _Daemon:
    setpriv = shutil.which("setpriv")
    # The daemon dies with this process even when pytest is killed outright (the signal is
    # tied to the starting thread, so only from the main thread).
    prefix = [setpriv, "--pdeathsig", "KILL", "--"] if setpriv else []
    with log.open("ab") as out:
        popen = subprocess.Popen(
            [*prefix, *argv],
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return _Daemon(name, popen, log)


def _wait_for(daemon: _Daemon, pattern: str, cluster: StandaloneCluster) -> None:
    deadline = time.monotonic() + _READY_TIMEOUT
    while not re.search(pattern, daemon.text()):
        if daemon.popen.poll() is not None or time.monotonic() > deadline:
            state = (
                f"exited {daemon.popen.returncode}"
                if daemon.popen.poll() is not None
                else f"not ready after {_READY_TIMEOUT:.0f} s"
            )
            raise AssertionError(
                f"the Spark standalone {daemon.name} {state} (waiting for {pattern!r}):\n"
                + cluster.logs()
            )
        time.sleep(0.2)


def start_standalone_cluster(root: Path) -> Iterator[StandaloneCluster]:
    """Master + two Workers (``--cores 1 --memory 1g``) on 127.0.0.1, web UIs on free
    loopback ports; stopped (process groups included) and ``root`` removed afterwards."""
    java_or_fail()
    for sub in ("work", "scratch", "logs"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    master_port, master_ui, *worker_ports = free_ports(6)
    cluster = StandaloneCluster(f"spark://127.0.0.1:{master_port}", root)
    env = cluster.env()
    # The Master's REST submission server would listen on a fixed port (6066): two runs on
    # one machine would collide, and nothing here submits through it.
    env["SPARK_MASTER_OPTS"] = "-Dspark.master.rest.enabled=false"
    launcher = str(spark_class())
    try:
        master = _start(
            "master",
            [
                launcher,
                "org.apache.spark.deploy.master.Master",
                *("--host", "127.0.0.1", "--port", str(master_port)),
                *("--webui-port", str(master_ui)),
            ],
            env,
            root / "logs" / "master.log",
        )
        cluster.daemons.append(master)
        _wait_for(master, r"New state: ALIVE", cluster)
        workers = []
        for i in range(2):
            port, ui = worker_ports[2 * i], worker_ports[2 * i + 1]
            worker = _start(
                f"worker-{i}",
                [
                    launcher,
                    "org.apache.spark.deploy.worker.Worker",
                    *("--host", "127.0.0.1", "--port", str(port), "--webui-port", str(ui)),
                    *("--cores", "1", "--memory", "1g"),
                    *("--work-dir", str(root / "work")),
                    cluster.master_url,
                ],
                env,
                root / "logs" / f"worker-{i}.log",
            )
            cluster.daemons.append(worker)
            workers.append(worker)
        for worker in workers:
            _wait_for(worker, r"Successfully registered with master", cluster)
        yield cluster
    finally:
        for daemon in reversed(cluster.daemons):  # workers (and their executors) first
            daemon.stop()
        shutil.rmtree(root, ignore_errors=True)


def executor_pids(app_id: str) -> list[int]:
    """The pids of this application's executor JVMs (CoarseGrainedExecutorBackend processes
    whose command line names ``app_id``), from /proc."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:  # ended meanwhile, or not ours to read
            continue
        if b"org.apache.spark.executor.CoarseGrainedExecutorBackend" in argv and (
            app_id.encode() in argv
        ):
            pids.append(int(proc.name))
    return pids


def wait_for_no_executors(app_id: str, timeout: float = 30.0) -> list[int]:
    """Wait until no executor JVM of ``app_id`` is left (Workers end them when the
    application ends); the pids still alive after ``timeout``."""
    deadline = time.monotonic() + timeout
    while (pids := executor_pids(app_id)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return pids
