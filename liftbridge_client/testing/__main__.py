"""Command line: ``python -m liftbridge_client.testing {provision,run,docker-image}``.

- ``provision``: find or build the server binaries; print their paths, versions and the
  time taken (``make servers`` runs this).
- ``run``: start a single node (or ``--cluster``) on 127.0.0.1, print the gRPC address(es)
  and NATS URL, and serve until Ctrl-C (or SIGTERM).
- ``docker-image``: build the Liftbridge and nats-server images locally (``make docker-image``).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import time
from collections.abc import Sequence
from types import FrameType

from liftbridge_client.testing._deployments import Cluster, SingleNode
from liftbridge_client.testing._errors import HarnessError
from liftbridge_client.testing._provision import provision


def _provision(_: argparse.Namespace) -> int:
    report = provision()
    print(f"liftbridge   {report.liftbridge_version:<10} {report.liftbridge}")
    print(f"nats-server  {report.nats_server_version:<10} {report.nats_server}")
    print(f"go           {report.go_version or 'not found'}")
    print(f"took {report.seconds:.2f} s")
    return 0


def _docker_image(_: argparse.Namespace) -> int:
    from liftbridge_client.testing._docker_images import build_images

    report = build_images()
    print(f"liftbridge   {report.liftbridge_image}")
    print(f"nats-server  {' '.join(report.nats_images)}")
    print(f"took {report.seconds:.2f} s")
    return 0


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def _run(args: argparse.Namespace) -> int:
    started = time.monotonic()
    deployment: SingleNode | Cluster = Cluster(3) if args.cluster else SingleNode()
    # SIGINT may be ignored when started in the background; SIGTERM comes from process
    # managers. Both stop the servers like Ctrl-C.
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _raise_interrupt)
    with deployment:
        print(f"ready in {time.monotonic() - started:.1f} s", flush=True)
        print(f"LIFTBRIDGE_ADDRS={','.join(deployment.addresses)}")
        print(f"LIFTBRIDGE_NATS_URL={deployment.nats_url}")
        for name, path in _log_paths(deployment):
            print(f"log {name}: {path}")
        print("Ctrl-C to stop", flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            print("stopping", flush=True)
    return 0


def _log_paths(deployment: SingleNode | Cluster) -> list[tuple[str, str]]:
    if isinstance(deployment, SingleNode):
        return [(deployment.node.server_id, str(deployment.node.log_path))]
    servers = [("nats", deployment.nats.log_path)]
    servers += [(node.server_id, node.log_path) for node in deployment.nodes]
    return [(name, str(path)) for name, path in servers]


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the process exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m liftbridge_client.testing",
        description="Provision and run Liftbridge + NATS servers on 127.0.0.1.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("provision", help="build/find the server binaries").set_defaults(
        func=_provision
    )
    run = commands.add_parser("run", help="run servers until Ctrl-C")
    run.add_argument("--cluster", action="store_true", help="3 nodes on one NATS server")
    run.set_defaults(func=_run)
    commands.add_parser(
        "docker-image", help="build the Liftbridge and nats-server images locally"
    ).set_defaults(func=_docker_image)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(message)s",
        stream=sys.stderr,
    )
    try:
        status: int = args.func(args)
    except HarnessError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return status


if __name__ == "__main__":
    sys.exit(main())
