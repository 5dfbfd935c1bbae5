"""Server configuration files, generated from small typed descriptions.

Pure functions and frozen dataclasses only: nothing here starts a process or touches the
network, so every rule (loopback only, cursors on, peers as a list, no keys v1.9.0 rejects)
is unit-tested without a server.

Liftbridge reads YAML through viper and rejects unknown keys. Every setting is written as one
``dotted.key: <value>`` line whose value is JSON (a subset of YAML): strings are quoted,
lists are flow sequences (``["n1", "n2", "n3"]``), durations are Go duration strings
(``"500ms"``, ``"3s"``).
"""

from __future__ import annotations

import ipaddress
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from liftbridge_client.testing._errors import ConfigError

# A file or directory the harness is given: a str or any os.PathLike, as open() takes
# (a plain str used to fail deep inside with AttributeError: no .mkdir).
StrPath = str | os.PathLike[str]

__all__ = [
    "ACTIVITY_STREAM_SETTINGS",
    "CLUSTER_SETTINGS",
    "DEFAULT_LOG_LEVEL",
    "ENV_LOG_LEVEL",
    "GROUP_SETTINGS",
    "LOG_LEVELS",
    "LOOPBACK",
    "NatsServerTLS",
    "NodeConfig",
    "Setting",
    "check_loopback",
    "default_log_level",
    "log_level",
    "nats_embedded_config",
    "nats_server_argv",
    "nats_url",
    "render_settings",
]

LOOPBACK = "127.0.0.1"
"""The only interface any server of the harness binds to."""

Setting = str | int | bool | tuple[str, ...]
"""A value of one Liftbridge setting."""

LOG_LEVELS: tuple[str, ...] = ("debug", "info", "warn", "error")
"""The values Liftbridge accepts for ``logging.level`` (v1.7.1 to master)."""

DEFAULT_LOG_LEVEL = "info"
"""The servers' log level unless a test, the environment or ``--liftbridge-log-level`` says.

At debug a node logs several lines per request: a 200,000-message write produced about
200 MB of log and cost 12-15 % of write throughput. Tests that read the servers' debug lines
ask for ``log_level="debug"`` themselves.
"""

ENV_LOG_LEVEL = "LIFTBRIDGE_LOG_LEVEL"
"""Environment variable that sets the default log level (the pytest option sets it too)."""


def log_level(value: str) -> str:
    """``value`` as Liftbridge's ``logging.level`` (lower case); ConfigError if unknown."""
    level = value.strip().lower()
    if level not in LOG_LEVELS:
        raise ConfigError(f"log level {value!r} is not one of {', '.join(LOG_LEVELS)}")
    return level


def default_log_level(environ: Mapping[str, str] | None = None) -> str:
    """``$LIFTBRIDGE_LOG_LEVEL`` when set (and valid), else :data:`DEFAULT_LOG_LEVEL`."""
    configured = (os.environ if environ is None else environ).get(ENV_LOG_LEVEL, "").strip()
    if not configured:
        return DEFAULT_LOG_LEVEL
    try:
        return log_level(configured)
    except ConfigError as exc:
        raise ConfigError(f"${ENV_LOG_LEVEL}: {exc}") from None


CLUSTER_SETTINGS: Mapping[str, Setting] = MappingProxyType(
    {
        # Failover in seconds, not the default 15 s / 15 s / 10 s. idle.wait must stay below
        # lag.time or the ISRs of idle streams shrink and grow all the time.
        "clustering.replica.max.lag.time": "3s",
        "clustering.replica.max.leader.timeout": "3s",
        "clustering.replica.max.idle.wait": "500ms",
        # Well below leader.timeout, as the defaults are (3 s vs 15 s). When they are equal, one
        # replication request a new leader drops (it drops those of a newer epoch than its
        # own) makes its follower report it; the server (v1.7.1 to master) keeps the
        # witnesses of the previous failover, so that single report elects yet another
        # leader, possibly one that just truncated to its high watermark: acked messages
        # lost (docs/testing.md).
        "clustering.replica.fetch.timeout": "1s",
        # A node answers FetchMetadata from a broker cache while the Raft membership is
        # unchanged. When that cache has expired, it surveys its peers and waits for every
        # one of them: with a peer down the call lasts until the caller's deadline, and the
        # short list it gathered is then cached, so a restarted peer stays missing for the
        # cache's lifetime (2 min by default). Filled while every node is up (the cluster's
        # readiness check does that) and kept for an hour, the list stays complete and quick
        # through kills and restarts, which keep every node's address.
        "metadata.cache.max.age": "1h",
    }
)
"""Settings every node of a test :class:`~liftbridge_client.testing.Cluster` gets by default.

The metadata Raft group's own timeouts are not configurable in v1.9.0 (hashicorp/raft
defaults: about 1 s to elect a new metadata leader).
"""

GROUP_SETTINGS: Mapping[str, Setting] = MappingProxyType(
    {
        # Consumer groups notice a silent member or coordinator in seconds, not the default
        # 15 s each. Members heartbeat every 0.4 x the consumer timeout.
        "groups.consumer.timeout": "3s",
        "groups.coordinator.timeout": "3s",
    }
)
"""Settings for group tests (v1.8.0+ keys): fast expiry of members and coordinators."""

ACTIVITY_STREAM_SETTINGS: Mapping[str, Setting] = MappingProxyType(
    {"activity.stream.enabled": True}
)
"""Settings that make the server publish its activity stream (``__activity``)."""

# Keys the harness owns: passing them in ``extra`` would silently fight the typed fields.
_OWNED_KEYS = frozenset(
    {
        "listen",
        "host",
        "port",
        "data.dir",
        "logging.level",
        "nats.servers",
        "nats.embedded",
        "nats.embedded.config",
        "clustering.server.id",
        "clustering.namespace",
        "clustering.raft.bootstrap.seed",
        "clustering.raft.bootstrap.peers",
        "cursors.stream.partitions",
    }
)


@dataclass(frozen=True, slots=True)
class NodeConfig:
    """Everything that makes one Liftbridge node's configuration file.

    The node listens on ``127.0.0.1:port`` only. With ``embedded_nats_config`` set it also
    runs an embedded NATS server configured by that file (see :func:`nats_embedded_config`)
    and ``nats_servers`` must point at it: Liftbridge does not connect to its embedded NATS
    by itself.
    """

    server_id: str
    port: int
    data_dir: Path
    nats_servers: tuple[str, ...]
    namespace: str | None = None
    embedded_nats_config: Path | None = None
    bootstrap_seed: bool = False
    bootstrap_peers: tuple[str, ...] = ()
    cursors_partitions: int = 1
    # Read from the environment when the config is made, so ``settings()`` stays pure.
    log_level: str = field(default_factory=default_log_level)
    extra: Mapping[str, Setting] = field(default_factory=dict)
    # Builds newer than v1.9.0 (master) phone home unless told not to; v1.9.0 and older
    # reject the key. The deployment sets this from the server version it runs.
    telemetry_off: bool = False
    host: str = LOOPBACK

    def settings(self) -> dict[str, Setting]:
        """Return the settings as flat dotted keys, validated."""
        if not 0 < self.port < 65536:
            raise ConfigError(f"port {self.port} is out of range")
        if not self.server_id:
            raise ConfigError("server_id must not be empty")
        check_loopback(self.host)
        if not self.nats_servers:
            raise ConfigError("nats_servers must not be empty")
        if self.bootstrap_seed and self.bootstrap_peers:
            raise ConfigError("use bootstrap_seed or bootstrap_peers, not both")
        for key in self.extra:
            if key in _OWNED_KEYS:
                raise ConfigError(f"{key!r} is set by the harness; use the NodeConfig field")
            if key == "telemetry" or key.startswith("telemetry."):
                raise ConfigError(
                    f"{key!r}: telemetry is set by the harness from the server version "
                    "(off for master builds; v1.9.0 and older reject the key)"
                )
        settings: dict[str, Setting] = {
            "host": self.host,
            "port": self.port,
            "data.dir": str(self.data_dir),
            "logging.level": log_level(self.log_level),
            "nats.servers": self.nats_servers,
            "clustering.server.id": self.server_id,
            "cursors.stream.partitions": self.cursors_partitions,
        }
        if self.embedded_nats_config is not None:
            settings["nats.embedded"] = True
            settings["nats.embedded.config"] = str(self.embedded_nats_config)
        if self.namespace is not None:
            settings["clustering.namespace"] = self.namespace
        if self.bootstrap_seed:
            settings["clustering.raft.bootstrap.seed"] = True
        if self.bootstrap_peers:
            settings["clustering.raft.bootstrap.peers"] = self.bootstrap_peers
        settings.update(self.extra)
        if self.telemetry_off:
            settings["telemetry.enabled"] = False
        return settings

    def render(self) -> str:
        """Return the YAML text of the configuration file."""
        return render_settings(self.settings(), header=f"Liftbridge node {self.server_id}")


def render_settings(settings: Mapping[str, Setting], *, header: str = "") -> str:
    """Render flat dotted settings as YAML, one ``key: <JSON value>`` line each."""
    lines = [f"# {header} (generated by liftbridge_client.testing)"] if header else []
    for key, value in settings.items():
        encoded = json.dumps(list(value)) if isinstance(value, tuple) else json.dumps(value)
        lines.append(f"{key}: {encoded}")
    return "\n".join(lines) + "\n"


def nats_embedded_config(
    port: int,
    credentials: tuple[str, str] | None = None,
    *,
    tls: NatsServerTLS | None = None,
    nkeys: Sequence[str] = (),
    users: Sequence[Mapping[str, object]] = (),
) -> str:
    """The NATS configuration for an embedded server: loopback only, on ``port``.

    Without it the embedded server binds 0.0.0.0:4222. ``credentials`` (user, password)
    makes NATS require them; ``nkeys`` (public user keys, ``U...``) are further users,
    authenticating with their seeds. ``tls`` makes NATS require TLS (and, with
    ``verify``, a client certificate signed by ``ca_file``). ``users`` are further entries
    of the NATS ``authorization.users`` list, as mappings (e.g. ``{"user": "u",
    "password": "p", "permissions": {"publish": {"allow": ["a.>"]}}}``), written as JSON,
    which NATS configuration files accept.
    """
    text = f"listen: {LOOPBACK}:{port}\n"
    if tls is not None:
        text += (
            "tls {\n"
            f"  cert_file: {json.dumps(str(tls.cert_file))}\n"
            f"  key_file: {json.dumps(str(tls.key_file))}\n"
            f"  ca_file: {json.dumps(str(tls.ca_file))}\n"
            f"  verify: {json.dumps(tls.verify)}\n"
            "  timeout: 5\n"
            "}\n"
        )
    entries: list[str] = []
    if credentials is not None:
        user, password = (json.dumps(v) for v in credentials)
        entries.append(f"{{user: {user}, password: {password}}}")
    entries += [f"{{nkey: {json.dumps(key)}}}" for key in nkeys]
    entries += [json.dumps(dict(entry)) for entry in users]
    if entries:
        text += "authorization {\n  users: [\n" + "".join(f"    {u}\n" for u in entries)
        text += "  ]\n}\n"
    return text


@dataclass(frozen=True)
class NatsServerTLS:
    """TLS files of a NATS server; ``verify`` demands client certificates too."""

    cert_file: Path
    key_file: Path
    ca_file: Path
    verify: bool = False


def check_loopback(host: str) -> str:
    """Return ``host`` if it is an IPv4 loopback address (127.0.0.0/8), else raise
    :class:`ConfigError`: no server of the harness may be reachable from elsewhere."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        raise ConfigError(
            f"host {host!r} is not an IP address (a loopback one is needed)"
        ) from None
    if address.version != 4 or not address.is_loopback:
        raise ConfigError(f"host {host!r} is not in 127.0.0.0/8: servers bind loopback only")
    return host


def nats_server_argv(binary: Path, port: int, host: str = LOOPBACK) -> list[str]:
    """The command line of a standalone ``nats-server`` on ``host:port`` (loopback)."""
    return [str(binary), "-a", check_loopback(host), "-p", str(port)]


def nats_url(port: int, host: str = LOOPBACK) -> str:
    """The client URL of a NATS server on a loopback address and port."""
    return f"nats://{host}:{port}"
