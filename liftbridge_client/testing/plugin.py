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
- ``liftbridge_versions`` (session): :class:`VersionedDeployments`, single nodes and clusters
  of other server versions (``.single("master")``, ``.cluster(("v1.9.0", "v1.9.0",
  "master"))``), each started on first use and kept for the session.
- ``liftbridge_server_version`` (session): the version ``liftbridge_server`` and
  ``liftbridge_cluster`` run: ``--liftbridge-version`` (or ``$LIFTBRIDGE_SERVER_VERSION``),
  by default the pinned release. ``make test-compat`` runs the suite once per version.

Markers: ``liftbridge_version("master", ...)`` names the versions a test starts itself (via
``liftbridge_versions``); ``server_versions("v1.9.0", "master")`` limits a test to runs whose
default version is listed, for behaviour that differs by version. Tests that need the master
source snapshot when it is absent (``$LIFTBRIDGE_MASTER_SNAPSHOT``, see docs/testing.md) are
deselected with a message, or fail with a clear error when ``$CI`` is set.

Server log level: ``--liftbridge-log-level=debug|info|warn|error`` (or
``$LIFTBRIDGE_LOG_LEVEL``, which the option sets for the run), ``info`` by default; a test
that reads the servers' debug lines starts its deployment with ``log_level="debug"``.

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
from collections.abc import Generator, Iterator, Sequence

import pytest

from liftbridge_client.testing._config import ENV_LOG_LEVEL, LOG_LEVELS, default_log_level
from liftbridge_client.testing._deployments import (
    ENV_ADDRS,
    Cluster,
    Deployment,
    ExternalDeployment,
    SingleNode,
)
from liftbridge_client.testing._docker_deployments import DockerCluster, DockerSingleNode
from liftbridge_client.testing._errors import ConfigError, HarnessError
from liftbridge_client.testing._names import StreamName, StreamNames
from liftbridge_client.testing._provision import (
    LIFTBRIDGE_VERSION,
    liftbridge_binary,
    liftbridge_needs_build,
    snapshot_available,
)
from liftbridge_client.testing._selection import DeploymentKind, cluster_kind, server_kind
from liftbridge_client.testing._versions import server_version

__all__ = [
    "ENV_SERVER_VERSION",
    "VersionedDeployments",
    "liftbridge_cluster",
    "liftbridge_server",
    "liftbridge_server_version",
    "liftbridge_versions",
    "pytest_addoption",
    "pytest_collection_finish",
    "pytest_collection_modifyitems",
    "pytest_configure",
    "pytest_runtest_makereport",
    "pytest_unconfigure",
    "stream_names",
    "unique_stream",
]

LOG_TAIL_LINES = 80
ENV_SERVER_VERSION = "LIFTBRIDGE_SERVER_VERSION"
_DEPLOYMENT_FIXTURES = ("liftbridge_server", "liftbridge_cluster")
_MARKERS = {
    "integration": "needs real Liftbridge and NATS servers",
    "cluster": "uses the 3-node cluster fixture",
    "liftbridge_version": "liftbridge_version(*versions): server versions the test starts",
    "server_versions": "server_versions(*versions): run only when the default server "
    "version (--liftbridge-version) is one of these",
}
_DESELECTED_KEY = pytest.StashKey[list[str]]()
_LOG_LEVEL_ENV_KEY = pytest.StashKey[str | None]()
_OFF_VERSION_KEY = pytest.StashKey[list[str]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--liftbridge-version``, ``--liftbridge-deployment`` and ``--liftbridge-log-level``."""
    group = parser.getgroup("liftbridge")
    group.addoption(
        "--liftbridge-deployment",
        choices=[kind.value for kind in DeploymentKind],
        default=None,
        help="where the fixtures' servers run: auto (default; external when "
        "LIFTBRIDGE_ADDRS is set, else local), local, docker or external. Default from "
        "$LIFTBRIDGE_DEPLOYMENT.",
    )
    group.addoption(
        "--liftbridge-log-level",
        choices=list(LOG_LEVELS),
        default=None,
        help=f"logging.level of the servers the harness starts (default ${ENV_LOG_LEVEL} or "
        "info); tests that read debug lines ask for debug themselves",
    )
    group.addoption(
        "--liftbridge-version",
        default=None,
        help=f"server version for liftbridge_server/liftbridge_cluster (default "
        f"${ENV_SERVER_VERSION} or {LIFTBRIDGE_VERSION}; also v1.7.1, master)",
    )


def _default_version(config: pytest.Config) -> str:
    name = config.getoption("--liftbridge-version", None) or os.environ.get(ENV_SERVER_VERSION)
    try:
        return server_version(name or LIFTBRIDGE_VERSION).name
    except ConfigError as exc:
        raise pytest.UsageError(str(exc)) from None


def _docker_runs_the_pinned_version(version: str) -> None:
    # The images are built from the pinned release only (make docker-image).
    if version != server_version(LIFTBRIDGE_VERSION).name:
        raise ConfigError(
            f"--liftbridge-deployment=docker runs {LIFTBRIDGE_VERSION} only, not {version}"
        )


def _option(config: pytest.Config) -> str | None:
    value = config.getoption("liftbridge_deployment", default=None)
    return str(value) if value else None


def pytest_configure(config: pytest.Config) -> None:
    """Register the plugin's markers unless already declared."""
    declared = {str(line).split(":", 1)[0].strip() for line in config.getini("markers")}
    for name, text in _MARKERS.items():
        if name not in declared:
            config.addinivalue_line("markers", f"{name}: {text}")
    _default_version(config)  # a bad --liftbridge-version is a usage error, before collection
    level = config.getoption("liftbridge_log_level", default=None)
    if level:
        # Through the environment, so every deployment of the run (tests' own, the CLI's
        # subprocesses) gets it; restored at unconfigure.
        config.stash[_LOG_LEVEL_ENV_KEY] = os.environ.get(ENV_LOG_LEVEL)
        os.environ[ENV_LOG_LEVEL] = str(level)
    try:
        default_log_level()
    except ConfigError as exc:
        raise pytest.UsageError(str(exc)) from None


def pytest_unconfigure(config: pytest.Config) -> None:
    """Put ``$LIFTBRIDGE_LOG_LEVEL`` back as it was before ``--liftbridge-log-level``."""
    if _LOG_LEVEL_ENV_KEY not in config.stash:
        return
    before = config.stash[_LOG_LEVEL_ENV_KEY]
    if before is None:
        os.environ.pop(ENV_LOG_LEVEL, None)
    else:
        os.environ[ENV_LOG_LEVEL] = before


def _marker_versions(item: pytest.Item, name: str) -> list[str] | None:
    versions: list[str] = []
    found = False
    for mark in item.iter_markers(name):
        found = True
        versions += [server_version(str(v)).name for v in mark.args]
    return versions if found else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark cluster tests; deselect tests for other versions or without the master snapshot.

    A test marked ``server_versions`` runs only when the default version (or the release a
    patched default is built from) is listed (the
    summary names each one left out). A test needing a version whose source snapshot is
    absent is deselected (with a line in the summary), unless ``$CI`` is set: then it stays
    and fails with the provisioning error.
    """
    default = _default_version(config)
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    reasons: list[str] = []
    off_version: list[str] = []
    for item in items:
        if "liftbridge_cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.cluster)
        only = _marker_versions(item, "server_versions")
        # A patched release (v1.9.0+lbc.1) runs what its release runs.
        base = server_version(default).patched_from
        if only is not None and default not in only and base not in only:
            dropped.append(item)
            off_version.append(f"{item.nodeid}: runs against {', '.join(only)} only")
            continue
        needed = _marker_versions(item, "liftbridge_version") or []
        uses_default = any(f in getattr(item, "fixturenames", ()) for f in _DEPLOYMENT_FIXTURES)
        if uses_default:
            needed.append(default)
        missing = [v for v in dict.fromkeys(needed) if not snapshot_available(v)]
        if missing and not os.environ.get("CI"):
            dropped.append(item)
            reasons.append(f"{item.nodeid}: no source snapshot for {', '.join(missing)}")
            continue
        kept.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
    config.stash[_DESELECTED_KEY] = reasons
    config.stash[_OFF_VERSION_KEY] = off_version


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Say which tests were deselected: marked for other server versions, or needing a
    server whose source snapshot is missing."""
    off_version = terminalreporter.config.stash.get(_OFF_VERSION_KEY, [])
    if off_version:
        default = _default_version(terminalreporter.config)
        terminalreporter.write_sep("-", f"liftbridge-client: deselected, not for {default}")
        for line in off_version:
            terminalreporter.write_line(line)
    reasons = terminalreporter.config.stash.get(_DESELECTED_KEY, [])
    if reasons:
        terminalreporter.write_sep("-", "liftbridge-client: deselected, server not provisionable")
        for line in reasons:
            terminalreporter.write_line(line)
        terminalreporter.write_line(
            "(point $LIFTBRIDGE_MASTER_SNAPSHOT at a .tar.gz of the Liftbridge source at that "
            "commit to run them; set $CI to make these fail instead)"
        )


def pytest_collection_finish(session: pytest.Session) -> None:
    """Build Liftbridge before the first test (and its timeout) starts, if a test needs it.

    A cold build takes a minute or two, which would otherwise count against the timeout of
    whichever test first asks for a server. Failures are left for that fixture to raise.
    """
    if session.config.option.collectonly:
        return
    wanted = {name for item in session.items for name in getattr(item, "fixturenames", ())}
    versions: list[str] = []
    if "liftbridge_cluster" in wanted or (
        "liftbridge_server" in wanted and not os.environ.get(ENV_ADDRS)
    ):
        option = _option(session.config)
        docker = False
        with contextlib.suppress(HarnessError):
            if DeploymentKind.DOCKER in {
                server_kind(option, os.environ),
                cluster_kind(option, os.environ),
            }:
                from liftbridge_client.testing._docker_images import ensure_images

                ensure_images()  # builds the images (and a static Liftbridge) when missing
                docker = True
        if not docker:
            versions.append(_default_version(session.config))
    for item in session.items:
        versions += _marker_versions(item, "liftbridge_version") or []
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    for version in dict.fromkeys(versions):
        if not liftbridge_needs_build(version):
            continue
        if reporter is not None:
            reporter.write_line(
                f"liftbridge-client: building Liftbridge {version} with Go "
                "(once per version; about a minute or two)..."
            )
        with contextlib.suppress(HarnessError):
            liftbridge_binary(version)


@pytest.fixture(scope="session")
def liftbridge_server_version(pytestconfig: pytest.Config) -> str:
    """The server version ``liftbridge_server`` and ``liftbridge_cluster`` run."""
    return _default_version(pytestconfig)


@pytest.fixture(scope="session")
def liftbridge_server(
    tmp_path_factory: pytest.TempPathFactory,
    pytestconfig: pytest.Config,
    liftbridge_server_version: str,
) -> Iterator[Deployment]:
    """One Liftbridge node with embedded NATS for the session (or external servers)."""
    kind = server_kind(_option(pytestconfig), os.environ)
    if kind is DeploymentKind.DOCKER:
        _docker_runs_the_pinned_version(liftbridge_server_version)
        with DockerSingleNode() as container:
            yield container
        return
    external = ExternalDeployment.from_env() if kind is DeploymentKind.EXTERNAL else None
    if external is not None:
        yield external.wait_ready()
        return
    base = tmp_path_factory.mktemp("liftbridge-single")
    with SingleNode(base_dir=base, version=liftbridge_server_version) as node:
        yield node


@pytest.fixture(scope="session")
def liftbridge_cluster(
    tmp_path_factory: pytest.TempPathFactory,
    pytestconfig: pytest.Config,
    liftbridge_server_version: str,
) -> Iterator[Cluster | DockerCluster]:
    """A 3-node Liftbridge cluster on a shared NATS server, started on first use."""
    if cluster_kind(_option(pytestconfig), os.environ) is DeploymentKind.DOCKER:
        _docker_runs_the_pinned_version(liftbridge_server_version)
        with DockerCluster() as containers:
            yield containers
        return
    base = tmp_path_factory.mktemp("liftbridge-cluster")
    with Cluster(3, base_dir=base, versions=liftbridge_server_version) as cluster:
        yield cluster


class VersionedDeployments:
    """Deployments of chosen server versions, started on first use, kept until closed."""

    def __init__(self, tmp_path_factory: pytest.TempPathFactory) -> None:
        self._tmp = tmp_path_factory
        self._singles: dict[str, SingleNode] = {}
        self._clusters: dict[tuple[str, ...], Cluster] = {}

    def single(self, version: str) -> SingleNode:
        """A single node of ``version`` (embedded NATS)."""
        name = server_version(version).name
        node = self._singles.get(name)
        if node is None:
            base = self._tmp.mktemp(f"liftbridge-{name}")
            node = self._singles[name] = SingleNode(base_dir=base, version=name).start()
        return node

    def cluster(self, versions: Sequence[str]) -> Cluster:
        """A cluster with one node per entry of ``versions`` (mixed versions allowed)."""
        names = tuple(server_version(v).name for v in versions)
        cluster = self._clusters.get(names)
        if cluster is None:
            base = self._tmp.mktemp("liftbridge-mixed")
            cluster = Cluster(len(names), base_dir=base, versions=names).start()
            self._clusters[names] = cluster
        return cluster

    def deployments(self) -> list[SingleNode | Cluster]:
        """Every deployment started so far."""
        return [*self._singles.values(), *self._clusters.values()]

    def close(self) -> None:
        """Stop every deployment."""
        for deployment in self.deployments():
            deployment.close()
        self._singles.clear()
        self._clusters.clear()


@pytest.fixture(scope="session")
def liftbridge_versions(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VersionedDeployments]:
    """Single nodes and clusters of chosen server versions, for the whole session."""
    deployments = VersionedDeployments(tmp_path_factory)
    try:
        yield deployments
    finally:
        deployments.close()


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
    for deployment in _used_deployments(getattr(request.node, "funcargs", None) or {}):
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


def _used_deployments(funcargs: dict[str, object]) -> list[object]:
    """The deployments of the plugin's fixtures a test used, versioned ones included."""
    used = [funcargs.get(fixture) for fixture in _DEPLOYMENT_FIXTURES]
    versioned = funcargs.get("liftbridge_versions")
    if isinstance(versioned, VersionedDeployments):
        used += versioned.deployments()
    return [d for d in used if d is not None]


def _format_logs(logs: dict[str, str]) -> str:
    return "\n".join(f"----- {name} (last lines) -----\n{text}" for name, text in logs.items())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Attach the tail of each server log to the report of a failed test."""
    report = yield
    if report.failed and report.when in {"setup", "call"}:
        for deployment in _used_deployments(getattr(item, "funcargs", None) or {}):
            if isinstance(deployment, Deployment):
                for name, text in deployment.log_tails(LOG_TAIL_LINES).items():
                    report.sections.append((f"{name} log (last {LOG_TAIL_LINES} lines)", text))
    return report
