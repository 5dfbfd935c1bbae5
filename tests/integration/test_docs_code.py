"""Every Python code block in README.md and docs/ runs against a real server.

How a block is run depends on the HTML comment on the line before its fence:

- none: a script. It runs in its own interpreter (top-level ``await`` allowed) with the
  docs' default addresses (``127.0.0.1:9292``, ``nats://127.0.0.1:4222``) pointed at the
  test server, twice (a reader may run it again), and must exit 0 within a minute.
- ``<!-- docs-test: pytest -->``: a test module, run by pytest with the project's plugin,
  under the page's ``<!-- docs-test: pytest-config -->`` ``ini`` block as its pytest.ini
  when the page has one (else in asyncio auto mode); pytest must not warn about it.
- ``<!-- docs-test: same-as examples/NAME.py -->``: the block must be that file, verbatim
  (examples/ run in tests/integration/test_examples.py).
- ``<!-- docs-test: compile -->``: a fragment that needs what a test cannot cheaply give it
  (a Spark session): it must compile, and its imports must import.

So a block cannot drift from the API, hang, or fail on a second run without failing here.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from liftbridge_client.testing import Deployment

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("**/*.md"))]
_FENCE = re.compile(r"^```(\w*)\s*$")
_MARKER = re.compile(r"^<!--\s*docs-test:\s*(.+?)\s*-->\s*$")
_DEFAULT_GRPC = "127.0.0.1:9292"
_DEFAULT_NATS = "nats://127.0.0.1:4222"

# Runs a block as a script: compiled with top-level await allowed, run in a fresh loop.
_RUNNER = textwrap.dedent(
    """
    import ast, asyncio, sys, types
    source = sys.stdin.read()
    code = compile(source, "<docs>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    module = types.ModuleType("__main__")
    sys.modules["__main__"] = module
    result = eval(code, module.__dict__)
    if asyncio.iscoroutine(result):
        asyncio.run(result)
    """
)


@dataclass(frozen=True)
class Block:
    path: Path
    line: int
    mode: str
    code: str

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def python_blocks(path: Path) -> list[Block]:
    blocks: list[Block] = []
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        fence = _FENCE.match(lines[i])
        if fence is None:
            i += 1
            continue
        start, lang = i, fence[1]
        i += 1
        body: list[str] = []
        while i < len(lines) and not lines[i].startswith("```"):
            body.append(lines[i])
            i += 1
        i += 1
        if lang != "python":
            continue
        marker = _MARKER.match(lines[start - 1]) if start > 0 else None
        mode = marker[1] if marker else "script"
        blocks.append(Block(path, start + 1, mode, "\n".join(body) + "\n"))
    return blocks


BLOCKS = [b for path in DOCS for b in python_blocks(path)]


def pytest_config(path: Path) -> str | None:
    """The page's ``docs-test: pytest-config`` block: the pytest.ini it tells readers to
    write, which its pytest blocks then run under."""
    lines = path.read_text().splitlines()
    for i, line in enumerate(lines[:-1]):
        marker = _MARKER.match(line)
        if marker and marker[1] == "pytest-config":
            assert lines[i + 1] == "```ini", f"{path}:{i + 2}: the config block is ini"
            end = lines.index("```", i + 2)
            return "\n".join(lines[i + 2 : end]) + "\n"
    return None


def test_the_testing_page_configures_pytest_asyncio_fully() -> None:
    # Following docs/testing.md printed pytest-asyncio's PytestDeprecationWarning
    # "asyncio_default_fixture_loop_scope is unset".
    config = pytest_config(ROOT / "docs" / "testing.md")
    assert config is not None
    assert "asyncio_mode = auto" in config
    assert "asyncio_default_fixture_loop_scope = function" in config


def test_the_docs_have_python_blocks_to_run() -> None:
    assert len(BLOCKS) >= 4
    modes = {b.mode.split()[0] for b in BLOCKS}
    assert modes <= {"script", "pytest", "same-as", "compile"}, modes


# Consumer groups came with Liftbridge v1.8.0: `make test-compat` skips their page on v1.7.1.
GROUPS_ONLY = pytest.mark.server_versions("v1.9.0", "master")
PARAMS = [
    pytest.param(b, id=b.id, marks=GROUPS_ONLY if b.path.name == "consumer-groups.md" else ())
    for b in BLOCKS
]


@pytest.mark.parametrize("block", PARAMS)
def test_docs_block_runs(block: Block, liftbridge_server: Deployment, tmp_path: Path) -> None:
    kind, _, arg = block.mode.partition(" ")
    if kind == "same-as":
        assert block.code == (ROOT / arg).read_text(), f"{block.id} differs from {arg}"
        return
    if kind == "compile":
        tree = ast.parse(block.code, block.id)
        imports: list[ast.stmt] = [
            n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)
        ]
        assert imports, f"{block.id}: a compile-only block imports what it uses"
        exec(compile(ast.Module(imports, type_ignores=[]), block.id, "exec"), {})
        return
    code = block.code.replace(_DEFAULT_GRPC, liftbridge_server.addresses[0]).replace(
        _DEFAULT_NATS, liftbridge_server.nats_url
    )
    env = dict(
        os.environ,
        LIFTBRIDGE_ADDRS=",".join(liftbridge_server.addresses),
        LIFTBRIDGE_NATS_URL=liftbridge_server.nats_url,
    )
    if kind == "pytest":
        module = tmp_path / "test_docs_block.py"
        module.write_text(code)
        argv = [sys.executable, "-m", "pytest", "-q", "-p", "liftbridge_client.testing.plugin"]
        config = pytest_config(block.path)
        if config is None:
            argv += ["-o", "asyncio_mode=auto", "-o", "asyncio_default_fixture_loop_scope=function"]
        else:
            (tmp_path / "pytest.ini").write_text(config)
        argv += ["-o", "timeout=60", "--rootdir", str(tmp_path)]
        result = subprocess.run(
            [*argv, str(module)],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    else:
        assert kind == "script", block.mode
        for _ in range(2):  # a reader who runs it again must not hit AlreadyExists & co.
            result = subprocess.run(
                [sys.executable, "-c", _RUNNER],
                input=code,
                env=env,
                cwd=tmp_path,
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            if result.returncode != 0:
                break
    assert result.returncode == 0, f"{block.id} failed:\n{result.stdout}\n{result.stderr}"
    if kind == "pytest":  # what the docs tell readers to configure leaves nothing to warn of
        assert "Warning" not in result.stdout + result.stderr, f"{block.id}:\n{result.stdout}"
