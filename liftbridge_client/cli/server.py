"""``liftbridge server``: a local single node with embedded NATS, until Ctrl-C."""

from __future__ import annotations

import contextlib
import signal
import socket
import threading
from types import FrameType

import click

from liftbridge_client.cli._app import cli, fail
from liftbridge_client.cli._exit import ExitStatus
from liftbridge_client.cli._output import err_console

__all__ = ["server"]


def _in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


@cli.command()
@click.option(
    "-p",
    "--port",
    type=click.IntRange(0, 65535),
    default=9292,
    show_default=True,
    help="gRPC port (0: a free one).",
)
@click.option(
    "--nats-port",
    type=click.IntRange(0, 65535),
    default=4222,
    show_default=True,
    help="Embedded NATS port (0: a free one).",
)
@click.option(
    "--server-version",
    default=None,
    help="Liftbridge version to run: v1.9.0 (the default), v1.7.1, or master (built "
    "from a source snapshot, see docs/compatibility.md).",
)
def server(port: int, nats_port: int, server_version: str | None) -> None:
    """Run Liftbridge with embedded NATS on 127.0.0.1 until Ctrl-C.

    The pinned Liftbridge release is built once (needs Go) and cached. Data lives
    in a temporary directory, removed on exit. Cursors are enabled.
    """
    from liftbridge_client.testing import LIFTBRIDGE_VERSION, HarnessError, SingleNode

    for flag, value in (("--port", port), ("--nats-port", nats_port)):
        if value and _in_use(value):
            fail(f"port {value} is in use ({flag} 0 picks a free one)", ExitStatus.USAGE)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    # Ctrl-C and process managers' SIGTERM both stop the servers cleanly.
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, on_signal)
    version = server_version or LIFTBRIDGE_VERSION
    err_console.print(f"starting Liftbridge {version} on 127.0.0.1...")
    try:
        node = SingleNode(port=port or None, nats_port=nats_port or None, version=version)
        with node:
            # Plain lines (never wrapped), ready for `export` or an env file.
            click.echo(f"LIFTBRIDGE_ADDRS={node.address}")
            click.echo(f"LIFTBRIDGE_NATS_URL={node.nats_url}")
            err_console.print(f"log: {node.node.log_path}")
            err_console.print("ready; Ctrl-C to stop")
            with contextlib.suppress(KeyboardInterrupt):
                while not stop.wait(1.0):
                    if not node.node.running:
                        fail(f"the server exited; log:\n{node.node.tail(20)}")
            err_console.print("stopping")
    except HarnessError as exc:
        fail(str(exc))
    err_console.print("stopped")
