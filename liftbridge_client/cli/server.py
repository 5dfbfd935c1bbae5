"""``liftbridge server``: a local development server (one node, embedded NATS), until Ctrl-C.

It runs on the testing harness's `SingleNode` (or `DockerSingleNode` with ``--docker``) but
named as a plain Liftbridge install is: the server's default namespace, so the cursors
stream listens on ``liftbridge-default.cursors``, not on a test's unique subject.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Protocol

import click

from liftbridge_client.cli._app import cli, fail
from liftbridge_client.cli._exit import ExitStatus
from liftbridge_client.cli._output import err_console

if TYPE_CHECKING:
    from liftbridge_client.testing._docker_cli import DockerCLI

__all__ = ["NAMESPACE", "server"]

NAMESPACE = "liftbridge-default"
"""The namespace the ``liftbridge`` binary takes when given none (its ``--ns`` default)."""

DEFAULT_PORT = 9292
DEFAULT_NATS_PORT = 4222


class _Running(Protocol):
    @property
    def address(self) -> str: ...

    @property
    def nats_url(self) -> str: ...


def _in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # As the servers bind: connections of a run just stopped (TIME_WAIT) leave the
        # port usable, and a restart right after Ctrl-C must not be refused.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


@contextlib.contextmanager
def _stop_on_signals() -> Iterator[threading.Event]:
    """An event set by Ctrl-C (SIGINT) or a process manager's SIGTERM."""
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _announce(node: _Running, port: int, nats_port: int, where: str) -> None:
    # stdout: plain lines (never wrapped), ready for `export` or an env file.
    click.echo(f"LIFTBRIDGE_ADDRS={node.address}")
    click.echo(f"LIFTBRIDGE_NATS_URL={node.nats_url}")
    flags = f"-b {node.address} --nats {node.nats_url}"
    if (port, nats_port) == (DEFAULT_PORT, DEFAULT_NATS_PORT):
        err_console.print(f"connect: {flags} (every command's default)", soft_wrap=True)
    else:
        err_console.print(
            f"connect: liftbridge {flags} COMMAND (or export the two lines above)",
            soft_wrap=True,
        )
    err_console.print(where, soft_wrap=True)
    err_console.print("ready; Ctrl-C to stop")


def _docker_daemon() -> DockerCLI:
    """The docker CLI, once a daemon answers; otherwise the command fails saying so.

    No fallback to a local binary: --docker asked for the image.
    """
    from liftbridge_client.testing import HarnessError
    from liftbridge_client.testing._docker_cli import DockerCLI

    found = shutil.which(os.environ.get("LIFTBRIDGE_DOCKER", "").strip() or "docker")
    if found is None:
        fail(
            "--docker needs docker: no `docker` command found (install it, e.g. Debian's "
            "docker.io, or run without --docker)",
            ExitStatus.UNREACHABLE,
        )
        raise AssertionError("unreachable")
    docker = DockerCLI(found)
    try:
        docker.server_version()
    except HarnessError as exc:
        said = [line for line in str(exc).splitlines() if line.strip()]
        fail(
            f"--docker needs a running docker daemon; `docker version` says: "
            f"{said[-1] if said else exc}",
            ExitStatus.UNREACHABLE,
        )
    return docker


@cli.command()
@click.option(
    "-p",
    "--port",
    type=click.IntRange(0, 65535),
    default=DEFAULT_PORT,
    show_default=True,
    help="gRPC port (0: a free one).",
)
@click.option(
    "--nats-port",
    type=click.IntRange(0, 65535),
    default=DEFAULT_NATS_PORT,
    show_default=True,
    help="Embedded NATS port (0: a free one).",
)
@click.option(
    "-d",
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Keep the data here, across runs (default: a temporary directory, removed on exit).",
)
@click.option(
    "--server-version",
    default=None,
    help="Liftbridge version to run: v1.9.0 (the default), v1.7.1, or master (built "
    "from a source snapshot, see the compatibility docs).",
)
@click.option(
    "--docker",
    is_flag=True,
    help="Run the locally built liftbridge-client/liftbridge image instead of a binary "
    "(needs a docker daemon; the image is built on first use).",
)
def server(
    port: int, nats_port: int, data_dir: Path | None, server_version: str | None, docker: bool
) -> None:
    """Run a Liftbridge development server on 127.0.0.1 until Ctrl-C.

    One node with embedded NATS and cursors enabled, named as a plain Liftbridge
    install (namespace liftbridge-default). The pinned Liftbridge release is built once
    (needs Go) and cached. Ctrl-C or SIGTERM stops it cleanly.
    """
    from liftbridge_client.testing import LIFTBRIDGE_VERSION, HarnessError

    if docker and data_dir is not None:
        raise click.UsageError(
            "--data-dir is for the local binary: with --docker the data lives in the "
            "container, removed with it"
        )
    for flag, value in (("--port", port), ("--nats-port", nats_port)):
        if value and _in_use(value):
            fail(f"port {value} is in use ({flag} 0 picks a free one)", ExitStatus.USAGE)
    version = server_version or LIFTBRIDGE_VERSION
    with _stop_on_signals() as stop:
        try:
            if docker:
                _run_docker(port, nats_port, version, stop)
            else:
                _run_local(port, nats_port, version, data_dir, stop)
        except HarnessError as exc:
            fail(str(exc))
    err_console.print("stopped")


def _run_local(
    port: int, nats_port: int, version: str, data_dir: Path | None, stop: threading.Event
) -> None:
    from liftbridge_client.testing import SingleNode

    err_console.print(f"starting Liftbridge {version} on 127.0.0.1...")
    node = SingleNode(
        port=port or None,
        nats_port=nats_port or None,
        version=version,
        base_dir=data_dir,
        namespace=NAMESPACE,
    )
    with node:
        where = f"data: {data_dir} (kept)" if data_dir else "data: temporary, removed on exit"
        _announce(node, port, nats_port, f"{where}; log: {node.node.log_path}")
        while not stop.wait(0.5):
            if not node.node.running:
                fail(f"the server exited; log:\n{node.node.tail(20)}")
        err_console.print("stopping")


def _run_docker(port: int, nats_port: int, version: str, stop: threading.Event) -> None:
    from liftbridge_client.testing import DockerSingleNode, ensure_images

    docker = _docker_daemon()
    err_console.print(f"preparing the liftbridge-client/liftbridge:{version} image...")
    image = ensure_images(version=version, cli=docker).liftbridge_image
    err_console.print(f"starting {image} on 127.0.0.1 (host network)...")
    node = DockerSingleNode(
        image=image,
        cli=docker,
        name=f"liftbridge-dev-{uuid.uuid4().hex[:8]}",
        port=port or None,
        nats_port=nats_port or None,
        namespace=NAMESPACE,
    )
    with node:
        _announce(
            node,
            port,
            nats_port,
            f"container: {node.node.name} (removed on exit, with its data)",
        )
        while not stop.wait(0.5):
            if not node.node.running:
                fail(f"the container exited; its output:\n{node.node.tail(20)}")
        err_console.print("stopping")
