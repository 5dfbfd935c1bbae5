"""Connection settings of the command line, and the `Client` they make."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import click

from liftbridge_client.client import Client
from liftbridge_client.options import ClientOptions, NatsAuth, TLSConfig

__all__ = ["ConnectionSettings", "check_transport", "split_list"]


def split_list(values: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """Flags given several times and comma-separated lists, as one tuple."""
    return tuple(part.strip() for value in values for part in value.split(",") if part.strip())


@dataclass(frozen=True, slots=True)
class ConnectionSettings:
    """Where and how to connect: the root command's options (flags or LIFTBRIDGE_*)."""

    brokers: tuple[str, ...]
    nats_servers: tuple[str, ...] = field(default=(), repr=False)  # URLs may hold secrets
    tls_ca: Path | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_server_name: str | None = None
    nats_user: str | None = None
    nats_password: str | None = field(default=None, repr=False)
    nats_token: str | None = field(default=None, repr=False)
    nats_nkey_seed_file: Path | None = None
    nats_creds: Path | None = None
    nats_tls_ca: Path | None = None
    nats_tls_cert: Path | None = None
    nats_tls_key: Path | None = None
    nats_inbox_prefix: str | None = None
    timeout: float = 5.0
    traceparent: str | None = None
    debug: bool = False

    def client_options(self, **overrides: object) -> ClientOptions:
        tls = None
        if self.tls_ca or self.tls_cert or self.tls_key or self.tls_server_name:
            tls = TLSConfig(
                ca_file=self.tls_ca,
                cert_file=self.tls_cert,
                key_file=self.tls_key,
                server_name=self.tls_server_name,
            )
        auth = None
        secrets = (self.nats_user, self.nats_password, self.nats_token)
        if any(secrets) or self.nats_nkey_seed_file or self.nats_creds:
            auth = NatsAuth(
                user=self.nats_user,
                password=self.nats_password,
                token=self.nats_token,
                nkey_seed_file=self.nats_nkey_seed_file,
                creds_file=self.nats_creds,
            )
        nats_tls = None
        if self.nats_tls_ca or self.nats_tls_cert or self.nats_tls_key:
            nats_tls = TLSConfig(
                ca_file=self.nats_tls_ca, cert_file=self.nats_tls_cert, key_file=self.nats_tls_key
            )
        kwargs: dict[str, object] = {
            "connect_timeout": self.timeout,
            "rpc_timeout": self.timeout,
            "tls": tls,
            "nats_auth": auth,
            "nats_tls": nats_tls,
            "nats_inbox_prefix": self.nats_inbox_prefix,
        }
        kwargs.update(overrides)
        return ClientOptions(**kwargs)  # type: ignore[arg-type]

    def client(self, **overrides: object) -> Client:
        """A new (unconnected) client; ``overrides`` are `ClientOptions` fields."""
        return Client(
            list(self.brokers),
            nats_servers=list(self.nats_servers) or None,
            options=self.client_options(**overrides),
        )


def check_transport(transport: str | None, settings: ConnectionSettings) -> None:
    """A usage error for ``-t nats`` without a NATS URL (before anything connects)."""
    if transport == "nats" and not settings.nats_servers:
        raise click.UsageError(
            "-t nats needs a NATS server: give --nats URL (or LIFTBRIDGE_NATS_URL), or use -t grpc"
        )
