"""The Liftbridge server versions the harness can provision, and what each one needs.

Pure data and functions (no IO): where a version's source comes from, how a built binary
proves it is that version, and whether its config must switch telemetry off.

- Releases (``v1.9.0``, ``v1.7.1``) come from the Go module proxy and report their version
  with ``liftbridge --version``.
- ``master-50ac358b41eb`` is built from a source snapshot (the proxy refuses that
  pseudo-version). It reports ``dev``, so its cache entry carries a stamp file instead. It
  sends telemetry to an outside host unless its config says ``telemetry.enabled: false``,
  while the releases reject that key: :func:`needs_telemetry_off` tells them apart.
- ``v1.9.0+lbc.1`` is v1.9.0 from the Go module proxy with this project's patches applied
  (``patches/liftbridge/v1.9.0+lbc.1/`` in the repository; docs/compatibility.md says what
  they fix). It reports ``v1.9.0``, so its cache entry carries a stamp file too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from liftbridge_client.testing._errors import ConfigError

__all__ = [
    "DEFAULT_VERSION",
    "KNOWN_VERSIONS",
    "MASTER_COMMIT",
    "MASTER_SNAPSHOT_NAME",
    "MASTER_VERSION",
    "PATCHED_VERSION",
    "TELEMETRY_OFF_LINE",
    "ServerVersion",
    "needs_telemetry_off",
    "server_version",
]

DEFAULT_VERSION = "v1.9.0"
"""The release every fixture runs unless a test asks for another one."""

MASTER_COMMIT = "50ac358b41eb"
MASTER_VERSION = f"master-{MASTER_COMMIT}"
MASTER_SNAPSHOT_NAME = f"liftbridge-{MASTER_COMMIT}.tar.gz"

PATCHED_VERSION = "v1.9.0+lbc.1"
"""v1.9.0 with the project's server patches (acked-message loss at a leader failover)."""

TELEMETRY_OFF_LINE = "telemetry.enabled: false"
"""The line (as rendered by the harness) that keeps a master build from phoning home."""

# A release, or a release with build metadata (``+lbc.1``: patched, same config keys).
_RELEASE_RE = re.compile(r"^v(\d+)\.(\d+)\.(\d+)(?:\+[0-9A-Za-z.-]+)?$")
# Releases up to this one have no telemetry and reject the telemetry.* keys.
_LAST_RELEASE_WITHOUT_TELEMETRY = (1, 9, 0)


@dataclass(frozen=True, slots=True)
class ServerVersion:
    """One provisionable server version."""

    name: str  # what tests and the CLI call it
    snapshot: str | None = None  # file name of a source snapshot; None: the Go module proxy
    patched_from: str | None = None  # the release whose source the project's patches change

    @property
    def is_release(self) -> bool:
        """True for a tagged release fetched from the Go module proxy, unchanged."""
        return self.snapshot is None and self.patched_from is None

    @property
    def is_patched(self) -> bool:
        """True for a release built with the patches in ``patches/liftbridge/<name>/``."""
        return self.patched_from is not None

    @property
    def telemetry_off(self) -> bool:
        """True when every config for this version must carry ``telemetry.enabled: false``."""
        return needs_telemetry_off(self.name)


KNOWN_VERSIONS: tuple[ServerVersion, ...] = (
    ServerVersion(DEFAULT_VERSION),
    ServerVersion("v1.7.1"),
    ServerVersion(MASTER_VERSION, snapshot=MASTER_SNAPSHOT_NAME),
    ServerVersion(PATCHED_VERSION, patched_from=DEFAULT_VERSION),
)
"""Every version the harness provisions (``make servers``), the default first."""

_ALIASES = {"master": MASTER_VERSION, "default": DEFAULT_VERSION}


def server_version(name: str) -> ServerVersion:
    """The :class:`ServerVersion` called ``name`` (``master`` and ``default`` are aliases)."""
    wanted = _ALIASES.get(name, name)
    for version in KNOWN_VERSIONS:
        if version.name == wanted:
            return version
    known = ", ".join(v.name for v in KNOWN_VERSIONS)
    raise ConfigError(f"unknown Liftbridge server version {name!r}; known: {known} (or master)")


def needs_telemetry_off(version: str) -> bool:
    """True unless ``version`` is a release up to v1.9.0 (which has no telemetry).

    A patched release (``v1.9.0+lbc.1``) counts as its release.

    Anything else - master builds, ``dev``, an unparsable string - is treated as a build
    that may send telemetry, so its config must disable it.
    """
    match = _RELEASE_RE.match(version)
    if match is None:
        return True
    parts = (int(match[1]), int(match[2]), int(match[3]))
    return parts > _LAST_RELEASE_WITHOUT_TELEMETRY
