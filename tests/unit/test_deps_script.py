"""`make test-deps` leaves out exactly the unit test files that need an extra its venvs
lack: found by reading the imports, so a new Spark test cannot break the run again."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def load_script() -> ModuleType:
    path = ROOT / "scripts" / "test_deps.py"
    spec = importlib.util.spec_from_file_location("test_deps_script_under_test", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_real_tree() -> None:
    found = load_script().extra_only_unit_tests()
    # The file whose absence failed CI, and ones that must stay in the deps run.
    assert "tests/unit/test_spark_runtime.py" in found
    assert "tests/unit/test_spark_support.py" in found  # through tests/integration/spark_support
    assert "tests/unit/test_docs_site.py" in found
    assert "tests/unit/test_nats_fastparse.py" not in found
    assert "tests/unit/test_deps_script.py" not in found


def test_imports_anywhere_and_through_test_helpers(tmp_path: Path) -> None:
    unit = tmp_path / "tests" / "unit"
    unit.mkdir(parents=True)
    integration = tmp_path / "tests" / "integration"
    integration.mkdir()
    (integration / "spark_helper.py").write_text("def start():\n    import pyspark\n")
    (integration / "plain_helper.py").write_text("import asyncio\n")
    (unit / "test_a.py").write_text("from liftbridge_client.spark import _runtime\n")
    (unit / "test_b.py").write_text("import pyspark.sql as s\n")
    (unit / "test_c.py").write_text("def f():\n    import pyspark\n")  # runs when f does
    (unit / "test_d.py").write_text("from liftbridge_client.sparkle import x\nimport benchmark\n")
    (unit / "test_e.py").write_text("from bench.stats import median\n")
    (unit / "test_f.py").write_text("from . import helper\nimport plain_helper\n")
    (unit / "test_g.py").write_text("from spark_helper import start\n")  # the CI failure
    found = load_script().extra_only_unit_tests(tmp_path)
    assert found == [f"tests/unit/test_{c}.py" for c in "abceg"]


def test_the_high_end_is_skipped_only_for_a_venv_that_is_exactly_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    script = load_script()
    monkeypatch.setattr(
        script, "ranges", lambda: {"nats-py": ("2.10.0", "2.16.0"), "anyio": ("4.12.0", None)}
    )
    at_high = {"nats-py": "2.16.0", "anyio": "4.16.0"}
    assert script.high_end_differences(at_high, {}) == []
    # A ceiling missed, either way, or a newer release of an unbounded dependency: run it.
    assert script.high_end_differences({**at_high, "nats-py": "2.15.0"}, {}) == [
        "nats-py 2.15.0, not its ceiling 2.16.0"
    ]
    assert script.high_end_differences({**at_high, "nats-py": "2.17.0"}, {}) != []
    assert script.high_end_differences(at_high, {"anyio": "4.17.0"}) == [
        "anyio 4.16.0, not the newest (4.17.0)"
    ]
    assert script.high_end_differences({"anyio": "4.16.0"}, {}) == [
        "nats-py None, not its ceiling 2.16.0"
    ]


def test_the_high_end_runs_when_the_index_cannot_say(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    script = load_script()
    monkeypatch.setattr(script, "installed", lambda path: {})

    def no_index(path: Path) -> dict[str, str]:
        raise script.subprocess.CalledProcessError(1, ["pip"])

    monkeypatch.setattr(script, "newer_releases", no_index)
    assert script.high_end_is_the_project_venv() is False
    assert "cannot tell" in capsys.readouterr().out
