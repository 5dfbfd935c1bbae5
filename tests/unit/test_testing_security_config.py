"""Harness security configuration without servers: NATS TLS, users, operator mode, authz."""

from __future__ import annotations

from pathlib import Path

import pytest

from liftbridge_client.testing import (
    AuthzPolicy,
    ConfigError,
    NatsServer,
    make_nkey_user,
    make_operator_setup,
)
from liftbridge_client.testing._config import NatsServerTLS, nats_embedded_config
from liftbridge_client.testing._tls import CLIENT_CN


def test_nats_config_with_tls_nkeys_and_users(tmp_path: Path) -> None:
    tls = NatsServerTLS(tmp_path / "s.pem", tmp_path / "s.key", tmp_path / "ca.pem", verify=True)
    text = nats_embedded_config(
        4222,
        ("lb", "pw"),
        tls=tls,
        nkeys=["UABC"],
        users=[{"user": "o", "password": "p", "permissions": {"publish": {"allow": ["a.>"]}}}],
    )
    assert text.startswith("listen: 127.0.0.1:4222\n")
    assert f'cert_file: "{tmp_path / "s.pem"}"' in text
    assert "verify: true" in text
    assert '{user: "lb", password: "pw"}' in text
    assert '{nkey: "UABC"}' in text
    assert '"permissions": {"publish": {"allow": ["a.>"]}}' in text


def test_nkey_user_seed_file_is_private(tmp_path: Path) -> None:
    user = make_nkey_user(tmp_path, "u")
    assert user.public_key.startswith("U")
    assert user.seed_file.read_bytes().startswith(b"SU")
    assert user.seed_file.stat().st_mode & 0o077 == 0


def test_operator_setup(tmp_path: Path) -> None:
    setup = make_operator_setup(tmp_path, "u")
    creds = setup.creds_file.read_text()
    assert "BEGIN NATS USER JWT" in creds
    assert "BEGIN USER NKEY SEED" in creds
    assert setup.server_config.startswith("operator: ")
    assert "resolver: MEMORY" in setup.server_config


@pytest.mark.parametrize("line", ["listen: 0.0.0.0:4222", "port: 4222", "  host = 0.0.0.0"])
def test_nats_server_config_may_not_move_the_listener(tmp_path: Path, line: str) -> None:
    with pytest.raises(ConfigError):
        NatsServer(tmp_path, config=f"debug: true\n{line}\n")


def test_authz_policy_files(tmp_path: Path) -> None:
    settings = AuthzPolicy([("alice", "orders", "Publish")]).settings(tmp_path)
    assert settings["tls.client.authz.enabled"] is True
    policy = Path(str(settings["tls.client.authz.policy"])).read_text().splitlines()
    assert "p, alice, orders, Publish" in policy
    assert f"p, {CLIENT_CN}, lbtest-probe-*, CreateStream" in policy  # the harness's probe
    model = Path(str(settings["tls.client.authz.model"])).read_text()
    assert "keyMatch(r.obj, p.obj)" in model
