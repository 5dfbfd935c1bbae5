"""Throwaway NATS nkey users for tests: a seed file for the client, a public key for the server.

Needs the ``nkeys`` package (a dev dependency; ``liftbridge-client[nkeys]``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from liftbridge_client.testing._config import StrPath
from liftbridge_client.testing._errors import HarnessError

__all__ = ["NkeyUser", "OperatorSetup", "make_nkey_user", "make_operator_setup"]


@dataclass(frozen=True)
class NkeyUser:
    """A NATS user nkey: ``seed_file`` (give it to `NatsAuth`) and ``public_key`` (``U...``)."""

    seed_file: Path
    public_key: str


def make_nkey_user(directory: StrPath, name: str = "user") -> NkeyUser:
    """Write a fresh user seed to ``directory/<name>.nk`` (mode 0600) and return the pair."""
    try:
        import nkeys  # type: ignore[import-untyped]
    except ImportError as exc:  # pragma: no cover - a dev dependency
        raise HarnessError(
            "nkey users need the nkeys package: pip install 'liftbridge-client[testing]'"
        ) from exc
    seed = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER)
    public = nkeys.from_seed(bytearray(seed)).public_key.decode()
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.nk"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(seed)
    return NkeyUser(seed_file=path, public_key=public)


# ---------------------------------------------------------------- operator mode (JWTs)


@dataclass(frozen=True)
class OperatorSetup:
    """A NATS operator, one account and one user, for a server in operator (JWT) mode.

    ``server_config`` goes into a standalone server's configuration
    (``NatsServer(workdir, config=...)``); ``creds_file`` is the user's credentials file
    (its JWT and seed, as ``nsc`` writes them) for `NatsAuth(creds_file=...)`.
    """

    server_config: str
    creds_file: Path
    user_public_key: str


def _b64(data: bytes) -> str:
    import base64

    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _jwt(claims: dict[str, object], signer: object) -> str:
    import hashlib
    import json
    import time

    body = {"iat": int(time.time()), **claims}
    digest = hashlib.new("sha512_256", json.dumps(body).encode()).digest()
    body["jti"] = _b32(digest)
    header = _b64(json.dumps({"typ": "JWT", "alg": "ed25519-nkey"}).encode())
    payload = _b64(json.dumps(body).encode())
    signature = signer.sign(f"{header}.{payload}".encode())  # type: ignore[attr-defined]
    return f"{header}.{payload}.{_b64(signature)}"


def _b32(data: bytes) -> str:
    import base64

    return base64.b32encode(data).rstrip(b"=").decode()


def _keypair(prefix: int) -> object:
    import nkeys

    return nkeys.from_seed(bytearray(nkeys.encode_seed(os.urandom(32), prefix)))


def make_operator_setup(directory: StrPath, name: str = "user") -> OperatorSetup:
    """Make an operator, an account and a user; write the user's creds file."""
    try:
        import nkeys
    except ImportError as exc:  # pragma: no cover - a dev dependency
        raise HarnessError(
            "operator mode needs the nkeys package: pip install 'liftbridge-client[testing]'"
        ) from exc
    operator = _keypair(nkeys.PREFIX_BYTE_OPERATOR)
    account = _keypair(nkeys.PREFIX_BYTE_ACCOUNT)
    user = _keypair(nkeys.PREFIX_BYTE_USER)
    op_pub = operator.public_key.decode()  # type: ignore[attr-defined]
    acc_pub = account.public_key.decode()  # type: ignore[attr-defined]
    user_pub = user.public_key.decode()  # type: ignore[attr-defined]
    unlimited = {"subs": -1, "data": -1, "payload": -1}
    op_jwt = _jwt(
        {"iss": op_pub, "sub": op_pub, "name": "op", "nats": {"type": "operator", "version": 2}},
        operator,
    )
    acc_jwt = _jwt(
        {
            "iss": op_pub,
            "sub": acc_pub,
            "name": "acc",
            "nats": {
                "limits": {
                    **unlimited,
                    "imports": -1,
                    "exports": -1,
                    "wildcards": True,
                    "conn": -1,
                    "leaf": -1,
                },
                "type": "account",
                "version": 2,
            },
        },
        operator,
    )
    user_jwt = _jwt(
        {
            "iss": acc_pub,
            "sub": user_pub,
            "name": name,
            "nats": {"pub": {}, "sub": {}, **unlimited, "type": "user", "version": 2},
        },
        account,
    )
    seed = user.seed.decode()  # type: ignore[attr-defined]
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    creds = directory / f"{name}.creds"
    fd = os.open(creds, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(
            f"-----BEGIN NATS USER JWT-----\n{user_jwt}\n------END NATS USER JWT------\n\n"
            f"-----BEGIN USER NKEY SEED-----\n{seed}\n------END USER NKEY SEED------\n"
        )
    config = (
        f"operator: {op_jwt}\nresolver: MEMORY\nresolver_preload: {{\n  {acc_pub}: {acc_jwt}\n}}\n"
    )
    return OperatorSetup(server_config=config, creds_file=creds, user_public_key=user_pub)
