"""Which kind of deployment the pytest fixtures use: local binaries, containers or external.

Chosen by ``--liftbridge-deployment`` or ``$LIFTBRIDGE_DEPLOYMENT`` (the option wins):

- ``auto`` (default): ``external`` when ``LIFTBRIDGE_ADDRS`` is set, else ``local``.
- ``local``: servers run from the binaries the harness provisions.
- ``docker``: servers run in containers of the locally built images.
- ``external``: servers from ``LIFTBRIDGE_ADDRS`` / ``LIFTBRIDGE_NATS_URL`` (required).

The cluster fixture needs nodes it can kill: it runs locally for ``auto``, ``local`` and
``external``, and in containers for ``docker``.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

from liftbridge_client.testing._deployments import ENV_ADDRS, ENV_NATS_URL
from liftbridge_client.testing._errors import ConfigError

__all__ = ["ENV_DEPLOYMENT", "DeploymentKind", "cluster_kind", "server_kind"]

ENV_DEPLOYMENT = "LIFTBRIDGE_DEPLOYMENT"


class DeploymentKind(enum.StrEnum):
    """Where the fixtures' servers run."""

    AUTO = "auto"
    LOCAL = "local"
    DOCKER = "docker"
    EXTERNAL = "external"


def _requested(option: str | None, environ: Mapping[str, str]) -> DeploymentKind:
    raw = (option or environ.get(ENV_DEPLOYMENT, "") or "auto").strip().lower()
    try:
        return DeploymentKind(raw)
    except ValueError:
        choices = ", ".join(kind.value for kind in DeploymentKind)
        source = "--liftbridge-deployment" if option else f"${ENV_DEPLOYMENT}"
        raise ConfigError(f"{source}={raw!r} is not one of: {choices}") from None


def server_kind(option: str | None, environ: Mapping[str, str]) -> DeploymentKind:
    """The kind the ``liftbridge_server`` fixture uses (never ``AUTO``)."""
    kind = _requested(option, environ)
    has_addrs = bool(environ.get(ENV_ADDRS, "").strip())
    if kind is DeploymentKind.AUTO:
        return DeploymentKind.EXTERNAL if has_addrs else DeploymentKind.LOCAL
    if kind is DeploymentKind.EXTERNAL and not has_addrs:
        raise ConfigError(
            f"the external deployment needs ${ENV_ADDRS} and ${ENV_NATS_URL} "
            "(e.g. 127.0.0.1:9292 and nats://127.0.0.1:4222)"
        )
    return kind


def cluster_kind(option: str | None, environ: Mapping[str, str]) -> DeploymentKind:
    """The kind the ``liftbridge_cluster`` fixture uses: ``DOCKER`` or ``LOCAL``."""
    kind = _requested(option, environ)
    return DeploymentKind.DOCKER if kind is DeploymentKind.DOCKER else DeploymentKind.LOCAL
