"""The server patch v1.9.0+lbc.1 against stock v1.9.0, on deterministic scenarios.

Each scenario (faults.epoch_scenarios) builds a defect's precondition by construction, so
stock v1.9.0 is pinned to show the defect and the patched server to show none (figures in
docs/compatibility.md). If the stock assertion ever fails, the scenario no
longer reaches the defect: fix the scenario, do not drop the assertion.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from faults.epoch_scenarios import empty_leader_divergence, restart_truncation_loss
from liftbridge_client.testing import PATCHED_VERSION, Cluster

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
