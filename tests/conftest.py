"""The project's own tests use its pytest plugin, opted in here as users do.

The Spark standalone-cluster tests (marker ``spark_cluster``,
tests/integration/test_spark_cluster.py) are not part of ``make test``: four Spark
applications with executors in JVMs of their own take 2-4 minutes on a shared 2-core
machine. ``make test-spark-cluster`` runs them (and .ci/run after ``make test``), as does
naming the file or setting ``LIFTBRIDGE_SPARK_CLUSTER_TESTS=1``. Once selected they never
skip: no Java is a failure.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from budget import examples, scale
from hypothesis import settings

from liftbridge_client._tasks import TaskSupervisor
from liftbridge_client.testing import SingleNode

pytest_plugins = ["liftbridge_client.testing.plugin"]

# The generated tests' default example count follows LIFTBRIDGE_TEST_EXAMPLES too (see
# budget.py); tests that set their own count scale it with `budget.examples`.
if scale() != 1:
    settings.register_profile("liftbridge-scaled", max_examples=examples(100))
    settings.load_profile("liftbridge-scaled")

SPARK_CLUSTER_ENV = "LIFTBRIDGE_SPARK_CLUSTER_TESTS"
SPARK_CLUSTER_MODULE = Path(__file__).resolve().parent / "integration" / "test_spark_cluster.py"


def _spark_cluster_selected(config: pytest.Config) -> bool:
    if os.environ.get(SPARK_CLUSTER_ENV) == "1":
        return True
    return any(Path(arg.split("::", 1)[0]).resolve() == SPARK_CLUSTER_MODULE for arg in config.args)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect the ``spark_cluster`` tests unless asked for (see the module docstring)."""
    if _spark_cluster_selected(config):
        return
    left_out = [item for item in items if item.get_closest_marker("spark_cluster")]
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = [item for item in items if not item.get_closest_marker("spark_cluster")]


@pytest.fixture
async def supervisor() -> AsyncIterator[TaskSupervisor]:
    """A started `TaskSupervisor` (what the client's background tasks run in), closed after
    the test."""
    tasks = TaskSupervisor()
    await tasks.start()
    yield tasks
    await tasks.aclose(1.0)


@pytest.fixture
def own_node(tmp_path: Path, liftbridge_server_version: str) -> Iterator[SingleNode]:
    """A node of the test's own, so the shared one stays untouched: to freeze, kill or
    restart, at the version the session's servers run."""
    with SingleNode(base_dir=tmp_path, version=liftbridge_server_version) as node:
        yield node
