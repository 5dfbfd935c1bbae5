"""NATS authentication and TLS options: validation, reprs and the nats-py arguments."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from liftbridge_client import ClientOptions, NatsAuth, TLSConfig, errors
from liftbridge_client._transport.nats import nats_security_args


def test_one_way_to_authenticate(tmp_path: Path) -> None:
    seed = tmp_path / "u.nk"
    with pytest.raises(errors.InvalidInputError, match="one way"):
        NatsAuth(user="u", password="p", nkey_seed_file=seed)
    with pytest.raises(errors.InvalidInputError, match="one way"):
        NatsAuth(nkey_seed_file=seed, creds_file=tmp_path / "u.creds")
    with pytest.raises(errors.InvalidInputError, match="creds_file"):
        NatsAuth(creds_file=5)  # type: ignore[arg-type]
    assert NatsAuth(nkey_seed_file=str(seed)).nkey_seed_file == seed  # type: ignore[arg-type]


def test_args_for_user_password_token() -> None:
    opts = ClientOptions(nats_auth=NatsAuth(user="u", password="secret"))
    assert nats_security_args(opts) == {"user": "u", "password": "secret"}
    assert "secret" not in repr(opts)
    assert nats_security_args(ClientOptions()) == {}


def test_args_for_files(tmp_path: Path) -> None:
    seed = tmp_path / "u.nk"
    seed.write_bytes(b"SUAXXXX")
    creds = tmp_path / "u.creds"
    creds.write_text("jwt and seed")
    args = nats_security_args(ClientOptions(nats_auth=NatsAuth(nkey_seed_file=seed)))
    assert args == {"nkeys_seed": str(seed)}
    args = nats_security_args(ClientOptions(nats_auth=NatsAuth(creds_file=creds)))
    assert args == {"user_credentials": str(creds)}
    with pytest.raises(errors.InvalidInputError, match="no such file"):
        nats_security_args(ClientOptions(nats_auth=NatsAuth(creds_file=tmp_path / "nope")))


def test_tls_args(tmp_path: Path) -> None:
    args = nats_security_args(ClientOptions(nats_tls=TLSConfig(server_name="nats.internal")))
    assert isinstance(args["tls"], ssl.SSLContext)
    assert args["tls"].verify_mode is ssl.CERT_REQUIRED
    assert args["tls_hostname"] == "nats.internal"
    bad = tmp_path / "key.pem"
    bad.write_text("garbage")
    tls = TLSConfig(cert_file=bad, key_file=bad)
    with pytest.raises(errors.InvalidInputError, match="nats_tls"):
        nats_security_args(ClientOptions(nats_tls=tls))
    assert str(bad) not in repr(tls).split("key_file=")[1]


def test_inbox_prefix() -> None:
    args = nats_security_args(ClientOptions(nats_inbox_prefix="_INBOX_orders"))
    assert args == {"inbox_prefix": "_INBOX_orders"}
    for bad in ("_INBOX.>", "a b", "", "a..b"):
        with pytest.raises(errors.InvalidInputError, match="nats_inbox_prefix"):
            ClientOptions(nats_inbox_prefix=bad)
