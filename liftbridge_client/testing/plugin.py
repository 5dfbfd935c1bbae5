"""pytest plugin: real Liftbridge servers as fixtures. Opt-in: it loads only when asked.

Enable it in a ``conftest.py`` (``pytest_plugins = ["liftbridge_client.testing.plugin"]``)
or on the command line (``pytest -p liftbridge_client.testing.plugin``). Installing the
package does not load it into every pytest run.

Fixtures:

- ``liftbridge_server`` (session): a :class:`~liftbridge_client.testing.Deployment`. A local
  :class:`~liftbridge_client.testing.SingleNode`, or an
  :class:`~liftbridge_client.testing.ExternalDeployment` when ``LIFTBRIDGE_ADDRS`` (and
  ``LIFTBRIDGE_NATS_URL``) are set.
- ``liftbridge_cluster`` (session, started on first use): a 3-node
  :class:`~liftbridge_client.testing.Cluster`. After every test that used it, nodes or NATS
  the test stopped or killed are restarted and the cluster is waited for.
- ``stream_names`` (function): a :class:`~liftbridge_client.testing.StreamNames` factory of
  unique ``(name, subject)`` pairs prefixed with the test's name.
- ``unique_stream`` (function): one such pair.

Where the servers run: ``--liftbridge-deployment=auto|local|docker|external`` (or
``$LIFTBRIDGE_DEPLOYMENT``). ``auto`` is external when ``LIFTBRIDGE_ADDRS`` is set, else
local; ``docker`` runs both fixtures' servers in containers of the locally built images
(:class:`~liftbridge_client.testing.DockerSingleNode`,
:class:`~liftbridge_client.testing.DockerCluster`). See docs/testing.md.

A server that cannot be provisioned or started makes the fixture raise (the test errors); it
never skips. When a test fails, the last 80 lines of each server log it used are attached to
the report. A server that exits by itself during a test (a crash) is restarted and the test
errors in teardown, with its log.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Generator, Iterator

import pytest

from liftbridge_client.testing._deployments import (
    ENV_ADDRS,
    Cluster,
    Deployment,
    ExternalDeployment,
    SingleNode,
)
from liftbridge_client.testing._docker_deployments import DockerCluster, DockerSingleNode
from liftbridge_client.testing._errors import HarnessError
from liftbridge_client.testing._names import StreamName, StreamNames
from liftbridge_client.testing._provision import (
    LIFTBRIDGE_VERSION,
    liftbridge_binary,
    liftbridge_needs_build,
)
from liftbridge_client.testing._selection import DeploymentKind, cluster_kind, server_kind

__all__ = [
    "liftbridge_cluster",
    "liftbridge_server",
    "pytest_addoption",
    "pytest_collection_finish",
    "pytest_collection_modifyitems",
    "pytest_configure",
    "pytest_runtest_makereport",
    "stream_names",
    "unique_stream",
]

LOG_TAIL_LINES = 80
_DEPLOYMENT_FIXTURES = ("liftbridge_server", "liftbridge_cluster")


def pytest_addoption(parser: pytest.Parser) -> None:
    """Add ``--liftbridge-deployment``."""
    parser.getgroup("liftbridge").addoption(
        "--liftbridge-deployment",
        choices=[kind.value for kind in DeploymentKind],
        default=None,
        help="where the fixtures' servers run: auto (default; external when "
        "LIFTBRIDGE_ADDRS is set, else local), local, docker or external. Default from "
        "$LIFTBRIDGE_DEPLOYMENT.",
    )


def _option(config: pytest.Config) -> str | None:
    value = config.getoption("liftbridge_deployment", default=None)
    return str(value) if value else None


def pytest_configure(config: pytest.Config) -> None:
    """Register the ``integration`` and ``cluster`` markers unless already declared."""
    declared = {str(line).split(":", 1)[0].strip() for line in config.getini("markers")}
    if "integration" not in declared:
        config.addinivalue_line("markers", "integration: needs real Liftbridge and NATS servers")
    if "cluster" not in declared:
        config.addinivalue_line("markers", "cluster: uses the 3-node cluster fixture")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test that uses the cluster fixture ``cluster`` (select or deselect with -m)."""
    for item in items:
        if "liftbridge_cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.cluster)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Build Liftbridge before the first test (and its timeout) starts, if a test needs it.

    A cold build takes a minute or two, which would otherwise count against the timeout of
    whichever test first asks for a server. Failures are left for that fixture to raise.
    """
    if session.config.option.collectonly:
        return
    wanted = {name for item in session.items for name in getattr(item, "fixturenames", ())}
    if "liftbridge_cluster" not in wanted and (
        "liftbridge_server" not in wanted or os.environ.get(ENV_ADDRS)
    ):
        return
    option = _option(session.config)
    with contextlib.suppress(HarnessError):
        if DeploymentKind.DOCKER in {
            server_kind(option, os.environ),
            cluster_kind(option, os.environ),
        }:
            from liftbridge_client.testing._docker_images import ensure_images

            ensure_images()  # builds the images (and a static Liftbridge) when missing
            return
    if not liftbridge_needs_build():
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(
            f"liftbridge-client: building Liftbridge {LIFTBRIDGE_VERSION} with Go "
            "(once per version; about a minute or two)..."
        )
    with contextlib.suppress(HarnessError):
        liftbridge_binary()


@pytest.fixture(scope="session")
def liftbridge_server(
    tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config
) -> Iterator[Deployment]:
    """One Liftbridge node with embedded NATS for the session (or external servers)."""
    kind = server_kind(_option(pytestconfig), os.environ)
    if kind is DeploymentKind.DOCKER:
        with DockerSingleNode() as container:
            yield container
        return
    external = ExternalDeployment.from_env() if kind is DeploymentKind.EXTERNAL else None
    if external is not None:
        yield external.wait_ready()
        return
    with SingleNode(base_dir=tmp_path_factory.mktemp("liftbridge-single")) as node:
        yield node


@pytest.fixture(scope="session")
def liftbridge_cluster(
    tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config
) -> Iterator[Cluster | DockerCluster]:
    """A 3-node Liftbridge cluster on a shared NATS server, started on first use."""
    if cluster_kind(_option(pytestconfig), os.environ) is DeploymentKind.DOCKER:
        with DockerCluster() as containers:
            yield containers
        return
    with Cluster(3, base_dir=tmp_path_factory.mktemp("liftbridge-cluster")) as cluster:
        yield cluster


@pytest.fixture
def stream_names(request: pytest.FixtureRequest) -> StreamNames:
    """A factory of unique ``(name, subject)`` pairs named after the current test."""
    return StreamNames(request.node.name)


@pytest.fixture
def unique_stream(stream_names: StreamNames) -> StreamName:
    """A unique ``(name, subject)`` pair for the current test."""
    return stream_names()


@pytest.fixture(autouse=True)
def _liftbridge_health(request: pytest.FixtureRequest) -> Iterator[None]:
    """After a test that used local servers: restart what is down, report crashes."""
    yield
    for fixture in _DEPLOYMENT_FIXTURES:
        deployment = (getattr(request.node, "funcargs", None) or {}).get(fixture)
        if isinstance(deployment, SingleNode | Cluster | DockerSingleNode | DockerCluster):
            crashed = deployment.unexpected_exits()
            logs = deployment.log_tails(LOG_TAIL_LINES) if crashed else {}
            deployment.ensure_all_running()
            if crashed:
                pytest.fail(
                    f"server(s) exited during the test without being stopped: {crashed} "
                    "(restarted since).\n" + _format_logs(logs),
                    pytrace=False,
                )


def _format_logs(logs: dict[str, str]) -> str:
    return "\n".join(f"----- {name} (last lines) -----\n{text}" for name, text in logs.items())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Attach the tail of each server log to the report of a failed test."""
    report = yield
    if report.failed and report.when in {"setup", "call"}:
        funcargs = getattr(item, "funcargs", None) or {}
        for fixture in _DEPLOYMENT_FIXTURES:
            deployment = funcargs.get(fixture)
            if isinstance(deployment, Deployment):
                for name, text in deployment.log_tails(LOG_TAIL_LINES).items():
                    report.sections.append((f"{name} log (last {LOG_TAIL_LINES} lines)", text))
    return report
