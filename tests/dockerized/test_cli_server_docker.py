"""`liftbridge server --docker`: the locally built image as a development server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from dockerized.compose_project import docker_inspect
from dockerized.test_docker_deployments import labelled
from liftbridge_client.testing import ImageReport, StreamNames, free_ports

pytestmark = pytest.mark.integration

LIFTBRIDGE = Path(sys.executable).with_name("liftbridge")


def _cli(grpc: int, nats: int, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, LIFTBRIDGE_ADDRS=f"127.0.0.1:{grpc}")
    env["LIFTBRIDGE_NATS_URL"] = f"nats://127.0.0.1:{nats}"
    return subprocess.run(
        [str(LIFTBRIDGE), *args], capture_output=True, text=True, env=env, timeout=60, check=False
    )


@pytest.mark.timeout(300)
def test_server_docker_runs_the_image_until_interrupted(images: ImageReport) -> None:
    grpc, nats = free_ports(2)
    proc = subprocess.Popen(
        [str(LIFTBRIDGE), "server", "--docker", "--port", str(grpc), "--nats-port", str(nats)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    container = ""
    try:
        assert proc.stdout is not None
        printed = [proc.stdout.readline(), proc.stdout.readline()]
        assert printed == [
            f"LIFTBRIDGE_ADDRS=127.0.0.1:{grpc}\n",
            f"LIFTBRIDGE_NATS_URL=nats://127.0.0.1:{nats}\n",
        ]
        running = subprocess.run(
            ["docker", "ps", "--format", "{{.Names}} {{.Image}}"],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout.splitlines()
        ours = [line.split() for line in running if line.startswith("liftbridge-dev-")]
        assert len(ours) == 1, running
        container, image = ours[0]
        assert image == images.liftbridge_image
        assert docker_inspect(container)["HostConfig"]["NetworkMode"] == "host"  # type: ignore[index]

        listed = json.loads(_cli(grpc, nats, "streams", "list", "--json").stdout)
        assert [(s["name"], s["subject"]) for s in listed] == [
            ("__cursors", "liftbridge-default.cursors")
        ]
        name, subject = StreamNames("cli-docker")()
        assert _cli(grpc, nats, "streams", "create", name, "-s", subject).returncode == 0
        assert _cli(grpc, nats, "publish", name, "in-a-container").returncode == 0
        assert _cli(grpc, nats, "subscribe", name).stdout == "in-a-container\n"
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=90)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode == 0, err
    assert f"container: {container} (removed on exit, with its data)" in err
    assert err.rstrip().endswith("stopping\nstopped"), err
    deployment = container.removesuffix("-n1")
    assert labelled(deployment) == [], "the container is removed"
