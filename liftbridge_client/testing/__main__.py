"""Command line: ``python -m liftbridge_client.testing {provision,run,docker-image}``.

- ``provision``: find or build the server binaries; print their paths, versions and the
  time taken. ``--all`` (what ``make servers`` runs) provisions every known server version;
  a missing master snapshot is then a warning, or an error when ``$CI`` is set.
  ``--server-version V`` (repeatable) picks versions; the default is the pinned release.
- ``run``: start a single node (or ``--cluster``) on 127.0.0.1, print the gRPC address(es)
  and NATS URL, and serve until Ctrl-C (or SIGTERM).
- ``docker-image``: build the Liftbridge and nats-server images locally (``make docker-image``).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import time
from collections.abc import Sequence
from types import FrameType

from liftbridge_client.testing._deployments import Cluster, SingleNode
from liftbridge_client.testing._errors import HarnessError, SnapshotMissingError
from liftbridge_client.testing._provision import LIFTBRIDGE_VERSION, provision
from liftbridge_client.testing._versions import KNOWN_VERSIONS, server_version


def _provision(args: argparse.Namespace) -> int:
    if args.all:
        versions = [v.name for v in KNOWN_VERSIONS]
    else:
        versions = args.server_version or [LIFTBRIDGE_VERSION]
    started = time.monotonic()
    reports = []
    for version in versions:
        try:
            reports.append(provision(version))
        except SnapshotMissingError as exc:
            if not args.all or os.environ.get("CI"):
                raise
            print(f"warning: {exc}; tests of {version} will be deselected", file=sys.stderr)
    for report in reports:
        print(f"liftbridge   {report.liftbridge_version:<20} {report.liftbridge}")
    last = reports[-1]
    print(f"nats-server  {last.nats_server_version:<20} {last.nats_server}")
    print(f"go           {last.go_version or 'not found'}")
    print(f"took {time.monotonic() - started:.2f} s")
    return 0


def _docker_image(args: argparse.Namespace) -> int:
    from liftbridge_client.testing._docker_images import build_images

    report = build_images(version=server_version(args.server_version).name)
    print(f"liftbridge   {report.liftbridge_image}")
    print(f"nats-server  {' '.join(report.nats_images)}")
    print(f"took {report.seconds:.2f} s")
    return 0


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def _run(args: argparse.Namespace) -> int:
    started = time.monotonic()
    version = args.server_version or LIFTBRIDGE_VERSION
    deployment: SingleNode | Cluster = (
        Cluster(3, versions=version) if args.cluster else SingleNode(version=version)
    )
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
    prov = commands.add_parser("provision", help="build/find the server binaries")
    prov.add_argument("--all", action="store_true", help="every known server version")
    prov.add_argument(
        "--server-version",
        action="append",
        metavar="VERSION",
        help=f"a server version to provision (repeatable; default {LIFTBRIDGE_VERSION})",
    )
    prov.set_defaults(func=_provision)
    run = commands.add_parser("run", help="run servers until Ctrl-C")
    run.add_argument("--cluster", action="store_true", help="3 nodes on one NATS server")
    run.add_argument(
        "--server-version",
        metavar="VERSION",
        help=f"v1.9.0, v1.7.1, master or v1.9.0+lbc.1 (default {LIFTBRIDGE_VERSION})",
    )
    run.set_defaults(func=_run)
    image = commands.add_parser(
        "docker-image", help="build the Liftbridge and nats-server images locally"
    )
    image.add_argument(
        "--server-version",
        metavar="VERSION",
        default=LIFTBRIDGE_VERSION,
        help=f"v1.9.0 or v1.9.0+lbc.1 (tagged v1.9.0-lbc.1; default {LIFTBRIDGE_VERSION})",
    )
    image.set_defaults(func=_docker_image)
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
