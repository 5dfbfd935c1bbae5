"""Tests of the docker image and compose files; they need a docker daemon.

They are not part of ``make test`` (``pytest tests`` leaves this directory out): run them
with ``make test-docker``, which provides docker when it can, or name the directory
(``pytest tests/dockerized``) or set ``LIFTBRIDGE_DOCKER_TESTS=1``. Once selected they
never skip: no daemon or no compose implementation is an error.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dockerized.compose_project import available_tools
from liftbridge_client.testing import ImageReport, ensure_images

HERE = Path(__file__).resolve().parent
ENV_SELECT = "LIFTBRIDGE_DOCKER_TESTS"


def _selected(config: pytest.Config) -> bool:
    if os.environ.get(ENV_SELECT) == "1":
        return True
    for arg in config.args:
        path = Path(arg.split("::", 1)[0]).resolve()
        if path == HERE or HERE in path.parents:
            return True
    return False


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Leave this directory out unless it was asked for (see the module docstring)."""
    if collection_path != HERE and HERE in collection_path.parents and not _selected(config):
        return True
    return None


def pytest_report_header(config: pytest.Config) -> str | None:
    """Say which compose implementations the compose tests run with."""
    if not _selected(config):
        return None
    tools = available_tools()
    names = ", ".join(" ".join(tool.argv) for tool in tools) or "none found"
    return f"compose implementations: {names}"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Run every test taking ``compose_tool`` once per compose implementation found, and
    every test taking ``newest_compose_tool`` with the newest one (v2 where there is one):
    what such a test checks is the node the compose file starts, not the tool."""
    for name in ("compose_tool", "newest_compose_tool"):
        if name not in metafunc.fixturenames:
            continue
        tools = available_tools()
        if not tools:
            raise pytest.UsageError(
                "no compose implementation found (docker-compose or `docker compose`): "
                "`make test-docker` installs docker-compose on Debian"
            )
        if name == "newest_compose_tool":
            tools = tools[-1:]
        metafunc.parametrize(name, tools, ids=[tool.id for tool in tools])


@pytest.fixture(scope="session")
def images() -> ImageReport:
    """The locally built images (built now when missing or stale)."""
    return ensure_images()
