"""Every script in examples/ runs against a real server and exits 0."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.integration

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.py"))
# Spark examples run in-process on the Spark tests' session (test_spark_write.py): a JVM
# start per example would cost half a minute each.
EXAMPLES = [p for p in EXAMPLES if not p.name.startswith("spark_")]


def test_there_are_examples() -> None:
    assert any(p.name == "quickstart.py" for p in EXAMPLES)


# Consumer groups came with Liftbridge v1.8.0: `make test-compat` skips them on v1.7.1.
GROUPS_ONLY = pytest.mark.server_versions("v1.9.0", "master")
PARAMS = [
    pytest.param(p, id=p.stem, marks=GROUPS_ONLY if p.stem == "consumer_group" else ())
    for p in EXAMPLES
]


@pytest.mark.parametrize("script", PARAMS)
def test_example_runs(script: Path, liftbridge_server: Any) -> None:
    env = dict(
        os.environ,
        LIFTBRIDGE_ADDRS=",".join(liftbridge_server.addresses),
        LIFTBRIDGE_NATS_URL=liftbridge_server.nats_url,
    )
    result = subprocess.run(
        [sys.executable, str(script)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, f"{script.name} failed:\n{result.stdout}\n{result.stderr}"
    assert result.stdout.strip(), f"{script.name} printed nothing"
    if script.stem == "quickstart":
        # The first output a user sees (docs/quickstart.md shows it): the publisher's
        # headers only, not the server's subject and reply repeated.
        lines = result.stdout.splitlines()
        assert "  offset 0: b'hello over NATS' headers={}" in lines, result.stdout
        assert "  offset 1: b'hello over gRPC' headers={'via': b'grpc'}" in lines, result.stdout
