"""`liftbridge server --docker` without a usable docker: one clear line, no fallback.

(With a daemon, tests/dockerized/test_cli_server_docker.py runs the image for real.)
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from liftbridge_client.cli._commands import cli
from liftbridge_client.cli._exit import ExitStatus


def _server(env: dict[str, str], *args: str) -> tuple[int, str]:
    result = CliRunner(env=env).invoke(
        cli, ["server", "--docker", "--port", "0", "--nats-port", "0", *args]
    )
    return result.exit_code, result.output


def test_no_docker_command(tmp_path: Path) -> None:
    status, out = _server({"LIFTBRIDGE_DOCKER": str(tmp_path / "no-docker")})
    assert status == int(ExitStatus.UNREACHABLE)
    assert out == (
        "error: --docker needs docker: no `docker` command found (install it, e.g. Debian's "
        "docker.io, or run without --docker)\n"
    )


def test_no_daemon_answering(tmp_path: Path) -> None:
    fake = tmp_path / "docker"
    fake.write_text(
        "#!/bin/sh\necho 'Client: 28.2.2'\n"
        "echo 'Cannot connect to the Docker daemon at unix:///var/run/docker.sock.' >&2\n"
        "exit 1\n"
    )
    fake.chmod(0o755)
    status, out = _server({"LIFTBRIDGE_DOCKER": str(fake)})
    assert status == int(ExitStatus.UNREACHABLE)
    # One line, the daemon's own reason last; nothing was started instead.
    assert out.splitlines() == [
        "error: --docker needs a running docker daemon; `docker version` says: Cannot "
        "connect to the Docker daemon at unix:///var/run/docker.sock."
    ]


@pytest.mark.parametrize("args", [["--data-dir", "x"]])
def test_docker_takes_no_data_dir(args: list[str]) -> None:
    status, out = _server({}, *args)
    assert status == int(ExitStatus.USAGE)
    assert "--data-dir is for the local binary" in out
