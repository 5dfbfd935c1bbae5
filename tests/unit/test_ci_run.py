""".ci/run prints each step's wall time at the end, also when a step fails (issue 32).

The script runs from a copy beside a stand-in `make` that logs its target and fails when
told to, so no real step runs.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CI_RUN = ROOT / ".ci" / "run"
# In the order they run: `step make X`, and `together "make X" "make Y"` (side by side).
STEPS = [
    step
    for line in re.findall(r"^(?:step|together) (.+)$", CI_RUN.read_text(), re.MULTILINE)
    for step in (re.findall(r'"(make [^"]+)"', line) or [line])
]


def _run(tmp_path: Path, fail_at: str = "") -> subprocess.CompletedProcess[str]:
    (tmp_path / ".ci").mkdir()
    shutil.copy(CI_RUN, tmp_path / ".ci" / "run")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    make = bin_dir / "make"
    make.write_text('#!/bin/sh\necho "make ran $*"\n[ "$*" = "$FAIL_AT" ] && exit 3\nexit 0\n')
    make.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "FAIL_AT": fail_at}
    return subprocess.run(
        ["bash", os.fspath(tmp_path / ".ci" / "run")],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def _table(stdout: str) -> list[list[str]]:
    rows = stdout.split("== .ci/run step times\n", 1)[1].splitlines()
    return [re.split(r"\s{2,}", row.strip()) for row in rows]


def test_the_make_test_step_comes_first_as_the_readme_says() -> None:
    assert STEPS[0] == "make test"
    assert len(STEPS) == len(set(STEPS)) >= 5


def test_every_step_is_timed_in_a_table_at_the_end(tmp_path: Path) -> None:
    done = _run(tmp_path)
    assert done.returncode == 0, done.stderr
    ran = [
        line.removeprefix("make ran ") for line in done.stdout.splitlines() if "make ran" in line
    ]
    assert ran == [step.removeprefix("make ") for step in STEPS]
    table = _table(done.stdout)
    assert [row[0] for row in table] == [*STEPS, "total"]
    for _, took, result in table:
        assert re.fullmatch(r"\d+:[0-5]\d", took), table
        assert result == "ok", table


def test_a_failing_step_ends_the_run_and_the_table_still_prints(tmp_path: Path) -> None:
    failing = STEPS[2].removeprefix("make ")
    done = _run(tmp_path, fail_at=failing)
    assert done.returncode == 3
    table = _table(done.stdout)
    assert [row[0] for row in table] == [*STEPS[:3], "total"]
    assert [row[2] for row in table] == ["ok", "ok", "FAILED (exit 3)", "FAILED (exit 3)"]


def test_steps_side_by_side_both_finish_and_the_first_failure_is_the_runs(
    tmp_path: Path,
) -> None:
    text = CI_RUN.read_text()
    pair = re.search(r'^together "make ([^"]+)" "make ([^"]+)"$', text, re.MULTILINE)
    assert pair is not None, "no steps side by side in .ci/run"
    first, second = pair.groups()
    done = _run(tmp_path, fail_at=first)
    assert done.returncode == 3
    # The partner ran to its end and its output is there, after the failing one's.
    ran = [line for line in done.stdout.splitlines() if line.startswith("make ran")]
    assert ran[-2:] == [f"make ran {first}", f"make ran {second}"]
    table = {row[0]: row[2] for row in _table(done.stdout)}
    assert table[f"make {first}"] == "FAILED (exit 3)"
    assert table[f"make {second}"] == "ok"
    assert table["total"] == "FAILED (exit 3)"
