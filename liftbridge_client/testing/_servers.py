"""One server each: a standalone NATS server and a Liftbridge node.

Both keep their ports (and a node its data directory) across :meth:`stop` / :meth:`start`,
so a restarted server is the same server to its peers and clients. Output goes to
``<workdir>/server.log``, appended across restarts.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import socket
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

import grpc

from liftbridge_client.testing._config import (
    LOOPBACK,
    NodeConfig,
    StrPath,
    check_loopback,
    nats_server_argv,
    nats_url,
)
from liftbridge_client.testing._errors import ConfigError, ServerStartError
from liftbridge_client.testing._probe import wait_serving
from liftbridge_client.testing._process import ServerProcess, free_ports
from liftbridge_client.testing._provision import (
    LIFTBRIDGE_VERSION,
    binary_version,
    binary_version_text,
    liftbridge_binary,
    nats_server_binary,
)
from liftbridge_client.testing._versions import (
    TELEMETRY_OFF_LINE,
    needs_telemetry_off,
    server_version,
)

__all__ = ["LiftbridgeNode", "NatsServer"]

_LOG_TAIL = 80
_NATS_START_TIMEOUT = 10.0
_NODE_START_TIMEOUT = 30.0


class _Server:
    """What both servers share: a :class:`ServerProcess`, a log, start/stop/kill."""

    process: ServerProcess

    @property
    def log_path(self) -> Path:
        """The server's log file (stdout and stderr, every run)."""
        return self.process.log_path

    @property
    def running(self) -> bool:
        """True while the server process is alive."""
        return self.process.running

    @property
    def exited_unexpectedly(self) -> bool:
        """True when the process ended without :meth:`stop` or :meth:`kill` (a crash)."""
        return self.process.exited_unexpectedly

    @property
    def returncode(self) -> int | None:
        """Exit status of the last run (negative: killed by that signal), None if alive."""
        return self.process.returncode

    def logs(self) -> str:
        """The whole log as text."""
        return self.process.logs()

    def tail(self, lines: int = _LOG_TAIL) -> str:
        """The last ``lines`` lines of the log."""
        return self.process.tail(lines)

    def stop(self, timeout: float = 15.0) -> int | None:
        """Graceful stop: SIGINT, then wait (SIGKILL after ``timeout`` s). Returns the status."""
        return self.process.stop(timeout)

    def kill(self) -> int | None:
        """Hard stop: SIGKILL and wait. Returns the exit status."""
        return self.process.kill()

    def check_alive(self) -> None:
        """Raise :class:`ServerStartError`, with the log tail, if the process has exited."""
        if not self.process.running:
            raise ServerStartError(
                f"{self.process.name} exited with status {self.process.returncode} while "
                f"starting; last lines of {self.log_path}:\n{self.tail()}"
            )

    def start(self) -> Self:
        """Start the server and wait until it is ready."""
        raise NotImplementedError

    def __enter__(self) -> Self:
        if not self.running:
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class NatsServer(_Server):
    """A standalone ``nats-server`` on ``127.0.0.1:port``, restartable on the same port."""

    def __init__(
        self,
        workdir: StrPath,
        *,
        port: int | None = None,
        binary: StrPath | None = None,
        config: str | None = None,
        host: str = LOOPBACK,
        args: Sequence[str] = (),
    ):
        """Describe the server (a free port is picked when ``port`` is None); not started.

        ``config`` is NATS configuration text (accounts, authorization, operator mode...)
        written to a file the server reads; the harness adds the loopback ``listen`` line,
        so ``config`` may not set ``listen``, ``host``, ``net`` or ``port``. ``host`` is
        the loopback address to bind (127.0.0.0/8 only). ``args`` are more command-line
        options (routes of a :class:`~liftbridge_client.testing._nats_cluster.NatsCluster`).
        """
        self.workdir = workdir = Path(workdir)
        self.host = check_loopback(host)
        self.port = port if port is not None else free_ports(1)[0]
        argv = nats_server_argv(
            Path(binary) if binary is not None else nats_server_binary(), self.port, self.host
        )
        if config is not None:
            for line in config.splitlines():
                key = line.strip().split(":", 1)[0].split("=", 1)[0].strip().lower()
                if key in {"listen", "host", "net", "port"}:
                    raise ConfigError(f"NATS config may not set {key!r}: the harness owns it")
            workdir.mkdir(parents=True, exist_ok=True)
            path = workdir / "nats.conf"
            path.write_text(f"listen: {self.host}:{self.port}\n{config}")
            argv = [argv[0], "-c", str(path)]
        argv = [*argv, *args]
        self.process = ServerProcess(f"nats-server:{self.port}", argv, workdir / "server.log")

    def __repr__(self) -> str:
        """Port and state."""
        return f"<NatsServer {self.url} {'running' if self.running else 'stopped'}>"

    @property
    def url(self) -> str:
        """The client URL, ``nats://<host>:<port>`` (host 127.0.0.1 by default)."""
        return nats_url(self.port, self.host)

    def start(self, *, timeout: float = _NATS_START_TIMEOUT) -> Self:
        """Start the server and wait until it greets clients with its INFO line."""
        self.process.start()
        try:
            self.wait_ready(timeout)
        except BaseException:
            self.process.kill()
            raise
        return self

    def restart(self, *, timeout: float = _NATS_START_TIMEOUT) -> Self:
        """Stop the server if it runs, then start it again on the same port."""
        self.stop()
        return self.start(timeout=timeout)

    def wait_ready(self, timeout: float = _NATS_START_TIMEOUT) -> None:
        """Block until a TCP client receives the server's ``INFO`` greeting."""
        deadline = time.monotonic() + timeout
        while True:
            self.check_alive()
            try:
                with socket.create_connection((self.host, self.port), timeout=0.5) as sock:
                    if sock.recv(4).startswith(b"INFO"):
                        return
            except OSError:
                pass
            if time.monotonic() >= deadline:
                raise ServerStartError(
                    f"{self.url} did not answer within {timeout:.0f} s; last lines of "
                    f"{self.log_path}:\n{self.tail()}"
                )
            time.sleep(0.05)


class LiftbridgeNode(_Server):
    """One Liftbridge server process, described by a :class:`NodeConfig`.

    :meth:`restart` (or :meth:`start` after :meth:`stop` / :meth:`kill`) runs the same
    server id on the same ports and data directory, so it rejoins with its state.
    """

    def __init__(
        self,
        config: NodeConfig,
        workdir: StrPath,
        *,
        binary: StrPath | None = None,
        probe_credentials: grpc.ChannelCredentials | None = None,
        version: str = LIFTBRIDGE_VERSION,
    ):
        """Write ``<workdir>/config.yaml`` for ``config``; the node is not started.

        ``version`` (see ``_versions``) picks the binary unless ``binary`` is given; a
        version that needs it gets ``telemetry.enabled: false`` in its config.
        ``probe_credentials``: TLS credentials for the readiness probe of a TLS node.
        """
        self.version = server_version(version).name
        if needs_telemetry_off(self.version) and not config.telemetry_off:
            config = dataclasses.replace(config, telemetry_off=True)
        self.config = config
        self.probe_credentials = probe_credentials
        self.workdir = workdir = Path(workdir)
        self.config_path = workdir / "config.yaml"
        workdir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(config.render())
        self.binary = Path(binary) if binary is not None else liftbridge_binary(self.version)
        argv = [str(self.binary), "-c", str(self.config_path)]
        self.process = ServerProcess(f"liftbridge:{config.server_id}", argv, workdir / "server.log")

    def __repr__(self) -> str:
        """Id, address and state."""
        state = "running" if self.running else "stopped"
        return f"<LiftbridgeNode {self.server_id} {self.address} {state}>"

    @property
    def server_id(self) -> str:
        """The node's ``clustering.server.id``."""
        return self.config.server_id

    @property
    def port(self) -> int:
        """The gRPC port on the node's host (127.0.0.1 unless its config says)."""
        return self.config.port

    @property
    def address(self) -> str:
        """The gRPC address, ``<host>:<port>`` (host 127.0.0.1 by default)."""
        return f"{self.config.host}:{self.config.port}"

    @property
    def data_dir(self) -> Path:
        """The node's data directory (kept across restarts)."""
        return self.config.data_dir

    def start(self, *, wait: bool = True, timeout: float = _NODE_START_TIMEOUT) -> Self:
        """Start the process; with ``wait``, block until it can create a stream.

        Refuses (:class:`ConfigError`) to start a build that may send telemetry (master, or
        any binary that does not report a release up to v1.9.0) unless its config file
        says ``telemetry.enabled: false``.
        """
        check_telemetry_off(self.binary, self.version, self.config_path)
        self.process.start()
        if wait:
            self.wait_ready(timeout)
        return self

    def restart(self, *, wait: bool = True, timeout: float = _NODE_START_TIMEOUT) -> Self:
        """Stop the node gracefully if it runs, then start it again with the same state."""
        self.stop()
        return self.start(wait=wait, timeout=timeout)

    def switch_version(self, version: str, *, binary: StrPath | None = None) -> None:
        """Run ``version`` from the next start on, with the same id, ports and data (an
        upgrade or downgrade in place). The node must be stopped; its config is rewritten
        (telemetry off for builds that need it, the key dropped for releases)."""
        if self.running:
            raise ConfigError(f"stop {self.server_id} before switching it to {version}")
        self.version = server_version(version).name
        self.config = dataclasses.replace(
            self.config, telemetry_off=needs_telemetry_off(self.version)
        )
        self.config_path.write_text(self.config.render())
        self.binary = Path(binary) if binary is not None else liftbridge_binary(self.version)
        self.process.argv = [str(self.binary), "-c", str(self.config_path)]

    def wait_ready(self, timeout: float = _NODE_START_TIMEOUT) -> None:
        """Block until a probe stream can be created through this node.

        That needs a metadata leader, so in a cluster it also means a quorum is up.
        """
        try:
            wait_serving(
                self.address,
                timeout=timeout,
                check_alive=self.check_alive,
                credentials=self.probe_credentials,
            )
        except ServerStartError as exc:
            if not self.running:
                raise
            raise ServerStartError(
                f"Liftbridge {self.server_id} is not ready: {exc}; last lines of "
                f"{self.log_path}:\n{self.tail()}"
            ) from exc


@functools.lru_cache(maxsize=32)
def _reports_unreleased(binary: Path, mtime_ns: int) -> bool:
    """True when ``binary --version`` names a build newer than v1.9.0 (master says ``dev``)."""
    text = binary_version_text(binary)
    if text is None:
        return False  # not runnable here: the declared version decides
    release = binary_version(binary)
    return release is None or needs_telemetry_off(release)


def check_telemetry_off(binary: Path, version: str, config_path: Path) -> None:
    """Raise :class:`ConfigError` unless a build that may phone home has telemetry off."""
    try:
        mtime_ns = os.stat(binary).st_mtime_ns
    except OSError:
        mtime_ns = 0
    if not (needs_telemetry_off(version) or _reports_unreleased(binary, mtime_ns)):
        return
    reported = version
    lines = {line.strip() for line in config_path.read_text().splitlines()}
    if TELEMETRY_OFF_LINE not in lines:
        raise ConfigError(
            f"refusing to start {binary} ({reported} or a build newer than v1.9.0): it sends "
            f"telemetry unless its config says `{TELEMETRY_OFF_LINE}`, and {config_path} "
            "does not"
        )
