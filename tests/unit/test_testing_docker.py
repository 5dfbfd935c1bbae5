"""The docker parts of the harness that need no daemon: selection, ELF check, configs."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from liftbridge_client.testing import (
    CLUSTER_SETTINGS,
    ConfigError,
    ProvisionError,
    _docker_cli,
    nats_server_binary,
)
from liftbridge_client.testing._docker_cli import ENV_DOCKER, docker_cli
from liftbridge_client.testing._docker_images import is_static_elf, liftbridge_image
from liftbridge_client.testing._selection import DeploymentKind, cluster_kind, server_kind

ROOT = Path(__file__).resolve().parents[2]
IMAGES = ROOT / "liftbridge_client" / "testing" / "images"
ADDRS = {"LIFTBRIDGE_ADDRS": "127.0.0.1:9292", "LIFTBRIDGE_NATS_URL": "nats://127.0.0.1:4222"}


@pytest.mark.parametrize(
    ("option", "environ", "server", "cluster"),
    [
        (None, {}, DeploymentKind.LOCAL, DeploymentKind.LOCAL),
        (None, ADDRS, DeploymentKind.EXTERNAL, DeploymentKind.LOCAL),
        ("auto", ADDRS, DeploymentKind.EXTERNAL, DeploymentKind.LOCAL),
        ("local", ADDRS, DeploymentKind.LOCAL, DeploymentKind.LOCAL),
        ("docker", ADDRS, DeploymentKind.DOCKER, DeploymentKind.DOCKER),
        (None, {"LIFTBRIDGE_DEPLOYMENT": "docker"}, DeploymentKind.DOCKER, DeploymentKind.DOCKER),
        ("local", {"LIFTBRIDGE_DEPLOYMENT": "docker"}, DeploymentKind.LOCAL, DeploymentKind.LOCAL),
        ("external", ADDRS, DeploymentKind.EXTERNAL, DeploymentKind.LOCAL),
        (None, {"LIFTBRIDGE_DEPLOYMENT": " Docker "}, DeploymentKind.DOCKER, DeploymentKind.DOCKER),
    ],
)
def test_deployment_selection(
    option: str | None,
    environ: dict[str, str],
    server: DeploymentKind,
    cluster: DeploymentKind,
) -> None:
    assert server_kind(option, environ) is server
    assert cluster_kind(option, environ) is cluster


def test_external_without_addresses_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="LIFTBRIDGE_ADDRS"):
        server_kind("external", {})


def test_unknown_deployment_kind_names_the_variable() -> None:
    with pytest.raises(ConfigError, match=r"LIFTBRIDGE_DEPLOYMENT='kubernetes'.*docker"):
        server_kind(None, {"LIFTBRIDGE_DEPLOYMENT": "kubernetes"})


def test_static_elf_detection(tmp_path: Path) -> None:
    # nats-server releases are static Go binaries; the Python interpreter is not static.
    assert is_static_elf(nats_server_binary()) is True
    assert is_static_elf(Path(sys.executable).resolve()) is False
    text = tmp_path / "script"
    text.write_text("#!/bin/sh\n")
    with pytest.raises(ProvisionError, match="not an ELF"):
        is_static_elf(text)


def test_missing_docker_cli_is_a_provision_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(ENV_DOCKER, "/nonexistent/docker")
    monkeypatch.setattr(_docker_cli, "_checkout_root", lambda: tmp_path)  # run from a clone
    with pytest.raises(ProvisionError, match=ENV_DOCKER) as info:
        docker_cli()
    assert "`make test-docker` installs and starts one" in str(info.value)


def test_missing_docker_cli_outside_a_clone_advises_what_a_user_can_do(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # From an installed wheel there is no Makefile: `make test-docker` was advice for
    # this repository's developers.
    monkeypatch.setenv(ENV_DOCKER, "/nonexistent/docker")
    monkeypatch.setattr(_docker_cli, "_checkout_root", lambda: None)
    with pytest.raises(ProvisionError) as info:
        docker_cli()
    message = str(info.value)
    assert "make" not in message
    assert "install Docker and start its daemon" in message
    assert f"set ${ENV_DOCKER} to the docker CLI" in message


def test_image_tag_carries_the_server_version() -> None:
    assert liftbridge_image("v1.9.0") == "liftbridge-client/liftbridge:v1.9.0"
    # A docker tag cannot hold "+": the patched version is tagged with "-".
    assert liftbridge_image("v1.9.0+lbc.1") == "liftbridge-client/liftbridge:v1.9.0-lbc.1"


def read_settings(path: Path) -> dict[str, object]:
    """The image configs use the harness's format: ``key: <JSON value>`` per line."""
    settings: dict[str, object] = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            key, _, value = line.partition(": ")
            settings[key] = json.loads(value)
    return settings


def test_image_configs_bind_loopback_only() -> None:
    single = read_settings(IMAGES / "single.yaml")
    cluster = read_settings(IMAGES / "cluster.yaml")
    for settings in (single, cluster):
        assert settings["host"] == "127.0.0.1"
        assert "listen" not in settings  # `listen` would override host and port
        assert all(str(url).startswith("nats://127.0.0.1:") for url in settings["nats.servers"])  # type: ignore[attr-defined]
        # v1.9.0 rejects unknown keys, telemetry among them.
        assert not any(key.startswith("telemetry") for key in settings)
        assert settings["data.dir"] == "/data"
    assert single["nats.embedded.config"] == "/etc/liftbridge/nats.conf"
    assert cluster["clustering.raft.bootstrap.peers"] == ["n1", "n2", "n3"]
    for key, value in CLUSTER_SETTINGS.items():  # the docker cluster fails over as the local one
        assert cluster[key] == value, key
    nats = (IMAGES / "nats.conf").read_text()
    assert "host: 127.0.0.1" in nats
    assert "port: $NATS_PORT" in nats


@pytest.mark.parametrize("name", ["docker-compose.yml", "docker-compose.cluster.yml"])
def test_compose_files_use_the_host_network_and_no_published_ports(name: str) -> None:
    text = (ROOT / name).read_text()
    services = text.count("image: ${")
    assert services >= 1
    # Every service shares the host network (the cluster's nodes through one anchor).
    settings = re.findall(r"^\s+network_mode: host$", text, re.MULTILINE)
    assert len(settings) == (1 if name == "docker-compose.yml" else 2)
    assert re.search(r"^\s*ports:", text, re.MULTILINE) is None
    assert "0.0.0.0" not in text
    assert "build:" not in text  # local images only: no registry base image to pull
