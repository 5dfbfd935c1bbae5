"""Drive the repository's compose files with docker-compose v1 and/or Compose v2.

Each :class:`ComposeProject` gets a unique project name and free ports on the host, so runs
never collide with each other or with servers on the default ports.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from liftbridge_client.testing import free_ports

ROOT = Path(__file__).resolve().parents[2]
SINGLE_FILE = ROOT / "docker-compose.yml"
CLUSTER_FILE = ROOT / "docker-compose.cluster.yml"
PROJECT_LABEL = "com.docker.compose.project"


@dataclass(frozen=True, slots=True)
class ComposeTool:
    """One compose implementation: an id for test names and the command that runs it."""

    id: str
    argv: tuple[str, ...]


def _works(argv: Sequence[str]) -> bool:
    try:
        completed = subprocess.run([*argv, "version"], capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return False
    return completed.returncode == 0


def available_tools() -> list[ComposeTool]:
    """The compose implementations on this machine: ``v1`` (docker-compose), ``v2``."""
    tools = []
    v1 = shutil.which("docker-compose")
    # A docker-compose on PATH may be the v2 binary installed standalone: ask it.
    if v1 is not None and _works([v1]):
        out = subprocess.run(
            [v1, "version", "--short"], capture_output=True, text=True, timeout=30, check=False
        )
        tools.append(
            ComposeTool("v1" if out.stdout.strip().startswith("1.") else "v2-standalone", (v1,))
        )
    docker = shutil.which("docker")
    if docker is not None and _works([docker, "compose"]):
        tools.append(ComposeTool("v2", (docker, "compose")))
    return tools


def _docker(*args: str) -> str:
    completed = subprocess.run(
        ["docker", *args], capture_output=True, text=True, timeout=60, check=True
    )
    return completed.stdout


def docker_inspect(container: str) -> dict[str, object]:
    """``docker inspect`` of one container (by id or name)."""
    data = json.loads(_docker("inspect", container))
    assert isinstance(data, list)
    result: dict[str, object] = data[0]
    return result


class ComposeProject:
    """One compose file brought up under a unique project name with free ports."""

    def __init__(self, tool: ComposeTool, file: Path, port_variables: Sequence[str]) -> None:
        self.tool = tool
        self.file = file
        self.name = f"lbcompose{uuid.uuid4().hex[:10]}"
        ports = free_ports(len(port_variables))
        self.ports: dict[str, int] = dict(zip(port_variables, ports, strict=True))

    def run(self, *args: str, timeout: float = 180.0) -> str:
        """Run a compose command; raise AssertionError with its output on failure."""
        env: Mapping[str, str] = {**os.environ, **{k: str(v) for k, v in self.ports.items()}}
        argv = [*self.tool.argv, "-f", str(self.file), "-p", self.name, *args]
        completed = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=dict(env),
            check=False,
            stdin=subprocess.DEVNULL,
        )
        output = completed.stdout + completed.stderr
        assert completed.returncode == 0, f"`{' '.join(argv)}` failed:\n{output}"
        return output

    def container_id(self, service: str) -> str:
        """The id of the service's running container (`ps` in v2 lists running ones only)."""
        found = self.run("ps", "-q", service).strip()
        assert found, f"no container for {service} in {self.name}"
        return found.splitlines()[0]

    def inspect(self, service: str) -> dict[str, object]:
        """``docker inspect`` of the service's running container."""
        return docker_inspect(self.container_id(service))

    def logs(self) -> str:
        """Every service's output (for failure messages)."""
        return self.run("logs", "--no-color")

    def leftovers(self) -> dict[str, list[str]]:
        """Containers, volumes and networks of this project that still exist."""
        label = f"label={PROJECT_LABEL}={self.name}"
        containers = _docker("ps", "-aq", "--filter", label).split()
        volumes = _docker("volume", "ls", "-q", "--filter", label).split()
        volumes += _docker("volume", "ls", "-q", "--filter", f"name={self.name}_").split()
        networks = _docker("network", "ls", "-q", "--filter", f"name={self.name}").split()
        found = {"containers": containers, "volumes": sorted(set(volumes)), "networks": networks}
        return {kind: names for kind, names in found.items() if names}

    def down(self) -> None:
        """Remove the project's containers, volumes and networks."""
        self.run("down", "--volumes", "--remove-orphans", "--timeout", "15")
