"""Rounds of the fault suite, one test each: faults, heal, then the checkers' verdict.

A round fails when it could not run to its end, or when the checkers found an anomaly no
known server defect explains (``FAULTS_STRICT=1``: any anomaly). Anomalies the stock
servers are known to cause (acked messages lost to a failover, divergent replicas) are
counted in the table at the end of the session instead; see docs/testing.md.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from faults.fault_checkers import SERVER_ANOMALIES
from faults.fault_suite import Profile, require_tools, run_round
from liftbridge_client.testing import liftbridge_binary

pytestmark = pytest.mark.integration


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "fault_round" not in metafunc.fixturenames:
        return
    from faults.fault_suite import profile_from_env

    profile = profile_from_env()
    metafunc.parametrize(
        "fault_round",
        [
            pytest.param(
                (kind, r), id=f"{kind}-{r}", marks=pytest.mark.timeout(profile.round_timeout() + 60)
            )
            for r in range(profile.rounds)
            for kind in profile.kinds
        ],
    )


def test_round(
    fault_round: tuple[str, int],
    fault_profile: Profile,
    fault_session_dir: Path,
    record_round: Callable[[dict[str, Any]], None],
) -> None:
    require_tools("the fault suite")
    kind, round_ = fault_round
    liftbridge_binary(fault_profile.version)  # built out here: the namespace has no network
    out = fault_session_dir / f"{kind}-{round_}"
    summary = run_round(fault_profile, kind, round_, out)
    record_round(summary)
    where = f"history: {out / 'history.jsonl'}; runner output: {out / 'runner.log'}"
    if summary["status"] == "timeout":
        tail = (out / "runner.log").read_text(errors="replace").splitlines()[-80:]
        pytest.fail(
            f"the round ran past its bound; {where}; the runner's last lines:\n" + "\n".join(tail)
        )
    assert summary.get("verdict") is not None, f"the round left no verdict; {where}"
    assert summary.get("crash") is None, f"the round crashed: {summary['crash']}; {where}"
    anomalies = summary["verdict"]["anomalies"]
    unexpected = [a for a in anomalies if a["kind"] in summary["unexpected"]]
    assert not unexpected, (
        f"{len(unexpected)} anomalies no known server defect explains: "
        f"{[(a['kind'], a['detail']) for a in unexpected[:5]]}; {where} "
        f"(explain with: python tests/faults/fault_check.py {out / 'history.jsonl'})"
    )
    known = [a["kind"] for a in anomalies if a["kind"] in SERVER_ANOMALIES]
    if known:
        print(f"known server anomalies in {kind}-{round_}: {known}; {where}")
