"""One server in a docker container, driven through the ``docker`` CLI.

Containers share the host's network (``--network host``) and their servers bind 127.0.0.1
only, as the local harness does; so ports are picked on the host and nothing is published
to other machines. A container is created on the first :meth:`Container.start` and started
again (same container, same anonymous ``/data`` volume, same ports) after a stop or kill;
:meth:`Container.remove` deletes it with its volume.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Self

from liftbridge_client.testing._config import LOOPBACK, nats_url
from liftbridge_client.testing._docker_cli import DockerCLI
from liftbridge_client.testing._errors import ServerStartError
from liftbridge_client.testing._probe import wait_serving

__all__ = ["DEPLOYMENT_LABEL", "Container", "LiftbridgeContainer", "NatsContainer"]

DEPLOYMENT_LABEL = "io.github.liftbridge-client.deployment"
"""Label on every container the harness creates; its value names the deployment."""

_STOP_TIMEOUT = 15
_NATS_START_TIMEOUT = 15.0
_NODE_START_TIMEOUT = 30.0
_LOG_TAIL = 80
_NATS_READY = "Server is ready"


class Container:
    """A named container running ``image`` with ``args`` on the host network."""

    def __init__(
        self,
        cli: DockerCLI,
        name: str,
        image: str,
        args: Sequence[str],
        *,
        deployment: str,
        env: Mapping[str, str] | None = None,
    ) -> None:
        """Describe the container; nothing runs until :meth:`start`."""
        self.cli = cli
        self.name = name
        self.image = image
        self.args = list(args)
        self.deployment = deployment
        self.env = dict(env or {})
        self._created = False
        self._stopped_on_purpose = False

    def __repr__(self) -> str:
        """Name and image."""
        return f"<{type(self).__name__} {self.name} {self.image}>"

    def _launch(self) -> None:
        if self._created:
            self.cli.run(["start", self.name])
        else:
            argv = ["run", "--detach", "--name", self.name, "--network", "host"]
            argv += ["--label", f"{DEPLOYMENT_LABEL}={self.deployment}"]
            for key, value in self.env.items():
                argv += ["--env", f"{key}={value}"]
            self.cli.run([*argv, self.image, *self.args])
            self._created = True
        self._stopped_on_purpose = False

    def _state(self, field: str) -> str | None:
        if not self._created:
            return None
        completed = self.cli.run(
            ["container", "inspect", "--format", f"{{{{.State.{field}}}}}", self.name],
            check=False,
        )
        return completed.stdout.strip() if completed.returncode == 0 else None

    @property
    def running(self) -> bool:
        """True while the container runs."""
        return self._state("Running") == "true"

    @property
    def returncode(self) -> int | None:
        """The exit code of a stopped container; None while it runs or before it exists."""
        if not self._created or self.running:
            return None
        code = self._state("ExitCode")
        return int(code) if code and code.lstrip("-").isdigit() else None

    @property
    def exited_unexpectedly(self) -> bool:
        """True when the container stopped although :meth:`stop`/:meth:`kill` were not called."""
        return self._created and not self._stopped_on_purpose and not self.running

    def logs(self) -> str:
        """The container's whole output (stdout and stderr)."""
        return self.tail(None)

    def tail(self, lines: int | None = _LOG_TAIL) -> str:
        """The last ``lines`` lines of the container's output ('' before it exists)."""
        if not self._created:
            return ""
        argv = ["logs", self.name] if lines is None else ["logs", "--tail", str(lines), self.name]
        completed = self.cli.run(argv, check=False)
        return completed.stdout + completed.stderr

    def stop(self, timeout: float = _STOP_TIMEOUT) -> int | None:
        """Stop gracefully (the image's stop signal, SIGINT), SIGKILL after ``timeout``."""
        self._stopped_on_purpose = True
        if self._created:
            self.cli.run(["stop", "--time", str(int(timeout)), self.name], timeout=timeout + 30)
        return self.returncode

    def kill(self) -> int | None:
        """``docker kill``: SIGKILL at once."""
        self._stopped_on_purpose = True
        if self.running:
            self.cli.run(["kill", self.name])
        return self.returncode

    def check_alive(self) -> None:
        """Raise :class:`ServerStartError` (with the log tail) if the container is down."""
        if self._created and not self.running:
            raise ServerStartError(
                f"{self!r} exited with {self.returncode}; last output:\n{self.tail()}"
            )

    def remove(self) -> None:
        """Delete the container and its anonymous volumes (nothing if it never existed)."""
        if self._created:
            self.cli.run(["rm", "--force", "--volumes", self.name], check=False)
            self._created = False


class NatsContainer(Container):
    """A standalone nats-server on ``127.0.0.1:port``."""

    def __init__(self, cli: DockerCLI, name: str, image: str, port: int, *, deployment: str):
        """Describe it; :meth:`start` runs it."""
        super().__init__(cli, name, image, ["-a", LOOPBACK, "-p", str(port)], deployment=deployment)
        self.port = port

    @property
    def url(self) -> str:
        """``nats://127.0.0.1:<port>``."""
        return nats_url(self.port)

    def start(self, *, timeout: float = _NATS_START_TIMEOUT) -> Self:
        """Start the container and wait until NATS says it is ready for connections."""
        # A restarted container keeps its earlier output: wait for one more ready line.
        seen = self.logs().count(_NATS_READY)
        self._launch()
        deadline = time.monotonic() + timeout
        while self.logs().count(_NATS_READY) <= seen:
            self.check_alive()
            if time.monotonic() >= deadline:
                raise ServerStartError(f"{self!r} not ready in {timeout:.0f} s:\n{self.tail()}")
            time.sleep(0.05)
        return self

    def restart(self, *, timeout: float = _NATS_START_TIMEOUT) -> Self:
        """Stop, then start (same port)."""
        self.stop()
        return self.start(timeout=timeout)


class LiftbridgeContainer(Container):
    """A Liftbridge node with id ``server_id`` on ``127.0.0.1:port``."""

    def __init__(
        self,
        cli: DockerCLI,
        name: str,
        image: str,
        args: Sequence[str],
        *,
        server_id: str,
        port: int,
        deployment: str,
        env: Mapping[str, str] | None = None,
    ) -> None:
        """Describe the node: ``args`` go after the image (config, ports, NATS)."""
        super().__init__(cli, name, image, args, deployment=deployment, env=env)
        self._server_id = server_id
        self._port = port

    def __repr__(self) -> str:
        """Id, address and container name."""
        return f"<LiftbridgeContainer {self._server_id} {self.address} {self.name}>"

    @property
    def server_id(self) -> str:
        """The node's id."""
        return self._server_id

    @property
    def port(self) -> int:
        """The gRPC port."""
        return self._port

    @property
    def address(self) -> str:
        """``127.0.0.1:<port>``."""
        return f"{LOOPBACK}:{self._port}"

    def start(self, *, wait: bool = True, timeout: float = _NODE_START_TIMEOUT) -> Self:
        """Start the container; with ``wait``, until the node can create a stream."""
        self._launch()
        if wait:
            self.wait_ready(timeout)
        return self

    def restart(self, *, wait: bool = True, timeout: float = _NODE_START_TIMEOUT) -> Self:
        """Stop gracefully, then start again (same container, data and port)."""
        self.stop()
        return self.start(wait=wait, timeout=timeout)

    def wait_ready(self, timeout: float = _NODE_START_TIMEOUT) -> None:
        """Block until the node can create a stream (it must be running)."""
        try:
            wait_serving(self.address, timeout=timeout, check_alive=self.check_alive)
        except ServerStartError as exc:
            raise ServerStartError(f"{exc}\nlast output of {self!r}:\n{self.tail()}") from exc
