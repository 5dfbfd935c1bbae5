"""How the client's NATS connection authenticates and encrypts: options to nats-py arguments.

Secrets stay in files (nkey seeds, credentials files, TLS keys) or in the `NatsAuth` object;
nothing here logs them. Problems found before dialing (a missing file, a key that does
not load, the nkeys package missing) raise `InvalidInputError` naming the option.
"""

from __future__ import annotations

import importlib.util
import ssl
from typing import Any

from liftbridge_client.errors import InvalidInputError
from liftbridge_client.options import ClientOptions, NatsAuth, TLSConfig

__all__ = ["nats_security_args", "ssl_context"]


def ssl_context(tls: TLSConfig, name: str = "nats_tls") -> ssl.SSLContext:
    """A client-side SSL context: the CA (default: the system's), and a client certificate."""
    try:
        ctx = ssl.create_default_context(
            ssl.Purpose.SERVER_AUTH, cafile=str(tls.ca_file) if tls.ca_file else None
        )
        if tls.cert_file is not None and tls.key_file is not None:
            ctx.load_cert_chain(str(tls.cert_file), str(tls.key_file))
    except (OSError, ssl.SSLError, ValueError) as exc:
        raise InvalidInputError(f"{name}: cannot load the certificates or key: {exc}") from exc
    return ctx


def _auth_args(auth: NatsAuth) -> dict[str, Any]:
    args: dict[str, Any] = {}
    if auth.user is not None:
        args["user"] = auth.user
    if auth.password is not None:
        args["password"] = auth.password
    if auth.token is not None:
        args["token"] = auth.token
    for option, path, nats_arg in (
        ("nkey_seed_file", auth.nkey_seed_file, "nkeys_seed"),
        ("creds_file", auth.creds_file, "user_credentials"),
    ):
        if path is None:
            continue
        if importlib.util.find_spec("nkeys") is None:
            raise InvalidInputError(
                f"NatsAuth.{option} needs the nkeys package: pip install 'liftbridge-client[nkeys]'"
            )
        if not path.is_file():
            raise InvalidInputError(f"NatsAuth.{option}: no such file: {path}")
        args[nats_arg] = str(path)
    return args


def nats_security_args(options: ClientOptions) -> dict[str, Any]:
    """The nats-py ``connect`` arguments for ``options.nats_auth``, ``nats_tls`` and
    ``nats_inbox_prefix``."""
    args: dict[str, Any] = {}
    if options.nats_auth is not None:
        args.update(_auth_args(options.nats_auth))
    if options.nats_inbox_prefix is not None:
        args["inbox_prefix"] = options.nats_inbox_prefix
    tls = options.nats_tls
    if tls is not None:
        args["tls"] = ssl_context(tls)
        if tls.server_name:
            args["tls_hostname"] = tls.server_name
    return args
