"""The server patch v1.9.0+lbc.1 against stock v1.9.0, on deterministic scenarios.

Each scenario (faults.epoch_scenarios) builds a defect's precondition by construction, so
stock v1.9.0 is pinned to show the defect (10 of 10 rounds diverged when this was written)
and the patched server to show none. If the stock assertion ever fails, the scenario no
longer reaches the defect: fix the scenario, do not drop the assertion.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from faults.epoch_scenarios import empty_leader_divergence
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
