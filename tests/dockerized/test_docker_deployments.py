"""DockerSingleNode and DockerCluster themselves: image, loopback, crash detection, cleanup."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap

import pytest

from dockerized.compose_project import docker_inspect
from dockerized.test_compose import listening_hosts
from liftbridge_client import Client, StartPosition, StopPosition, StreamConfig
from liftbridge_client.testing import DockerCluster, DockerSingleNode, ImageReport, StreamNames
from liftbridge_client.testing._containers import DEPLOYMENT_LABEL

pytestmark = pytest.mark.integration


def labelled(deployment: str) -> list[str]:
    """Ids of the containers (running or not) labelled with this deployment's name."""
    completed = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label={DEPLOYMENT_LABEL}={deployment}"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return completed.stdout.split()


@pytest.mark.timeout(300)
async def test_single_node_container(images: ImageReport, stream_names: StreamNames) -> None:
    with DockerSingleNode() as node:
        info = docker_inspect(node.node.name)
        config, host = info["Config"], info["HostConfig"]
        assert isinstance(config, dict)
        assert isinstance(host, dict)
        assert config["Image"] == images.liftbridge_image
        assert config["User"] == "1001:1001"
        assert host["NetworkMode"] == "host"
        port = node.node.port
        assert listening_hosts({port, node.nats_port}) == {
            port: {"127.0.0.1"},
            node.nats_port: {"127.0.0.1"},
        }
        name, subject = stream_names("docker")
        async with Client(node.addresses, nats_servers=[node.nats_url]) as client:
            await client.create_stream(subject, name)
            ack = await client.publish(name, b"in-a-container")
            assert ack is not None
            assert ack.offset == 0

        # Killed on purpose: not a crash. Killed behind the harness's back: a crash.
        node.node.kill()
        assert node.unexpected_exits() == {}
        assert node.ensure_all_running() == ["n1"]
        await asyncio.to_thread(
            subprocess.run, ["docker", "kill", node.node.name], check=True, capture_output=True
        )
        assert node.unexpected_exits() == {node.node.name: 137}
        assert "Starting Liftbridge server on 127.0.0.1" in node.log_tails()[node.node.name]
        assert node.ensure_all_running() == ["n1"]
        assert node.unexpected_exits() == {}

        # Same container again: the data is still there (write first, see test_compose).
        async with Client(node.addresses, nats_servers=[node.nats_url]) as client:
            again = await client.publish(name, b"after-kills")
            assert again is not None
            assert again.offset == 1
            async with client.subscribe(
                name, start=StartPosition.EARLIEST, stop=StopPosition.LATEST
            ) as sub:
                assert [m.value async for m in sub] == [b"in-a-container", b"after-kills"]
        assert len(labelled(node.name)) == 1
    assert labelled(node.name) == []


@pytest.mark.timeout(300)
def test_containers_are_removed_when_the_interpreter_exits(images: ImageReport) -> None:
    # A deployment never closed (dropped at exit) still removes its containers.
    script = textwrap.dedent(
        """
        from liftbridge_client.testing import DockerSingleNode
        node = DockerSingleNode().start()
        print(node.name, flush=True)
        """
    )
    completed = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=240, check=False
    )
    assert completed.returncode == 0, completed.stderr
    name = completed.stdout.strip()
    assert name.startswith("lbtest-")
    assert labelled(name) == []


@pytest.mark.timeout(300)
async def test_cluster_nats_restart(images: ImageReport, stream_names: StreamNames) -> None:
    with DockerCluster() as cluster:
        assert len(labelled(cluster.name)) == 4
        cluster.nats.stop()
        assert cluster.unexpected_exits() == {}
        assert cluster.ensure_all_running() == ["nats"]
        name, subject = stream_names("natsrestart")
        async with Client(cluster.addresses, nats_servers=[cluster.nats_url]) as client:
            await client.create_stream(subject, name, StreamConfig(replication_factor=3))
            ack = await asyncio.wait_for(client.publish(name, b"x"), 30)
            assert ack is not None
    assert labelled(cluster.name) == []
