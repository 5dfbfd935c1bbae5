"""The server harness against real servers: readiness, logs, node and NATS restarts."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import grpc
import nats
import pytest

from liftbridge_client._proto import api_pb2, api_pb2_grpc
from liftbridge_client.testing import (
    ENV_ADDRS,
    ENV_NATS_URL,
    PROBE_STREAM_PREFIX,
    Cluster,
    Deployment,
    NatsServer,
    ServerStartError,
    SingleNode,
    StreamName,
)
from liftbridge_client.testing._probe import broker_ids, grpc_channel

pytestmark = pytest.mark.integration


def stream_names_on(address: str, *names: str) -> set[str]:
    """Names of the given streams that FetchMetadata on ``address`` knows."""
    with grpc_channel(address) as channel:
        response = api_pb2_grpc.APIStub(channel).FetchMetadata(
            api_pb2.FetchMetadataRequest(streams=list(names)), timeout=5
        )
    return {meta.name for meta in response.streamMetadata if meta.partitions}


def create_stream(address: str, stream: StreamName, replication_factor: int = 1) -> None:
    with grpc_channel(address) as channel:
        api_pb2_grpc.APIStub(channel).CreateStream(
            api_pb2.CreateStreamRequest(
                name=stream.name, subject=stream.subject, replicationFactor=replication_factor
            ),
            timeout=10,
        )


def port_is_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


# --- single node -------------------------------------------------------------------------


def test_single_node_is_ready_and_answers_metadata(liftbridge_server: Deployment) -> None:
    assert liftbridge_server.addresses
    assert liftbridge_server.nats_url.startswith("nats://")
    for address in liftbridge_server.addresses:
        assert broker_ids(address)
    if isinstance(liftbridge_server, SingleNode):
        assert broker_ids(liftbridge_server.address) == {"n1"}
        assert liftbridge_server.address.startswith("127.0.0.1:")


def test_single_node_can_create_and_list_a_unique_stream(
    liftbridge_server: Deployment, unique_stream: StreamName
) -> None:
    address = liftbridge_server.addresses[0]
    create_stream(address, unique_stream)
    assert stream_names_on(address, unique_stream.name) == {unique_stream.name}
    with grpc_channel(address) as channel:
        stub = api_pb2_grpc.APIStub(channel)
        stub.DeleteStream(api_pb2.DeleteStreamRequest(name=unique_stream.name), timeout=10)
        # The readiness probe cleaned up after itself.
        listed = stub.FetchMetadata(api_pb2.FetchMetadataRequest(), timeout=5)
    assert not [m.name for m in listed.streamMetadata if m.name.startswith(PROBE_STREAM_PREFIX)]


async def test_single_node_embedded_nats_takes_clients(liftbridge_server: Deployment) -> None:
    connection = await nats.connect(liftbridge_server.nats_url, allow_reconnect=False)
    try:
        assert connection.is_connected
    finally:
        await connection.close()


def test_single_node_logs_are_captured(
    liftbridge_server: Deployment, liftbridge_server_version: str
) -> None:
    tails = liftbridge_server.log_tails(5)
    if not isinstance(liftbridge_server, SingleNode):
        assert tails == {}  # external servers: their logs are not ours
        return
    node = liftbridge_server.node
    assert node.log_path.is_file()
    assert f"Starting Liftbridge server on {node.address}" in node.logs()
    # master reports "dev"; a patched build (v1.9.0+lbc.1) its release: the patches leave
    # the version constant alone.
    reported = (
        "dev"
        if liftbridge_server_version.startswith("master")
        else liftbridge_server_version.split("+", 1)[0]
    )
    assert f"Liftbridge Version:        {reported}" in node.logs()
    assert list(tails) == ["liftbridge:n1"]
    assert len(tails["liftbridge:n1"].splitlines()) <= 5


# --- cluster -----------------------------------------------------------------------------


def test_cluster_nodes_all_list_three_brokers(liftbridge_cluster: Cluster) -> None:
    assert [node.server_id for node in liftbridge_cluster.nodes] == ["n1", "n2", "n3"]
    for node in liftbridge_cluster.nodes:
        assert node.running
        assert broker_ids(node.address) == {"n1", "n2", "n3"}


def test_killed_node_restarts_with_its_state_and_rejoins(
    liftbridge_cluster: Cluster, unique_stream: StreamName
) -> None:
    n1, n2 = liftbridge_cluster.node("n1"), liftbridge_cluster.node("n2")
    create_stream(n1.address, unique_stream, replication_factor=3)
    assert n2.kill() == -signal.SIGKILL
    assert not n2.running
    assert not n2.exited_unexpectedly  # the harness killed it: not a crash
    port, data_dir = n2.port, n2.data_dir
    n2.start()  # same id, ports and data directory
    liftbridge_cluster.wait_ready(timeout=30)
    assert (n2.port, n2.data_dir) == (port, data_dir)
    assert broker_ids(n2.address) == {"n1", "n2", "n3"}
    # It came back with the metadata it had, not as an empty node.
    assert stream_names_on(n2.address, unique_stream.name) == {unique_stream.name}
    assert "===== liftbridge:n2: start #" in n2.logs()


def test_metadata_stays_complete_and_quick_with_a_node_down(liftbridge_cluster: Cluster) -> None:
    # The cluster keeps its broker cache (filled while all nodes were up) for an hour, so
    # FetchMetadata neither waits for the dead peer nor forgets it.
    liftbridge_cluster.node("n2").kill()
    started = time.monotonic()
    assert broker_ids(liftbridge_cluster.node("n1").address, timeout=5) == {"n1", "n2", "n3"}
    assert time.monotonic() - started < 1.0
    # No restart here: the plugin brings n2 back after the test.


def test_ensure_all_running_restores_a_crashed_node(liftbridge_cluster: Cluster) -> None:
    n3 = liftbridge_cluster.node("n3")
    assert n3.process.pid is not None
    os.kill(n3.process.pid, signal.SIGKILL)  # not through the harness: looks like a crash
    deadline = time.monotonic() + 5
    while n3.running and time.monotonic() < deadline:
        time.sleep(0.02)
    assert liftbridge_cluster.unexpected_exits() == {"liftbridge:n3": -signal.SIGKILL}
    assert liftbridge_cluster.ensure_all_running() == ["n3"]
    assert liftbridge_cluster.unexpected_exits() == {}
    assert liftbridge_cluster.ensure_all_running() == []  # nothing to do: returns at once


def test_wait_ready_names_a_node_that_crashed_with_its_log(liftbridge_cluster: Cluster) -> None:
    n2 = liftbridge_cluster.node("n2")
    assert n2.process.pid is not None
    os.kill(n2.process.pid, signal.SIGKILL)  # a crash, not a harness stop
    deadline = time.monotonic() + 5
    while n2.running and time.monotonic() < deadline:
        time.sleep(0.02)
    with pytest.raises(ServerStartError) as caught:
        liftbridge_cluster.wait_ready(timeout=5)
    message = str(caught.value)
    assert f"exited on its own (status {-signal.SIGKILL})" in message
    assert n2.tail().strip()
    assert n2.tail() in message
    assert liftbridge_cluster.ensure_all_running() == ["n2"]


async def test_nats_stops_and_restarts_on_the_same_port(tmp_path: Path) -> None:
    # A deployment of its own: on v1.9.0 a NATS outage can leave a replicated partition led
    # by a node outside its ISR, which then panics on every start (docs/testing.md), so no
    # shared cluster is put through one.
    with Cluster(1, base_dir=tmp_path) as own:
        await _nats_restarts_on_the_same_port(own)


async def _nats_restarts_on_the_same_port(liftbridge_cluster: Cluster) -> None:
    nats_server = liftbridge_cluster.nats
    url, port = nats_server.url, nats_server.port
    assert nats_server.stop() == 0
    assert not port_is_open(port)
    nats_server.start()
    assert (nats_server.url, nats_server.port) == (url, port)
    connection = await nats.connect(url, allow_reconnect=False)
    await connection.close()
    # The Liftbridge nodes reconnect by themselves (they retry every 250 ms).
    liftbridge_cluster.wait_ready(timeout=30)
    assert 'Trapped "interrupt" signal' in nats_server.logs()


def test_standalone_nats_server_is_a_context_manager(tmp_path: Path) -> None:
    with NatsServer(tmp_path) as server:
        assert server.running
        assert port_is_open(server.port)
        assert server.url == f"nats://127.0.0.1:{server.port}"
    assert server.returncode == 0  # stopped with SIGINT on exit
    assert not port_is_open(server.port)
    assert "Server is ready" in server.logs()


# --- plugin behaviour, in a separate pytest run ----------------------------------------------


def test_failed_test_shows_server_logs_and_crash_is_reported(tmp_path: Path) -> None:
    (tmp_path / "test_inner.py").write_text(
        textwrap.dedent(
            """
            import os, signal, time

            def test_fails(liftbridge_server):
                assert False, "deliberate"

            def test_crashes(liftbridge_server):
                os.kill(liftbridge_server.node.process.pid, signal.SIGKILL)
                while liftbridge_server.node.running:
                    time.sleep(0.02)

            def test_after_crash(liftbridge_server):
                assert liftbridge_server.node.running
            """
        )
    )
    # A local node even when the outer run uses external servers.
    env = {k: v for k, v in os.environ.items() if k not in {ENV_ADDRS, ENV_NATS_URL}}
    completed = subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rA"),
            *("-p", "liftbridge_client.testing.plugin", str(tmp_path)),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    output = completed.stdout + completed.stderr
    assert completed.returncode == 1, output
    assert "liftbridge:n1 log (last 80 lines)" in output
    assert "Starting Liftbridge server on 127.0.0.1:" in output
    assert "exited during the test without being stopped: {'liftbridge:n1': -9}" in output
    assert "1 failed, 2 passed, 1 error" in output, output


def test_the_plugin_does_not_load_unless_asked(tmp_path: Path) -> None:
    (tmp_path / "test_inner.py").write_text(
        "import sys\n\n"
        "def test_not_loaded():\n"
        "    assert 'liftbridge_client.testing.plugin' not in sys.modules\n"
        "    assert 'liftbridge_client' not in sys.modules\n\n"
        "def test_no_fixture(liftbridge_server):\n"
        "    pass\n"
    )
    completed = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", str(tmp_path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    output = completed.stdout + completed.stderr
    assert "fixture 'liftbridge_server' not found" in output, output
    assert "1 passed, 1 error" in output, output


def test_grpc_channel_reaches_every_cluster_node(liftbridge_cluster: Cluster) -> None:
    for address in liftbridge_cluster.addresses:
        with grpc_channel(address) as channel:
            grpc.channel_ready_future(channel).result(timeout=5)
