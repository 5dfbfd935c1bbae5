"""Server versions in the harness without servers: telemetry off for master, snapshots."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from test_testing_config import fake_liftbridge, parse_config, write_script

from liftbridge_client.testing import (
    KNOWN_VERSIONS,
    MASTER_VERSION,
    Cluster,
    ConfigError,
    NodeConfig,
    ProvisionError,
    SingleNode,
    SnapshotMissingError,
    _deployments,
    _provision,
    server_version,
)
from liftbridge_client.testing._servers import LiftbridgeNode, check_telemetry_off
from liftbridge_client.testing._versions import TELEMETRY_OFF_LINE, needs_telemetry_off

FAKE_BINARY = Path("/nonexistent/liftbridge")


def node_config(tmp_path: Path, **kw: object) -> NodeConfig:
    return NodeConfig(
        server_id="n1",
        port=9292,
        data_dir=tmp_path / "data",
        nats_servers=("nats://127.0.0.1:4222",),
        **kw,  # type: ignore[arg-type]
    )


def test_known_versions_and_aliases() -> None:
    names = [v.name for v in KNOWN_VERSIONS]
    assert names == ["v1.9.0", "v1.7.1", MASTER_VERSION, "v1.9.0+lbc.1"]
    assert server_version("v1.9.0+lbc.1").patched_from == "v1.9.0"
    assert not server_version("v1.9.0+lbc.1").is_release
    assert server_version("master").name == MASTER_VERSION
    assert server_version("default").name == "v1.9.0"
    assert not server_version("master").is_release
    assert server_version("v1.7.1").is_release
    with pytest.raises(ConfigError, match=r"unknown Liftbridge server version 'v1\.8\.0'"):
        server_version("v1.8.0")


@pytest.mark.parametrize(
    ("version", "off"),
    [
        ("v1.9.0", False),
        ("v1.7.1", False),
        ("v1.0.0", False),
        ("v1.9.0+lbc.1", False),  # patched v1.9.0: no telemetry, rejects the key
        ("v1.9.1+lbc.1", True),
        ("v1.9.1", True),
        ("v26.01.1", True),
        (MASTER_VERSION, True),
        ("dev", True),
        ("", True),
    ],
)
def test_only_releases_up_to_v1_9_0_may_run_without_telemetry_off(version: str, off: bool) -> None:
    assert needs_telemetry_off(version) is off


def test_master_node_config_disables_telemetry_and_releases_have_no_key(tmp_path: Path) -> None:
    master = LiftbridgeNode(
        node_config(tmp_path), tmp_path / "m", binary=FAKE_BINARY, version="master"
    )
    text = master.config_path.read_text()
    assert TELEMETRY_OFF_LINE in text.splitlines()
    assert parse_config(text)["telemetry.enabled"] is False
    for release in ("v1.9.0", "v1.7.1"):
        node = LiftbridgeNode(
            node_config(tmp_path), tmp_path / release, binary=FAKE_BINARY, version=release
        )
        assert not any(
            k.startswith("telemetry") for k in parse_config(node.config_path.read_text())
        )
    with pytest.raises(ConfigError, match="telemetry is set by the harness"):
        node_config(tmp_path, extra={"telemetry.enabled": True}).settings()


def test_every_config_a_deployment_writes_for_master_disables_telemetry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    single = SingleNode(base_dir=tmp_path / "s", binary=FAKE_BINARY, version="master")
    assert TELEMETRY_OFF_LINE in single.node.config_path.read_text().splitlines()
    single.close()
    monkeypatch.setattr(_deployments, "liftbridge_binary", lambda version: FAKE_BINARY)
    mixed = Cluster(3, base_dir=tmp_path / "c", versions=("v1.9.0", "v1.9.0", "master"))
    lines = {n.server_id: n.config_path.read_text().splitlines() for n in mixed.nodes}
    assert [TELEMETRY_OFF_LINE in lines[i] for i in ("n1", "n2", "n3")] == [False, False, True]
    assert [n.version for n in mixed.nodes] == ["v1.9.0", "v1.9.0", MASTER_VERSION]
    mixed.close()
    with pytest.raises(ConfigError, match="2 versions given for a 3-node cluster"):
        Cluster(3, base_dir=tmp_path / "d", versions=("v1.9.0", "master"))
    with pytest.raises(ConfigError, match="cannot mix versions"):
        Cluster(2, base_dir=tmp_path / "e", versions=("v1.9.0", "master"), binary=FAKE_BINARY)


def test_harness_refuses_to_start_a_build_that_may_phone_home(tmp_path: Path) -> None:
    dev = write_script(tmp_path / "dev" / "liftbridge", 'echo "liftbridge version dev"')
    release = fake_liftbridge(tmp_path / "rel" / "liftbridge", "v1.9.0")
    without = tmp_path / "without.yaml"
    without.write_text('host: "127.0.0.1"\n')
    with_line = tmp_path / "with.yaml"
    with_line.write_text(f'host: "127.0.0.1"\n{TELEMETRY_OFF_LINE}\n')
    # A binary that reports dev needs the line whatever version it was declared as.
    with pytest.raises(ConfigError, match="refusing to start"):
        check_telemetry_off(dev, "v1.9.0", without)
    check_telemetry_off(dev, "v1.9.0", with_line)
    # A master declaration needs it even when the binary cannot tell.
    with pytest.raises(ConfigError, match="telemetry"):
        check_telemetry_off(FAKE_BINARY, MASTER_VERSION, without)
    check_telemetry_off(release, "v1.9.0", without)
    # Through the node: a v1.9.0 node whose binary is really a dev build never starts.
    node = LiftbridgeNode(node_config(tmp_path), tmp_path / "n", binary=dev, version="v1.9.0")
    with pytest.raises(ConfigError, match="refusing to start"):
        node.start(wait=False)
    assert not node.running
    assert node.process.returncode is None  # never spawned


def test_master_build_needs_its_snapshot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LIFTBRIDGE_CLIENT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("LIFTBRIDGE_MASTER_SNAPSHOT", str(tmp_path / "missing.tar.gz"))
    assert _provision.liftbridge_needs_build("master")
    assert not _provision.snapshot_available("master")
    assert _provision.snapshot_available("v1.7.1")
    with pytest.raises(SnapshotMissingError, match=r"missing\.tar\.gz"):
        _provision.liftbridge_binary("master")


def test_master_build_unpacks_the_snapshot_and_stamps_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LIFTBRIDGE_CLIENT_CACHE", str(tmp_path / "cache"))
    source = tmp_path / "src" / "liftbridge-50ac358b41eb"
    source.mkdir(parents=True)
    (source / "go.mod").write_text("module github.com/liftbridge-io/liftbridge\n")
    snapshot = tmp_path / "snap.tar.gz"
    with tarfile.open(snapshot, "w:gz") as archive:
        archive.add(source, arcname=source.name)
    monkeypatch.setenv("LIFTBRIDGE_MASTER_SNAPSHOT", str(snapshot))
    # A stand-in `go` that "builds" by writing the -o file, and records its environment.
    log = tmp_path / "go.log"
    write_script(
        tmp_path / "gobin" / "go",
        f'echo "$PWD $GOFLAGS" >> {log}\n'
        'out=$3; printf \'#!/bin/sh\\necho "liftbridge version dev"\\n\' > "$out"; '
        'chmod +x "$out"',
    )
    monkeypatch.setenv("PATH", f"{tmp_path / 'gobin'}:/usr/bin:/bin")
    monkeypatch.setenv("GOFLAGS", "-modcacherw")  # the caller's flags stay, -mod=mod after them
    binary = _provision.liftbridge_binary("master")
    assert binary == tmp_path / "cache" / f"liftbridge-{MASTER_VERSION}" / "bin" / "liftbridge"
    assert (binary.parent / ".built-from").read_text().strip() == MASTER_VERSION
    built_in, *goflags = log.read_text().split()
    assert built_in.endswith("/src/liftbridge-50ac358b41eb")
    assert goflags == ["-modcacherw", "-mod=mod"]
    assert not _provision.liftbridge_needs_build("master")  # the stamp is trusted
    assert _provision.binary_version(binary) is None  # master reports "dev"


def test_patched_build_applies_the_patches_in_order_and_stamps_their_hash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The cache inside a git work tree, as a cache under a checkout is: there `git apply`
    # run in a subdirectory skips the patch's paths and still exits 0.
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    monkeypatch.setenv("LIFTBRIDGE_CLIENT_CACHE", str(tmp_path / "cache"))
    module = tmp_path / "modcache" / "liftbridge@v1.9.0"
    module.mkdir(parents=True)
    (module / "a.go").write_text("one\n")
    module.chmod(0o555)  # like the Go module cache
    patches = tmp_path / "patches"
    (patches / "v1.9.0+lbc.1").mkdir(parents=True)
    for name, old, new in (("0001-x.patch", "one", "two"), ("0002-y.patch", "two", "three")):
        (patches / "v1.9.0+lbc.1" / name).write_text(
            f"--- a/a.go\n+++ b/a.go\n@@ -1 +1 @@\n-{old}\n+{new}\n"
        )
    monkeypatch.setenv("LIFTBRIDGE_PATCHES", str(patches))
    # A stand-in `go`: `mod download` names the module dir; `build` copies the patched
    # source into a script that reports v1.9.0, as the real patched binary does.
    write_script(
        tmp_path / "gobin" / "go",
        f'if [ "$1" = mod ]; then echo \'{{"Dir": "{module}"}}\'; exit 0; fi\n'
        "out=$4; { printf '#!/bin/sh\\necho \"liftbridge version v1.9.0\"\\n# '; "
        'cat a.go; } > "$out"; chmod +x "$out"',
    )
    monkeypatch.setenv("PATH", f"{tmp_path / 'gobin'}:/usr/bin:/bin")
    binary = _provision.liftbridge_binary("v1.9.0+lbc.1")
    assert "# three" in binary.read_text()  # both patches, in name order
    stamp = (binary.parent / ".built-from").read_text()
    assert stamp.startswith("v1.9.0+lbc.1 patches-sha256:")
    assert not _provision.liftbridge_needs_build("v1.9.0+lbc.1")
    # Editing a patch makes the cached build stale.
    (patches / "v1.9.0+lbc.1" / "0002-y.patch").write_text(
        "--- a/a.go\n+++ b/a.go\n@@ -1 +1 @@\n-two\n+four\n"
    )
    assert _provision.liftbridge_needs_build("v1.9.0+lbc.1")


def _fake_go_for_test_dependencies(tmp_path: Path, fail: str = "", saying: str = "") -> Path:
    """A stand-in `go` that logs each call with its GOPROXY; its ``fail`` command fails."""
    log = tmp_path / "go.log"
    failing = f'if [ "$1" = {fail} ]; then echo "{saying}" >&2; exit 1; fi\n' if fail else ""
    write_script(
        tmp_path / "gobin" / "go",
        f'echo "$* | GOPROXY=$GOPROXY | GOFLAGS=$GOFLAGS" >> {log}\n{failing}exit 0',
    )
    return log


def test_test_dependencies_are_downloaded_then_proven_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = _fake_go_for_test_dependencies(tmp_path)
    monkeypatch.setenv("GOPROXY", "https://proxy.example")
    monkeypatch.delenv("GOFLAGS", raising=False)
    _provision.download_test_dependencies(os.fspath(tmp_path / "gobin" / "go"), tmp_path)
    assert log.read_text().splitlines() == [
        "mod download | GOPROXY=https://proxy.example | GOFLAGS=-mod=mod",
        "list -test -deps -f {{.ImportPath}} ./... | GOPROXY=off | GOFLAGS=-mod=mod",
    ]


def test_test_dependencies_left_out_fail_provisioning_with_gos_words(tmp_path: Path) -> None:
    go = os.fspath(tmp_path / "gobin" / "go")
    missing = "server/activity_test.go:8:2: module lookup disabled by GOPROXY=off"
    _fake_go_for_test_dependencies(tmp_path, "list", missing)
    with pytest.raises(ProvisionError, match=r"GOPROXY=off said:\n.*activity_test\.go:8:2: module"):
        _provision.download_test_dependencies(go, tmp_path)
    (tmp_path / "go.log").unlink()
    _fake_go_for_test_dependencies(tmp_path, "mod", "dial tcp: lookup proxy: no such host")
    with pytest.raises(ProvisionError, match=r"`go mod download` said:\n.*no such host"):
        _provision.download_test_dependencies(go, tmp_path)
    assert (tmp_path / "go.log").read_text().count("\n") == 1  # nothing ran after the failure


def test_patched_build_refuses_to_run_without_its_patches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LIFTBRIDGE_CLIENT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("LIFTBRIDGE_PATCHES", str(tmp_path / "none"))
    assert not _provision.snapshot_available("v1.9.0+lbc.1")
    with pytest.raises(ProvisionError, match=r"no patches for Liftbridge v1\.9\.0\+lbc\.1"):
        _provision.liftbridge_binary("v1.9.0+lbc.1")


_PLUGIN_TESTS = """
import pytest


@pytest.mark.liftbridge_version("master")
def test_needs_master(liftbridge_versions):
    liftbridge_versions.single("master")


@pytest.mark.server_versions("v1.7.1")
def test_only_on_v1_7_1():
    pass


def test_plain():
    pass
"""


def _run_plugin(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_plugin_versions.py").write_text(_PLUGIN_TESTS)
    environ = {k: v for k, v in os.environ.items() if k not in {"CI", "LIFTBRIDGE_SERVER_VERSION"}}
    environ.update(
        LIFTBRIDGE_CLIENT_CACHE=str(tmp_path / "cache"),
        LIFTBRIDGE_MASTER_SNAPSHOT=str(tmp_path / "absent.tar.gz"),
        **env,
    )
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "liftbridge_client.testing.plugin",
            "-q",
            "-p",
            "no:cacheprovider",
            str(tmp_path),
        ],
        cwd=tmp_path,
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_plugin_deselects_master_tests_without_the_snapshot_and_says_so(tmp_path: Path) -> None:
    run = _run_plugin(tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 passed, 2 deselected" in run.stdout
    assert "test_needs_master: no source snapshot for master-50ac358b41eb" in run.stdout
    assert "deselected, not for v1.9.0" in run.stdout
    assert "test_only_on_v1_7_1: runs against v1.7.1 only" in run.stdout


def test_plugin_fails_master_tests_without_the_snapshot_in_ci(tmp_path: Path) -> None:
    run = _run_plugin(tmp_path, CI="true")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "SnapshotMissingError" in run.stdout
    assert "absent.tar.gz is missing" in run.stdout
    assert "1 failed, 1 passed, 1 deselected" in run.stdout


def test_plugin_selects_tests_by_the_default_server_version(tmp_path: Path) -> None:
    run = _run_plugin(tmp_path, LIFTBRIDGE_SERVER_VERSION="v1.7.1")
    assert "2 passed, 1 deselected" in run.stdout, run.stdout
    assert "not for v1.7.1" not in run.stdout  # nothing was left out for its version
    bad = _run_plugin(tmp_path, LIFTBRIDGE_SERVER_VERSION="v0.1")
    assert bad.returncode != 0
    assert "unknown Liftbridge server version 'v0.1'" in bad.stdout + bad.stderr


def test_a_patched_default_runs_the_tests_of_its_release(tmp_path: Path) -> None:
    patches = tmp_path / "patches" / "v1.9.0+lbc.1"
    patches.mkdir(parents=True)
    (patches / "0001-x.patch").write_text("")
    (tmp_path / "test_release_only.py").write_text(
        'import pytest\n\n\n@pytest.mark.server_versions("v1.9.0", "master")\n'
        "def test_release_only():\n    pass\n"
    )
    run = _run_plugin(
        tmp_path,
        LIFTBRIDGE_SERVER_VERSION="v1.9.0+lbc.1",
        LIFTBRIDGE_PATCHES=str(tmp_path / "patches"),
    )
    # The v1.9.0-or-master test runs; the v1.7.1-only and master-snapshot ones do not.
    assert "2 passed, 2 deselected" in run.stdout, run.stdout
    assert "test_release_only" not in run.stdout
    assert "test_only_on_v1_7_1: runs against v1.7.1 only" in run.stdout


def test_switching_a_node_version_rewrites_its_telemetry_setting(tmp_path: Path) -> None:
    node = LiftbridgeNode(node_config(tmp_path), tmp_path / "n", binary=FAKE_BINARY)
    assert TELEMETRY_OFF_LINE not in node.config_path.read_text()
    node.switch_version("master", binary=FAKE_BINARY)
    assert node.version == MASTER_VERSION
    assert TELEMETRY_OFF_LINE in node.config_path.read_text().splitlines()
    assert node.process.argv == [str(FAKE_BINARY), "-c", str(node.config_path)]
    node.switch_version("v1.9.0", binary=FAKE_BINARY)  # a downgrade drops the key again
    assert "telemetry" not in node.config_path.read_text()


def test_the_carried_patches_are_small_text_diffs_of_source_files() -> None:
    """A patch is reviewed as text: no binary part (0006 once carried a 35 MB server binary
    built in the patched tree, a 24 MB patch file), no file outside the Go sources."""
    patches = sorted((Path(__file__).parents[2] / "patches" / "liftbridge").glob("*/*.patch"))
    assert patches, "no patch files found"
    for patch in patches:
        text = patch.read_text(encoding="utf-8")  # fails on a binary file
        assert patch.stat().st_size < 64 * 1024, f"{patch.name} is {patch.stat().st_size} bytes"
        assert "GIT binary patch" not in text, patch.name
        touched = [
            line.split(" b/", 1)[1] for line in text.splitlines() if line.startswith("diff --git ")
        ]
        assert touched, f"{patch.name} changes no file"
        for name in touched:
            assert name.endswith((".go", "go.mod", "go.sum")), f"{patch.name} touches {name}"
