"""The package as users get it: the wheel, installed with the `testing` extra into a fresh
virtualenv, runs a user's test file with the plugin's single-node and cluster fixtures.

The checkout is never on that interpreter's path, and neither is this project's .venv (its
nats-server on PATH would hide a missing one): what the extra brings is all there is. A
user who did this before the extra existed got `liftbridge_server` working and
`liftbridge_cluster` failing with "nats-server not found ... install the dev extra".
The Liftbridge binary comes from the already-provisioned cache ($LIFTBRIDGE_CLIENT_CACHE),
so nothing is built here; pip's cache keeps the install to seconds.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(400)]

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
    argv: list[str], *, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, check=False, timeout=300
    )
    assert result.returncode == 0, (
        f"{' '.join(argv)} failed ({result.returncode}):\n"
        f"{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    )
    return result


def test_wheel_with_the_testing_extra_runs_the_fixtures_in_a_fresh_venv(tmp_path: Path) -> None:
    cache = Path(os.environ.get("LIFTBRIDGE_CLIENT_CACHE") or ROOT / ".servers" / "cache")
    if not (cache / "liftbridge-v1.9.0" / "bin" / "liftbridge").is_file():
        pytest.fail(f"no provisioned Liftbridge in {cache}: run `make servers` first")

    wheels = tmp_path / "wheels"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(ROOT)])
    (wheel,) = wheels.glob("liftbridge_client-*.whl")

    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)])
    python = venv / "bin" / "python"
    _run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
          f"{wheel}[testing]"])  # fmt: skip

    project = tmp_path / "user-project"
    project.mkdir()
    for name, text in USER_FILES.items():
        (project / name).write_text(text)
    # Only the fresh venv and the system on PATH (go for a build, were one needed); none
    # of the variables that point the harness or Python at this checkout.
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
    result = _run(
        [str(python), "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rA"],
        cwd=project,
        env=env,
    )
    assert "3 passed" in result.stdout, result.stdout[-4000:]
