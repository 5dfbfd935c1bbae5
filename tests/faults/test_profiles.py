"""Profiles and their environment overrides, and the results table (no servers)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from faults.fault_nemesis import KINDS
from faults.fault_restart import READ_BOUND
from faults.fault_suite import PROFILES, profile_from_env, table


def test_the_short_profile_is_the_default_and_bounded() -> None:
    profile = profile_from_env({})
    assert profile == PROFILES["short"]
    assert profile.rounds * len(profile.kinds) <= 6  # it runs inside `make test`
    assert set(PROFILES["standard"].kinds) == set(KINDS)


def test_overrides_and_their_errors() -> None:
    profile = profile_from_env(
        {
            "FAULTS_PROFILE": "long",
            "FAULTS_KINDS": "lossy, kill-leader",
            "FAULTS_ROUNDS": "3",
            "FAULTS_TIMEOUTS": "server",
            "FAULTS_STRICT": "1",
        }
    )
    assert (profile.kinds, profile.rounds, profile.timeouts) == (
        ("lossy", "kill-leader"),
        3,
        "server",
    )
    args = profile.runner_args("lossy", 2, Path("/tmp/x"))
    assert args[-1] == "--strict"
    assert args[args.index("--timeouts") + 1] == "server"
    # The runner's checks end before the round is killed, so a verdict is always written.
    assert 0 < float(args[args.index("--deadline-s") + 1]) < profile.round_timeout() - 10
    harness = dataclasses.replace(profile, timeouts="harness")
    assert profile.round_timeout() > harness.round_timeout()  # server timeouts: longer
    split = dataclasses.replace(harness, kinds=("lossy", "split-leader"))
    assert split.round_timeout() >= harness.round_timeout() + 3 * 60  # splits are held
    equal = profile_from_env({"FAULTS_TIMEOUTS": "equal", "FAULTS_VERSION": "v1.9.0+lbc.1"})
    args = equal.runner_args("kill-leader", 0, Path("/tmp/x"))
    assert args[args.index("--timeouts") + 1] == "equal"
    assert args[args.index("--version") + 1] == "v1.9.0+lbc.1"
    with pytest.raises(ValueError, match="harness, equal or server"):
        profile_from_env({"FAULTS_TIMEOUTS": "fast"})
    with pytest.raises(ValueError, match="unknown"):
        profile_from_env({"FAULTS_KINDS": "flood"})
    with pytest.raises(ValueError, match="FAULTS_PROFILE"):
        profile_from_env({"FAULTS_PROFILE": "forever"})


def test_the_table_sums_rounds_per_kind() -> None:
    verdict = {
        "acked": 10,
        "acked_lost": 2,
        "eo_acked": 5,
        "recover_s": 1.5,
        "unavailable_s": 4.0,
        "errors": {"x": 1},
        "anomalies": [{"kind": "acked-lost"}, {"kind": "not-recovered"}],
    }
    rows = table(
        [
            {"kind": "lossy", "verdict": verdict},
            {"kind": "lossy", "verdict": {**verdict, "acked_lost": 0, "recover_s": 3.0}},
            {"kind": "kill-leader", "verdict": None, "status": "timeout"},
        ]
    )
    assert rows[2].startswith("| lossy | 2 | 20 | 2 in 1 |")
    assert "| 3.0 | 4.0 | not-recovered in 2 | x 2 |" in rows[2]
    assert rows[3].startswith("| kill-leader | 1 (1 without verdict) | 0 |")
    assert "| timeout in 1 |" in rows[3]


def test_a_crash_round_has_time_to_read_its_still_streams_back() -> None:
    standard = PROFILES["standard"]
    assert "crash-all" in standard.kinds
    crash = dataclasses.replace(standard, kinds=("crash-all",))
    other = dataclasses.replace(standard, kinds=("kill-leader",))
    assert crash.round_timeout() == other.round_timeout() + standard.cycles * READ_BOUND
