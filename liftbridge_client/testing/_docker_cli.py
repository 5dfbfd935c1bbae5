"""A thin, synchronous wrapper around the ``docker`` command line.

Only the CLI is used (no SDK): whatever the user's ``docker`` talks to (a local daemon, a
rootless one, a remote context) is what the harness uses. Every failure becomes a
:class:`~liftbridge_client.testing.HarnessError` subclass that quotes the command and its
output.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from liftbridge_client.testing._errors import ProvisionError, ServerStartError
from liftbridge_client.testing._provision import _checkout_root

__all__ = ["ENV_DOCKER", "DockerCLI", "docker_cli"]

ENV_DOCKER = "LIFTBRIDGE_DOCKER"
"""Environment variable naming the ``docker`` executable to use (default: ``docker`` on PATH)."""

_DEFAULT_TIMEOUT = 120.0
_TAIL_CHARS = 4000


class DockerCLI:
    """Runs ``docker`` subcommands; raises with the command's output when one fails."""

    def __init__(self, executable: str) -> None:
        """Use ``executable`` (a path or a name on PATH)."""
        self.executable = executable

    def __repr__(self) -> str:
        """The executable."""
        return f"<DockerCLI {self.executable}>"

    def run(
        self,
        args: Sequence[str],
        *,
        timeout: float = _DEFAULT_TIMEOUT,
        check: bool = True,
        cwd: Path | None = None,
        error: type[ProvisionError | ServerStartError] = ServerStartError,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``docker <args>``; with ``check``, raise ``error`` on a non-zero exit."""
        argv = [self.executable, *args]
        try:
            completed = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                errors="replace",
                timeout=timeout,
                check=False,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired as exc:
            raise error(f"`{' '.join(argv)}` did not finish in {timeout:.0f} s") from exc
        except OSError as exc:
            raise error(f"cannot run `{' '.join(argv)}`: {exc}") from exc
        if check and completed.returncode != 0:
            output = (completed.stdout + completed.stderr).strip()[-_TAIL_CHARS:]
            raise error(
                f"`{' '.join(argv)}` exited with {completed.returncode}:\n{output or '(no output)'}"
            )
        return completed

    def image_exists(self, image: str) -> bool:
        """True when the daemon has ``image`` (a ``repo:tag``)."""
        return self.run(["image", "inspect", image], check=False).returncode == 0

    def server_version(self) -> str:
        """The daemon's version; raises :class:`ProvisionError` when no daemon answers."""
        completed = self.run(
            ["version", "--format", "{{.Server.Version}}"], timeout=30.0, error=ProvisionError
        )
        return completed.stdout.strip()


def docker_cli() -> DockerCLI:
    """The ``docker`` CLI from ``$LIFTBRIDGE_DOCKER`` or PATH; :class:`ProvisionError` if none."""
    configured = os.environ.get(ENV_DOCKER, "").strip()
    found = shutil.which(configured or "docker")
    if found is None:
        where = f"${ENV_DOCKER}={configured!r}" if configured else "`docker` on PATH"
        raise ProvisionError(
            f"the docker deployment needs the docker CLI and a running daemon, but {where} "
            f"was not found ({_install_advice()})"
        )
    return DockerCLI(found)


def _install_advice() -> str:
    """How to get docker: in a clone of this repository a make target does it; a user of
    the installed package installs it the usual way."""
    if _checkout_root() is not None:
        return "on Debian as root: `make test-docker` installs and starts one"
    return (
        "install Docker and start its daemon, e.g. on Debian as root `apt-get install "
        f"docker.io` and `dockerd &`, or set ${ENV_DOCKER} to the docker CLI to use; "
        "without docker, the harness's default deployment runs the server binaries directly"
    )
