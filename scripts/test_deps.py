"""`make test-deps`: the tests that touch dependency internals, at both ends of each range.

For each of ``low`` and ``high`` a throwaway virtualenv (.venv-deps-low, .venv-deps-high;
git-ignored, reused while its stamp matches) gets the project with every runtime
dependency of pyproject.toml pinned: ``low`` to each floor (``>=X``), ``high`` to each
ceiling (``<=Y``), or, for a dependency without one, to the newest the index has. Then
tests/unit (without the tests of the spark, docs and bench extras, which these venvs do
not install) and the NATS and h2 integration files run in it.

    python scripts/test_deps.py [low|high|high-after-make-test ...] [-- pytest args]

``high-after-make-test`` (what .ci/run asks for) skips the high end when the project's
.venv holds exactly its versions: `make test` has just run every one of these files there.

Why: nats-py and h2 are used through private attributes (liftbridge_client/_transport/
nats.py and h2/connection.py), each behind a feature check with a
fallback; this proves the declared range holds with the fast paths at both ends. The low
end also runs without the C accelerator (``LIFTBRIDGE_CLIENT_PURE=1``; liftbridge_client/
_native.py), as an install without a C compiler would.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import subprocess
import sys
import time
import tomllib
import venv
from pathlib import Path

from liftbridge_client._native import PURE_ENV

ROOT = Path(__file__).resolve().parent.parent

# What the tests need besides the runtime dependencies (no spark, docs or bench extras:
# pyspark alone is ~450 MB per venv, and those tests use no NATS or h2 internals).
EXTRAS = "dev,cli,otel,extras-test"
# Unit test files that import one of these need an extra the deps venvs do not install;
# they are found by reading each file's imports, and those of the test helpers it imports
# (a hand-kept list missed a new one). Imports inside functions count: they run too.
EXTRA_ONLY_IMPORTS = ("pyspark", "pyarrow", "griffe", "mkdocs", "bench", "liftbridge_client.spark")
TEST_HELPER_DIRS = ("tests", "tests/unit", "tests/integration")


def _imports(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
    return names


def _needs_extra(path: Path, root: Path, seen: set[Path]) -> bool:
    seen.add(path)
    for name in _imports(path):
        if any(name == m or name.startswith(m + ".") for m in EXTRA_ONLY_IMPORTS):
            return True
        for folder in TEST_HELPER_DIRS:  # a test helper module (spark_support, ...)
            helper = root / folder / f"{name.split('.')[0]}.py"
            if helper.is_file() and helper not in seen and _needs_extra(helper, root, seen):
                return True
    return False


def extra_only_unit_tests(root: Path = ROOT) -> list[str]:
    """tests/unit files whose imports need the spark, docs or bench extras."""
    return [
        path.relative_to(root).as_posix()
        for path in sorted((root / "tests" / "unit").glob("test_*.py"))
        if _needs_extra(path, root, set())
    ]


# The integration files that drive nats-py and the h2 transport against real servers.
INTEGRATION = (
    "tests/integration/test_nats_raw_acks.py",
    "tests/integration/test_h2_flow_control.py",
    "tests/integration/test_keepalive.py",
    "tests/integration/test_lifecycle.py",
    "tests/integration/test_nats_security.py",
    "tests/integration/test_nats_permissions.py",
    "tests/integration/test_uvloop.py",
    "tests/integration/test_publish.py",
    "tests/integration/test_public_paths.py",
)

_REQ = re.compile(r"^\s*([A-Za-z0-9_.-]+)\s*(.*)$")


def ranges() -> dict[str, tuple[str | None, str | None]]:
    """Each runtime dependency's floor (``>=``) and ceiling (``<=``) from pyproject.toml."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    out: dict[str, tuple[str | None, str | None]] = {}
    for req in project["dependencies"]:
        m = _REQ.match(req.split(";")[0])
        if m is None:
            raise SystemExit(f"cannot read the requirement {req!r}")
        name, spec = m.group(1), m.group(2)
        floor = ceiling = None
        for part in filter(None, (p.strip() for p in spec.split(","))):
            if part.startswith(">="):
                floor = part[2:].strip()
            elif part.startswith("<="):
                ceiling = part[2:].strip()
        if floor is None:
            raise SystemExit(f"{name}: no floor (>=) to test in pyproject.toml")
        out[name] = (floor, ceiling)
    return out


def pins(end: str) -> list[str]:
    out = []
    for name, (floor, ceiling) in ranges().items():
        if end == "low":
            out.append(f"{name}=={floor}")
        elif ceiling is not None:
            out.append(f"{name}=={ceiling}")
        else:
            out.append(name)  # with --upgrade: the newest the index has
    return out


def ensure_venv(end: str) -> Path:
    path = ROOT / f".venv-deps-{end}"
    wanted = pins(end)
    stamp = path / ".deps-stamp"
    digest = hashlib.sha256(
        json.dumps([wanted, EXTRAS, (ROOT / "pyproject.toml").read_text()]).encode()
    ).hexdigest()
    if stamp.is_file() and stamp.read_text() == digest:
        return path
    print(f"==> {path.name}: installing liftbridge-client[{EXTRAS}] with {' '.join(wanted)}")
    started = time.monotonic()
    venv.EnvBuilder(clear=True, with_pip=True).create(path)
    py = str(path / "bin" / "python")
    subprocess.run([py, "-m", "pip", "install", "-q", "--upgrade", "pip"], check=True)
    # Not editable: nothing is written into the worktree; tests import from the worktree
    # through pytest's rootdir (tests/) and PYTHONPATH.
    subprocess.run(
        [py, "-m", "pip", "install", "-q", "--upgrade", f"{ROOT}[{EXTRAS}]", *wanted],
        check=True,
    )
    stamp.write_text(digest)
    print(f"==> {path.name}: installed in {time.monotonic() - started:.0f} s", flush=True)
    return path


def installed(path: Path) -> dict[str, str]:
    names = list(ranges())
    code = (
        "import importlib.metadata as m, json, sys;"
        "print(json.dumps({n: m.version(n) for n in sys.argv[1:]}))"
    )
    out = subprocess.run(
        [str(path / "bin" / "python"), "-c", code, *names],
        check=True,
        capture_output=True,
        text=True,
    )
    result: dict[str, str] = json.loads(out.stdout)
    return result


def high_end_differences(versions: dict[str, str], newer: dict[str, str]) -> list[str]:
    """How a venv with ``versions`` installed differs from the high end: a dependency off its
    ceiling, or one without a ceiling that the index has a ``newer`` release of."""
    out = []
    for name, (_, ceiling) in ranges().items():
        have = versions.get(name)
        if ceiling is not None and have != ceiling:
            out.append(f"{name} {have}, not its ceiling {ceiling}")
        elif ceiling is None and name in newer:
            out.append(f"{name} {have}, not the newest ({newer[name]})")
    return out


def newer_releases(path: Path) -> dict[str, str]:
    """What ``pip install --upgrade`` of the high end's pins would change in the venv at
    ``path`` (a dry run against the index): name -> the version it would install."""
    done = subprocess.run(
        [
            str(path / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--upgrade",
            "--no-deps",
            "-q",
            "--disable-pip-version-check",
            "--report",
            "-",
            *pins("high"),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    report = json.loads(done.stdout)
    return {
        item["metadata"]["name"].lower(): item["metadata"]["version"]
        for item in report.get("install", [])
    }


def high_end_is_the_project_venv() -> bool:
    """True when ROOT/.venv (where `make test` runs) is the high end; says why either way."""
    path = ROOT / ".venv"
    versions = installed(path)
    try:
        newer = {n: v for n, v in newer_releases(path).items() if n in ranges()}
    except (subprocess.CalledProcessError, ValueError) as exc:  # no index, or no report
        print(f"==> high: cannot tell what the index has newer ({exc}): running the high end")
        return False
    differences = high_end_differences(versions, newer)
    if differences:
        print(f"==> high: .venv differs ({'; '.join(differences)}): running the high end")
        return False
    print(
        "==> high: .venv holds the high end ("
        + ", ".join(f"{n} {v}" for n, v in versions.items())
        + "), where `make test` ran every file of this run: not run twice",
        flush=True,
    )
    return True


def run(end: str, pytest_args: list[str]) -> int:
    if end == "high-after-make-test":
        if high_end_is_the_project_venv():
            return 0
        end = "high"
    path = ensure_venv(end)
    versions = installed(path)
    for name, (floor, ceiling) in ranges().items():
        want = floor if end == "low" else ceiling
        if want is not None and versions[name] != want:
            print(f"error: {path.name} has {name} {versions[name]}, not {want}", file=sys.stderr)
            return 1
    print(f"==> {end}: " + ", ".join(f"{n} {v}" for n, v in versions.items()), flush=True)
    # These runs prove the range, not search inputs again: the generated tests draw a
    # fifth of their examples (tests/budget.py; make test draws them all).
    env = dict(
        os.environ, PYTHONPATH=str(ROOT), LIFTBRIDGE_DEPS_END=end, LIFTBRIDGE_TEST_EXAMPLES="0.2"
    )
    if end == "low":
        # The pure-Python twins of the C accelerator, end to end (make test runs with it):
        # what an install without a C compiler runs.
        env[PURE_ENV] = "1"
    args = [str(path / "bin" / "pytest"), "-p", "no:cacheprovider", "tests/unit"]
    args += [f"--ignore={p}" for p in extra_only_unit_tests()]
    args += [*INTEGRATION, *pytest_args]
    started = time.monotonic()
    code = subprocess.run(args, cwd=ROOT, env=env, check=False).returncode
    print(f"==> {end}: tests took {time.monotonic() - started:.0f} s", flush=True)
    return code


def main(argv: list[str]) -> int:
    if "--" in argv:
        i = argv.index("--")
        ends, pytest_args = argv[:i], argv[i + 1 :]
    else:
        ends, pytest_args = argv, []
    ends = ends or ["low", "high"]
    failed = []
    for end in ends:
        if end not in ("low", "high", "high-after-make-test"):
            raise SystemExit(f"unknown end {end!r}: low, high or high-after-make-test")
        if run(end, pytest_args) != 0:
            failed.append(end)
    if failed:
        print(f"error: the tests failed with the {' and '.join(failed)} versions", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
