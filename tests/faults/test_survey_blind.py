"""A partition leader that the metadata answers of the other nodes leave out of their
broker list is still reached (faults.survey_scenario; docs/compatibility.md, "A leader
missing from the broker list"). On a real 3-node cluster in a private network namespace,
each node with a NATS server of its own; n3's takes no survey from its routes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from faults.fault_suite import ROOT, require_tools
from faults.survey_scenario import STEPS
from liftbridge_client.testing import liftbridge_binary
from liftbridge_client.testing._netns import private_netns_argv

pytestmark = pytest.mark.integration


@pytest.mark.timeout(300)
def test_a_leader_left_out_of_the_broker_list_is_still_reached(
    tmp_path: Path, liftbridge_server_version: str
) -> None:
    require_tools("this scenario")
    liftbridge_binary(liftbridge_server_version)  # built out here: the namespace has no network
    argv = private_netns_argv(
        [
            sys.executable,
            "-m",
            "faults.survey_scenario",
            "--out",
            str(tmp_path),
            "--version",
            liftbridge_server_version,
        ]
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), str(ROOT)])}
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    outcome = json.loads((tmp_path / "outcome.json").read_text())
    # The servers: n3 lists every broker (its own survey is answered); n1 never lists n3,
    # yet names it the partition's leader. Were n3 listed, the scenario missed the state.
    assert outcome["stream"], outcome  # a stream n3 leads was made
    assert outcome["n3_lists"][-1] == ["n1", "n2", "n3"], outcome
    assert outcome["n1_lists"] == [["n1", "n2"]] * len(outcome["n1_lists"]), outcome
    assert outcome["n1_leaders"] == ["n3"] * len(outcome["n1_lists"]), outcome
    # The client: every call routed to n3 reached it.
    assert outcome["publish_errors"] == [], outcome
    assert outcome["published"] == STEPS, outcome
    assert outcome["partition_metadata_errors"] == [], outcome
    assert outcome["partition_metadata"] == STEPS, outcome
    assert outcome["read"] == STEPS, outcome
