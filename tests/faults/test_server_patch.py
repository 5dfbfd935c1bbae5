"""The server patch v1.9.0+lbc.1 against stock v1.9.0, on deterministic scenarios.

Each scenario (faults.epoch_scenarios, faults.reader_scenarios) builds a defect's
precondition by construction, so stock v1.9.0 is pinned to show the defect and the patched
server to show none (figures in docs/compatibility.md). If the stock assertion ever fails,
the scenario no longer reaches the defect: fix the scenario, do not drop the assertion.
Patch 0007's and 0008's Go unit tests run the same way, on the patched source and on v1.9.0's,
offline, after provisioning fetched their modules; one more test proves that provisioning is
enough from an empty Go module and build cache.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from faults.epoch_scenarios import empty_leader_divergence, restart_truncation_loss
from faults.reader_scenarios import follower_catchup_read
from faults.restart_scenarios import BOUND, single_node_restart
from liftbridge_client.testing import PATCHED_VERSION, Cluster, SingleNode, server_version
from liftbridge_client.testing._provision import download_test_dependencies, patched_source

pytestmark = pytest.mark.integration


@pytest.mark.timeout(300)
@pytest.mark.liftbridge_version("v1.9.0")
async def test_stock_v1_9_0_keeps_a_divergent_replica_after_an_empty_log_leader(
    tmp_path: Path,
) -> None:
    with Cluster(3, base_dir=tmp_path, versions="v1.9.0") as cluster:
        outcome = await empty_leader_divergence(cluster, "v1.9.0")
    # The old leader kept its own messages under offsets where the leader has others.
    assert outcome.divergent_offsets() == [0, 1, 2, 3, 4], outcome.to_dict()
    assert set(outcome.logs[outcome.old_leader].values()) == {f"old-{i}" for i in range(5)}


@pytest.mark.timeout(300)
@pytest.mark.liftbridge_version(PATCHED_VERSION)
async def test_patched_server_truncates_the_old_leader_to_the_new_leaders_log(
    tmp_path: Path,
) -> None:
    with Cluster(3, base_dir=tmp_path, versions=PATCHED_VERSION) as cluster:
        outcome = await empty_leader_divergence(cluster, PATCHED_VERSION)
    assert outcome.divergent_offsets() == [], outcome.to_dict()
    new = [f"new-{i}" for i in range(5)]
    for node, log in outcome.logs.items():
        assert [log.get(o) for o in range(5)] == new, (node, outcome.to_dict())


@pytest.mark.timeout(300)
@pytest.mark.liftbridge_version("v1.9.0")
async def test_stock_v1_9_0_loses_all_acked_messages_when_a_restarted_replica_leads(
    tmp_path: Path,
) -> None:
    with Cluster(3, base_dir=tmp_path, versions="v1.9.0", log_level="debug") as cluster:
        outcome = await restart_truncation_loss(cluster, "v1.9.0")
        log = cluster.node(outcome.new_leader).logs()
    # The replica truncated to its stale HW ("no responders" from the dead leader), then led.
    found = re.search(rf"stream={outcome.stream}, partition=0\] to HW (-?\d+)", log)
    assert found, "the new leader never truncated to its HW: the scenario missed the defect"
    hw = int(found[1])  # -1 unless an HW checkpoint (every 5 s) fell among the publishes
    assert hw < len(outcome.acked) - 1
    assert outcome.acked_lost() == outcome.acked[hw + 1 :], outcome.to_dict()


@pytest.mark.timeout(300)
@pytest.mark.liftbridge_version(PATCHED_VERSION)
async def test_patched_server_keeps_every_acked_message_when_a_restarted_replica_leads(
    tmp_path: Path,
) -> None:
    with Cluster(3, base_dir=tmp_path, versions=PATCHED_VERSION) as cluster:
        outcome = await restart_truncation_loss(cluster, PATCHED_VERSION)
    assert len(outcome.acked) == 20
    assert outcome.acked_lost() == [], outcome.to_dict()
    assert outcome.divergent_offsets() == [], outcome.to_dict()


# Patch 0007 carries a Go unit test of the committed reader (server/commitlog). It runs
# against the patched source and against stock v1.9.0 with the same test file dropped in.
READER_TEST = "TestCommittedReaderWokenByHWPastLogEnd"
READER_TEST_FILE = Path("server/commitlog/reader_hw_test.go")

# Patch 0008 carries a Go unit test of consumer-group member expiry (package server).
EXPIRY_TEST = "TestConsumerExpiredAfterTheMemberLeftDoesNotPanic"
EXPIRY_TEST_FILE = Path("server/groups_expired_test.go")

# Patch 0009: a restarted leader alone in its ISR serves what it acked without a new
# message. Its Go test (package server) restarts a node over a checkpoint file left as a
# crash leaves it; the integration tests crash a real node (faults.restart_scenarios).
RESTART_TEST = "TestRestartedLeaderServesWhatItAckedWithoutANewMessage"
RESTART_TEST_FILE = Path("server/partition_restart_hw_test.go")

# One stock tree holds every Go test file: the server package's test binary is compiled
# once for both of its tests (each `go test -run` below finds it in the build cache).
STOCK_TEST_FILES = (READER_TEST_FILE, EXPIRY_TEST_FILE, RESTART_TEST_FILE)


def _go() -> str:
    go = shutil.which("go")
    if go is None:
        message = "the server patch's Go test needs `go`"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return go


@pytest.fixture(scope="module")
def patched_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("lbc")
    return patched_source(_go(), server_version(PATCHED_VERSION), out, test_dependencies=True)


@pytest.fixture(scope="module")
def stock_tree(patched_tree: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _stock_tree(_go(), patched_tree, tmp_path_factory.mktemp("lbc-stock"))


def _stock_tree(go: str, patched: Path, out: Path) -> Path:
    """v1.9.0's source (from the module cache, like the patched build) plus the Go tests."""
    found = subprocess.run(
        [go, "mod", "download", "-json", "github.com/liftbridge-io/liftbridge@v1.9.0"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        env={**os.environ, "GOTOOLCHAIN": "local"},
        stdin=subprocess.DEVNULL,
    )
    source = Path(re.search(r'"Dir": "([^"]+)"', found.stdout)[1])  # type: ignore[index]
    tree = out / "stock"
    shutil.copytree(source, tree)
    for path in [tree, *tree.rglob("*")]:  # the module cache is read-only
        path.chmod(path.stat().st_mode | 0o200)
    for test_file in STOCK_TEST_FILES:
        shutil.copy(patched / test_file, tree / test_file)
    download_test_dependencies(go, tree)
    return tree


def _go_test(
    go: str, tree: Path, test: str = READER_TEST, package: str = "./server/commitlog/"
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [go, "test", "-count=1", "-run", f"^{test}$", package],
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=360,  # a cold build cache on a loaded machine; the test itself takes < 1 s
        check=False,
        # Offline: provisioning the tree put its test dependencies in the module cache.
        env={
            **os.environ,
            "GOTOOLCHAIN": "local",
            "GOFLAGS": f"{os.environ.get('GOFLAGS', '')} -mod=mod".strip(),
            "GOPROXY": "off",
        },
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.timeout(300)
def test_stock_v1_9_0_reader_panics_when_woken_by_an_hw_past_the_log_end(
    stock_tree: Path,
) -> None:
    done = _go_test(_go(), stock_tree)
    output = done.stdout + done.stderr
    assert done.returncode != 0, output
    assert "the reader panicked" in output, output
    assert "Read corrupted data, expected CRC: 0x00000000" in output, output


@pytest.mark.timeout(300)
def test_patched_reader_survives_an_hw_past_the_log_end(patched_tree: Path) -> None:
    done = _go_test(_go(), patched_tree)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert re.search(r"^ok\s", output, re.MULTILINE), output
    assert "[no tests to run]" not in output, output


# Issue 33: `go build` fetches no test-only module (testify), and a module cache warm from
# earlier runs hid that nothing else did. Here the module cache starts empty, so
# provisioning must fetch everything the Go tests import (they then run with GOPROXY=off).
# The build cache stays the user's: it holds no module sources, and a cold one only made
# this test compile the standard library again (88 s of a fresh machine's `make test`).
# Only server/commitlog is compiled; the server package takes minutes.
@pytest.mark.timeout(600)
def test_provisioning_fetches_what_the_go_tests_need_into_an_empty_module_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    go = _go()
    caches = tmp_path / "go-caches"
    goflags = subprocess.run(
        [go, "env", "GOFLAGS"], capture_output=True, text=True, check=True, timeout=30
    ).stdout.strip()
    monkeypatch.setenv("GOMODCACHE", os.fspath(caches / "mod"))
    # A module cache is read-only unless made with -modcacherw; this one is deleted below.
    monkeypatch.setenv("GOFLAGS", f"{goflags} -modcacherw".strip())
    try:
        spec = server_version(PATCHED_VERSION)
        tree = patched_source(go, spec, tmp_path, test_dependencies=True)
        assert (caches / "mod" / "github.com" / "stretchr").is_dir()  # testify is test-only
        done = _go_test(go, tree)
    finally:
        shutil.rmtree(caches, ignore_errors=True)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert re.search(r"^ok\s", output, re.MULTILINE), output
    assert "[no tests to run]" not in output, output


@pytest.mark.timeout(300)
@pytest.mark.liftbridge_version("v1.9.0")
async def test_stock_v1_9_0_follower_panics_under_a_subscription_reading_its_catch_up(
    tmp_path: Path,
) -> None:
    with Cluster(3, base_dir=tmp_path, versions="v1.9.0") as cluster:
        outcome = await follower_catchup_read(cluster, "v1.9.0")
    assert outcome.follower_exited, outcome.to_dict()
    assert "Read corrupted data, expected CRC: 0x00000000" in outcome.panic, outcome.to_dict()
    assert not outcome.in_order(), outcome.to_dict()


@pytest.mark.timeout(300)
@pytest.mark.liftbridge_version(PATCHED_VERSION)
async def test_patched_follower_subscription_reads_every_offset_once_through_its_catch_up(
    tmp_path: Path,
) -> None:
    with Cluster(3, base_dir=tmp_path, versions=PATCHED_VERSION) as cluster:
        outcome = await follower_catchup_read(cluster, PATCHED_VERSION)
    assert not outcome.follower_exited, outcome.to_dict()
    assert not outcome.panic, outcome.to_dict()
    assert outcome.error == "", outcome.to_dict()
    assert outcome.in_order(), outcome.to_dict()


@pytest.mark.timeout(400)
def test_stock_v1_9_0_panics_when_an_expired_member_is_gone_before_its_retry(
    stock_tree: Path,
) -> None:
    done = _go_test(_go(), stock_tree, EXPIRY_TEST, "./server/")
    output = done.stdout + done.stderr
    assert done.returncode != 0, output
    assert "nil pointer dereference" in output, output


@pytest.mark.timeout(400)
def test_patched_server_retries_an_expiry_only_for_a_member_still_there(
    patched_tree: Path,
) -> None:
    done = _go_test(_go(), patched_tree, EXPIRY_TEST, "./server/")
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert re.search(r"^ok\s", output, re.MULTILINE), output
    assert "[no tests to run]" not in output, output


@pytest.mark.timeout(400)
def test_stock_v1_9_0_restarted_leader_keeps_its_checkpointed_hw(stock_tree: Path) -> None:
    done = _go_test(_go(), stock_tree, RESTART_TEST, "./server/")
    output = done.stdout + done.stderr
    assert done.returncode != 0, output
    # Both cases: no checkpoint file, and one behind the log.
    assert output.count("Cluster did not reach HW 9 for [name=foo, partition=0]") == 2, output


@pytest.mark.timeout(400)
def test_patched_restarted_leader_commits_its_log_at_once(patched_tree: Path) -> None:
    done = _go_test(_go(), patched_tree, RESTART_TEST, "./server/")
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert re.search(r"^ok\s", output, re.MULTILINE), output


@pytest.mark.timeout(180)
@pytest.mark.liftbridge_version("v1.9.0")
async def test_stock_v1_9_0_node_hides_what_it_acked_after_a_kill(tmp_path: Path) -> None:
    # The 5 s checkpoint loop may write the final HW in the few ms between the last ack and
    # the kill; that run shows nothing, so it is repeated on a new node (at most twice).
    for attempt in range(3):
        with SingleNode(base_dir=tmp_path / str(attempt), version="v1.9.0") as node:
            outcome = await single_node_restart(node, "kill")
        last = outcome.last
        checkpointed = [-1 if c is None else c for c in outcome.checkpoint]
        if all(c < last for c in checkpointed):
            break
    assert outcome.hw_before == [last, last], outcome.to_dict()
    # The HW each partition comes back with is its checkpoint file's (-1 without one)...
    assert all(c < last for c in checkpointed), f"a checkpoint caught up: {outcome.to_dict()}"
    assert outcome.hw_at_start == checkpointed, outcome.to_dict()
    # ...and stays there with nothing published: the acked messages past it are unreadable.
    assert outcome.readable_s == [None, None], outcome.to_dict()
    assert outcome.hw_at_bound == checkpointed, outcome.to_dict()
    assert outcome.newest_at_bound == [last, last], outcome.to_dict()  # on disk, all of it
    assert outcome.read == [c + 1 for c in checkpointed], outcome.to_dict()
    # One publish brings back its partition only.
    assert outcome.hw_after_poke == [last + 1, checkpointed[1]], outcome.to_dict()
    assert outcome.read_after_poke == [last + 2, checkpointed[1] + 1], outcome.to_dict()


@pytest.mark.timeout(180)
@pytest.mark.liftbridge_version(PATCHED_VERSION)
@pytest.mark.parametrize("stop", ["kill", "interrupt"])
async def test_patched_node_serves_what_it_acked_after_a_restart(tmp_path: Path, stop: str) -> None:
    with SingleNode(base_dir=tmp_path, version=PATCHED_VERSION) as node:
        outcome = await single_node_restart(node, stop)
    last = outcome.last
    assert outcome.hw_before == [last, last], outcome.to_dict()
    assert all(s is not None and s <= BOUND for s in outcome.readable_s), outcome.to_dict()
    assert outcome.hw_at_bound == outcome.newest_at_bound == [last, last], outcome.to_dict()
    assert outcome.read == [last + 1, last + 1], outcome.to_dict()
    assert outcome.read_after_poke == [last + 2, last + 1], outcome.to_dict()
