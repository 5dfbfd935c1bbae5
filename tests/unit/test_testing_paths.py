"""The harness takes a directory or a file as a str or any os.PathLike, not only a Path.

`SingleNode(base_dir="...")` with a str raised AttributeError (``str`` has no ``mkdir``);
every public place that takes a path is checked here with a str and a PathLike.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from liftbridge_client.testing import (
    AuthzPolicy,
    Cluster,
    LiftbridgeNode,
    NatsServer,
    SingleNode,
    make_nkey_user,
    make_operator_setup,
    make_pki,
)

FAKE_BINARY = "/nonexistent/liftbridge"  # configured, never started


class _FsPath(os.PathLike[str]):
    """An os.PathLike that is not a Path (as pytest's py.path or a user's own type)."""

    def __init__(self, path: Path) -> None:
        self._path = str(path)

    def __fspath__(self) -> str:
        return self._path


AS_STR: Callable[[Path], str | os.PathLike[str]] = str
PATH_FORMS = [pytest.param(AS_STR, id="str"), pytest.param(_FsPath, id="pathlike")]


@pytest.mark.parametrize("form", PATH_FORMS)
def test_single_node_takes_a_str_or_pathlike_base_dir_and_binary(
    tmp_path: Path, form: Callable[[Path], str | os.PathLike[str]]
) -> None:
    base = tmp_path / "single"
    single = SingleNode(base_dir=form(base), binary=form(Path(FAKE_BINARY)))
    try:
        assert single.node.workdir == base / "n1"
        assert (base / "n1" / "config.yaml").is_file()
        assert single.node.binary == Path(FAKE_BINARY)
    finally:
        single.close()
    assert base.is_dir()  # a directory it was given is the caller's: kept


@pytest.mark.parametrize("form", PATH_FORMS)
def test_cluster_takes_a_str_or_pathlike_base_dir_and_binary(
    tmp_path: Path, form: Callable[[Path], str | os.PathLike[str]]
) -> None:
    base = tmp_path / "cluster"
    cluster = Cluster(2, base_dir=form(base), binary=form(Path(FAKE_BINARY)))
    try:
        assert {node.workdir for node in cluster.nodes} == {base / "n1", base / "n2"}
        assert all(node.binary == Path(FAKE_BINARY) for node in cluster.nodes)
        assert cluster.nats.workdir == base / "nats"
    finally:
        cluster.close()


@pytest.mark.parametrize("form", PATH_FORMS)
def test_servers_take_a_str_or_pathlike_workdir(
    tmp_path: Path, form: Callable[[Path], str | os.PathLike[str]]
) -> None:
    single = SingleNode(base_dir=tmp_path / "s", binary=FAKE_BINARY)
    node = LiftbridgeNode(single.node.config, form(tmp_path / "node"), binary=form(Path("/x")))
    assert (tmp_path / "node" / "config.yaml").is_file()
    node.switch_version(node.version, binary=form(Path("/y")))
    assert node.binary == Path("/y")
    nats = NatsServer(form(tmp_path / "nats"), binary=form(Path("/z")), config="debug: false")
    assert (tmp_path / "nats" / "nats.conf").is_file()
    assert nats.workdir == tmp_path / "nats"
    single.close()


@pytest.mark.parametrize("form", PATH_FORMS)
def test_file_writers_take_a_str_or_pathlike_directory(
    tmp_path: Path, form: Callable[[Path], str | os.PathLike[str]]
) -> None:
    settings = AuthzPolicy().settings(form(tmp_path / "authz"))
    assert (tmp_path / "authz" / "authz_policy.csv").is_file()
    assert settings
    pytest.importorskip("nkeys")
    assert make_nkey_user(form(tmp_path / "nk")).seed_file.parent == tmp_path / "nk"
    assert make_operator_setup(form(tmp_path / "op")).creds_file.parent == tmp_path / "op"
    if shutil.which("openssl") is None:
        pytest.skip("make_pki needs openssl")
    pki = make_pki(form(tmp_path / "pki"))
    assert pki.ca_cert.parent == tmp_path / "pki"
