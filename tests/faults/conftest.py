"""The fault suite: one test per (fault kind, round) of the profile in ``FAULTS_PROFILE``.

Each round runs in a network and PID namespace of its own (fault_suite.run_round), so
nothing here touches the host's network and nothing outlives the round. Needs root,
unshare, ip, iptables and tc: without them the rounds are skipped, unless ``$CI`` is set,
where they fail saying what is missing. Results go to ``.faults/<session>/`` (git-ignored):
per round its history, summary and server logs; for the session ``results.json`` and
``results.md``, the table printed at the end of the run. The newest ``FAULTS_KEEP`` (20)
sessions are kept.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from faults.fault_suite import RESULTS_DIR, Profile, profile_from_env, table

_SUMMARIES = pytest.StashKey[list[dict[str, Any]]]()
_SESSION_DIR = pytest.StashKey[Path]()


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_SUMMARIES] = []


@pytest.fixture(scope="session")
def fault_profile(liftbridge_server_version: str) -> Profile:
    """The profile of this session; ``FAULTS_VERSION`` unset, ``--liftbridge-version``'s."""
    profile = profile_from_env()
    if not os.environ.get("FAULTS_VERSION"):
        profile = dataclasses.replace(profile, version=liftbridge_server_version)
    return profile


@pytest.fixture(scope="session")
def fault_session_dir(pytestconfig: pytest.Config, fault_profile: Profile) -> Iterator[Path]:
    """``.faults/<time>-<profile>/``, where rounds and the session's results go."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = RESULTS_DIR / f"{stamp}-{fault_profile.name}"
    path.mkdir(parents=True, exist_ok=True)
    # Like pytest's own temp directories: the newest sessions stay (each a few MB of logs).
    keep = int(os.environ.get("FAULTS_KEEP", "20"))
    for old in sorted(p for p in RESULTS_DIR.iterdir() if p.is_dir())[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    pytestconfig.stash[_SESSION_DIR] = path
    yield path
    summaries = pytestconfig.stash[_SUMMARIES]
    (path / "results.json").write_text(json.dumps(summaries, indent=1, default=str))
    (path / "results.md").write_text("\n".join(table(summaries)) + "\n")


@pytest.fixture
def record_round(pytestconfig: pytest.Config) -> Any:
    """Keep a round's summary for the session's table."""
    return pytestconfig.stash[_SUMMARIES].append


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    summaries = terminalreporter.config.stash.get(_SUMMARIES, [])
    if not summaries:
        return
    first = summaries[0]
    terminalreporter.write_sep(
        "-",
        f"fault suite: Liftbridge {first.get('version', '?')}, {first.get('timeouts', '?')} "
        f"timeouts, {len(summaries)} rounds",
    )
    for line in table(summaries):
        terminalreporter.write_line(line)
    path = terminalreporter.config.stash.get(_SESSION_DIR, None)
    if path is not None:
        terminalreporter.write_line(f"histories and server logs: {path}")
