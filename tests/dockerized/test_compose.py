"""The compose files, for real: up, publish and subscribe, a node killed, down, no leftovers.

Every test runs once per compose implementation found (docker-compose 1.29 and/or Compose
v2), each under its own project name with free ports.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from dockerized.compose_project import (
    CLUSTER_FILE,
    ROOT,
    SINGLE_FILE,
    ComposeProject,
    ComposeTool,
    docker_inspect,
)
from liftbridge_client import (
    Ack,
    AckPolicy,
    Client,
    ClientOptions,
    RetryPolicy,
    StartPosition,
    StopPosition,
    StreamConfig,
    Transport,
    errors,
)
from liftbridge_client.testing import (
    ENV_ADDRS,
    ENV_NATS_URL,
    ExternalDeployment,
    ImageReport,
    StreamNames,
)
from liftbridge_client.testing._probe import wait_brokers, wait_serving

pytestmark = pytest.mark.integration

OPTIONS = ClientOptions(
    ack_wait=5.0,
    rpc_timeout=3.0,
    retry=RetryPolicy(attempts=8, initial_backoff=0.1, max_backoff=1.0),
)
NODE_PORTS = {"n1": "LIFTBRIDGE_N1_PORT", "n2": "LIFTBRIDGE_N2_PORT", "n3": "LIFTBRIDGE_N3_PORT"}


@contextlib.contextmanager
def compose_up(project: ComposeProject) -> Iterator[ComposeProject]:
    """Bring the project up; on exit bring it down and check that nothing is left."""
    try:
        project.run("up", "-d")
        try:
            yield project
        except BaseException:
            # The servers' output says more than the failed assertion alone.
            print(project.logs(), file=sys.stderr)
            raise
    finally:
        project.down()
    assert project.leftovers() == {}, f"left behind by {project.name}"


def listening_hosts(ports: set[int]) -> dict[int, set[str]]:
    """Addresses with a listening TCP socket on each port (host network: /proc/net/tcp*)."""
    found: dict[int, set[str]] = {}
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            local, state = fields[1], fields[3]
            address, port_hex = local.split(":")
            if state != "0A" or int(port_hex, 16) not in ports:
                continue
            if width == 8:
                host = ".".join(str(b) for b in reversed(bytes.fromhex(address)))
            else:
                host = f"ipv6:{address}"
            found.setdefault(int(port_hex, 16), set()).add(host)
    return found


async def round_trip(addresses: list[str], nats_url: str, names: StreamNames) -> str:
    """Publish over gRPC and NATS, then read both messages back; return the stream."""
    name, subject = names("compose")
    async with Client(addresses, nats_servers=[nats_url], options=OPTIONS) as client:
        await client.create_stream(subject, name)
        first = await client.publish(name, b"over-grpc", transport=Transport.GRPC)
        second = await client.publish(name, b"over-nats", transport=Transport.NATS)
        assert first is not None
        assert second is not None
        assert (first.offset, second.offset) == (0, 1)
        async with client.subscribe(
            name, start=StartPosition.EARLIEST, stop=StopPosition.LATEST
        ) as sub:
            assert [m.value async for m in sub] == [b"over-grpc", b"over-nats"]
    return name


async def read_back(addresses: list[str], nats_url: str, name: str) -> list[bytes]:
    """After a restart: the old messages are there, a new one goes after them."""
    async with Client(addresses, nats_servers=[nats_url], options=OPTIONS) as client:
        part = await client.fetch_partition_metadata(name, 0)
        assert part.newest_offset == 1
        # v1.9.0 may report high watermark -1 after a restart until the next write, and a
        # subscription up to LATEST then waits for it: write first, then read.
        ack = await client.publish(name, b"after-restart")
        assert ack is not None
        assert ack.offset == 2
        async with client.subscribe(
            name, start=StartPosition.EARLIEST, stop=StopPosition.LATEST
        ) as sub:
            return [m.value async for m in sub]


@pytest.mark.timeout(300)
async def test_single_node(
    compose_tool: ComposeTool, images: ImageReport, stream_names: StreamNames
) -> None:
    project = ComposeProject(compose_tool, SINGLE_FILE, ["LIFTBRIDGE_PORT", "NATS_PORT"])
    port, nats_port = project.ports["LIFTBRIDGE_PORT"], project.ports["NATS_PORT"]
    with compose_up(project):
        deployment = ExternalDeployment([f"127.0.0.1:{port}"], f"nats://127.0.0.1:{nats_port}")
        await asyncio.to_thread(deployment.wait_ready, timeout=60.0)
        stream = await round_trip(deployment.addresses, deployment.nats_url, stream_names)

        info = project.inspect("liftbridge")
        config, host = info["Config"], info["HostConfig"]
        assert isinstance(config, dict)
        assert isinstance(host, dict)
        assert config["Image"] == images.liftbridge_image
        assert config["User"] == "1001:1001"
        assert host["NetworkMode"] == "host"
        mounts = info["Mounts"]
        assert isinstance(mounts, list)
        assert [(m["Type"], m["Destination"]) for m in mounts] == [("volume", "/data")]
        # Both servers listen, and on the loopback interface only.
        assert listening_hosts({port, nats_port}) == {port: {"127.0.0.1"}, nats_port: {"127.0.0.1"}}

        # The data lives in the named volume: a new container (down without -v, up) has it.
        first_container = project.container_id("liftbridge")
        project.run("down", "--timeout", "15")
        project.run("up", "-d")
        assert project.container_id("liftbridge") != first_container
        await asyncio.to_thread(deployment.wait_ready, timeout=60.0)
        assert await read_back(deployment.addresses, deployment.nats_url, stream) == [
            b"over-grpc",
            b"over-nats",
            b"after-restart",
        ]


@pytest.mark.timeout(600)
async def test_cluster_survives_docker_kill(
    compose_tool: ComposeTool, images: ImageReport, stream_names: StreamNames
) -> None:
    project = ComposeProject(compose_tool, CLUSTER_FILE, ["NATS_PORT", *NODE_PORTS.values()])
    addresses = [f"127.0.0.1:{project.ports[var]}" for var in NODE_PORTS.values()]
    nats_url = f"nats://127.0.0.1:{project.ports['NATS_PORT']}"
    with compose_up(project):
        await asyncio.to_thread(wait_serving, addresses[0], replication_factor=3, timeout=90.0)
        for address in addresses:
            await asyncio.to_thread(wait_brokers, address, set(NODE_PORTS), timeout=60.0)
        assert listening_hosts({int(a.rsplit(":", 1)[1]) for a in addresses}) == {
            int(a.rsplit(":", 1)[1]): {"127.0.0.1"} for a in addresses
        }

        name, subject = stream_names("failover")
        async with Client(addresses, nats_servers=[nats_url], options=OPTIONS) as client:
            await client.create_stream(subject, name, StreamConfig(replication_factor=3))
            before = await publish_until_acked(client, name, b"before", AckPolicy.ALL)
            assert before.offset == 0
            leader = (await client.fetch_metadata(name)).streams[name].partitions[0].leader
            assert leader in NODE_PORTS

            killed = project.container_id(leader)
            await asyncio.to_thread(
                subprocess.run, ["docker", "kill", killed], check=True, capture_output=True
            )
            state = docker_inspect(killed)["State"]
            assert isinstance(state, dict)
            assert state["Running"] is False
            assert state["ExitCode"] == 137  # SIGKILL

            # Another replica takes over; the caller retries what fails meanwhile.
            after = await publish_until_acked(client, name, b"after", AckPolicy.LEADER)
            assert after.offset >= 1

            # Started again, the node rejoins with its data and catches up (back in the ISR).
            await asyncio.to_thread(project.run, "start", leader)
            await wait_isr(client, name, set(NODE_PORTS))
            async with client.subscribe(
                name, start=StartPosition.EARLIEST, stop=StopPosition.LATEST
            ) as sub:
                values = [m.value async for m in sub]
            assert values[0] == b"before"
            assert values[-1] == b"after"


async def publish_until_acked(
    client: Client, name: str, value: bytes, policy: AckPolicy, timeout: float = 60.0
) -> Ack:
    failures: list[errors.LiftbridgeError] = []
    async with asyncio.timeout(timeout):
        while True:
            try:
                ack = await client.publish(name, value, transport=Transport.GRPC, ack_policy=policy)
            except errors.LiftbridgeError as exc:
                failures.append(exc)
                await asyncio.sleep(0.2)
                continue
            assert all(f.retriable for f in failures), failures
            assert ack is not None
            return ack


async def wait_isr(client: Client, name: str, expected: set[str]) -> None:
    async with asyncio.timeout(60):
        while True:
            # A node just started may not know the stream yet (KeyError): ask again.
            with contextlib.suppress(errors.LiftbridgeError, KeyError):
                info = (await client.fetch_metadata(name)).streams[name].partitions[0]
                if set(info.isr) == expected and info.leader:
                    return
            await asyncio.sleep(0.2)


@pytest.mark.timeout(900)
def test_integration_suite_against_compose(
    newest_compose_tool: ComposeTool, images: ImageReport
) -> None:
    """The project's publish and subscribe integration tests, against the compose node
    (brought up by one compose implementation: test_single_node and
    test_cluster_survives_docker_kill bring it up with each)."""
    project = ComposeProject(newest_compose_tool, SINGLE_FILE, ["LIFTBRIDGE_PORT", "NATS_PORT"])
    with compose_up(project):
        env = {
            **os.environ,
            ENV_ADDRS: f"127.0.0.1:{project.ports['LIFTBRIDGE_PORT']}",
            ENV_NATS_URL: f"nats://127.0.0.1:{project.ports['NATS_PORT']}",
        }
        completed = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "tests/integration/test_publish.py",
                "tests/integration/test_subscribe.py",
                "--liftbridge-deployment=external",
                "-q",
                "-p",
                "no:cacheprovider",
            ],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert completed.returncode == 0, completed.stdout[-6000:] + completed.stderr[-3000:]
        summary = completed.stdout.strip().splitlines()[-1]
        assert " passed" in summary, summary
        assert "failed" not in summary, summary
        assert "error" not in summary, summary
