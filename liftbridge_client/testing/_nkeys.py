"""Throwaway NATS nkey users for tests: a seed file for the client, a public key for the server.

Needs the ``nkeys`` package (a dev dependency; ``liftbridge-client[nkeys]``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from liftbridge_client.testing._errors import HarnessError

__all__ = ["NkeyUser", "make_nkey_user"]


@dataclass(frozen=True)
class NkeyUser:
    """A NATS user nkey: ``seed_file`` (give it to `NatsAuth`) and ``public_key`` (``U...``)."""

    seed_file: Path
    public_key: str


def make_nkey_user(directory: Path, name: str = "user") -> NkeyUser:
    """Write a fresh user seed to ``directory/<name>.nk`` (mode 0600) and return the pair."""
    try:
        import nkeys  # type: ignore[import-untyped]
    except ImportError as exc:  # pragma: no cover - a dev dependency
        raise HarnessError("nkey users need the nkeys package (pip install nkeys)") from exc
    seed = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER)
    public = nkeys.from_seed(bytearray(seed)).public_key.decode()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.nk"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(seed)
    return NkeyUser(seed_file=path, public_key=public)
