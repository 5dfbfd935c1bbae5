"""`make release-check`: the release as users get it, checked before the tag is made.

1. The version agrees everywhere: ``liftbridge_client/_version.py`` (the one source),
   CHANGELOG.md's top version section and the git tag ``v<version>`` to be made. A
   final version needs its own dated section on top (an "Unreleased" heading above it
   must be empty) and a tag that does not exist yet or names this commit; a development
   version (``X.Y.Z.devN``) needs only a released section older than it, and makes no tag.
2. ``python -m build``: the sdist, then the wheel built from that sdist.
3. ``twine check --strict`` on both; the long description (README.md, with its relative
   links unlinked for the package index by hatch-fancy-pypi-readme) has no relative link
   or image left, which would 404 there; the wheel carries the server patches exactly as
   ``patches/liftbridge`` has them.
4. The sdist installed into a fresh virtualenv (with the extras the unit tests use), and
   its own ``tests/unit`` run against that install. What those tests read outside the
   package is given to them as a clone has it: the sdist's ``bench`` and ``scripts``
   (on PYTHONPATH, without the source package) and ``../shared`` beside the unpacked
   sdist (the upstream wire schema test_proto.py compares with). Every module of the
   package the test process imported must come from the venv (a plugin lists them at the
   end of the session). Two test files work on the unpacked source tree by design, in
   subprocesses started there: test_docs_site.py builds the sdist's docs site with
   mkdocs (which reads the package's source), and test_proto.py checks that the generated
   code in the sdist matches proto/api.proto.

Prints each step's duration; exits 1 with the reason on the first failure.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time
import zipfile
from dataclasses import dataclass
from email.parser import Parser
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VERSION_FILE = ROOT / "liftbridge_client" / "_version.py"
CHANGELOG = ROOT / "CHANGELOG.md"
PATCHES = ROOT / "patches" / "liftbridge"
PACKAGED_PATCHES = "liftbridge_client/testing/server_patches"
EXAMPLES_SCALE = "0.2"  # LIFTBRIDGE_TEST_EXAMPLES for the sdist's unit tests

# The extras `make venv` installs: what tests/unit imports (hypothesis, mkdocs, pyspark...).
TEST_EXTRAS = "dev,cli,docs,otel,spark,extras-test"

_VERSION = re.compile(r'^__version__\s*=\s*"([^"]+)"', re.MULTILINE)
_RELEASE = re.compile(r"^(\d+)\.(\d+)\.(\d+)$")
_DEV = re.compile(r"^(\d+)\.(\d+)\.(\d+)\.dev\d+$")
_SECTION = re.compile(r"^## (\S+)(?: \((\d{4}-\d{2}-\d{2})\))?\s*$")
# A Markdown link or image whose target is relative (no scheme, not an anchor).
_RELATIVE_LINK = re.compile(r"!?\[[^\]]*\]\((?![a-zA-Z][a-zA-Z0-9+.-]*:|#)([^)\s]+)[^)]*\)")


_ANSI = re.compile(r"\x1b\[[0-9;]*m")  # twine colours its verdicts


class CheckFailed(Exception):
    """A release check that did not pass; the message says which and why."""


@dataclass(frozen=True)
class Section:
    title: str
    date: str | None
    body: str


def version_of(text: str) -> str:
    found = _VERSION.search(text)
    if found is None:
        raise CheckFailed(f'no __version__ = "..." line in {VERSION_FILE}')
    return found.group(1)


def sections(changelog: str) -> list[Section]:
    """The ``## `` sections of CHANGELOG.md, in order, with their text."""
    found: list[Section] = []
    title: str | None = None
    date: str | None = None
    body: list[str] = []
    for line in changelog.splitlines():
        if line.startswith("## "):
            if title is not None:
                found.append(Section(title, date, "\n".join(body).strip()))
            heading = _SECTION.match(line)
            if heading is None:
                raise CheckFailed(f"CHANGELOG.md: heading {line!r} is not '## X.Y.Z (YYYY-MM-DD)'")
            title, date, body = heading.group(1), heading.group(2), []
        elif title is not None:
            body.append(line)
    if title is not None:
        found.append(Section(title, date, "\n".join(body).strip()))
    return found


def _numbers(version: str) -> tuple[int, int, int]:
    found = _RELEASE.match(version) or _DEV.match(version)
    assert found is not None
    major, minor, patch = found.groups()
    return int(major), int(minor), int(patch)


def check_changelog(version: str, changelog: str) -> str | None:
    """Check the version against CHANGELOG.md; the tag to make, or None (a dev version)."""
    if not (_RELEASE.match(version) or _DEV.match(version)):
        raise CheckFailed(f"version {version!r} is neither X.Y.Z nor X.Y.Z.devN")
    found = sections(changelog)
    if found and found[0].title == "Unreleased":
        unreleased, released = found[0], found[1:]
    else:
        unreleased, released = None, found
    if any(s.title == "Unreleased" for s in released):
        raise CheckFailed("CHANGELOG.md: 'Unreleased' must be the top section, once")
    if not released:
        raise CheckFailed("CHANGELOG.md has no released version section")
    previous: Section | None = None
    for section in released:
        if not _RELEASE.match(section.title) or section.date is None:
            raise CheckFailed(
                f"CHANGELOG.md: section {section.title!r} is not '## X.Y.Z (YYYY-MM-DD)'"
            )
        if previous is not None and not (
            _numbers(section.title) < _numbers(previous.title)
            and section.date <= (previous.date or "")
        ):
            raise CheckFailed(
                f"CHANGELOG.md: {section.title} ({section.date}) is below "
                f"{previous.title} ({previous.date}): versions and dates go newest first"
            )
        previous = section
    top = released[0]
    if _DEV.match(version):
        if not _numbers(top.title) < _numbers(version):
            raise CheckFailed(
                f"development version {version} is not above CHANGELOG.md's top "
                f"released section {top.title}"
            )
        return None
    if top.title != version:
        raise CheckFailed(
            f"version {version} (liftbridge_client/_version.py) but CHANGELOG.md's top "
            f"released section is {top.title}"
        )
    if unreleased is not None and unreleased.body:
        raise CheckFailed(
            f"CHANGELOG.md's 'Unreleased' section has entries, but version {version} is a "
            "release: move them into its section, or make the version X.Y.Z.devN"
        )
    return f"v{version}"


def _git(*args: str) -> str:
    result = subprocess.run(
        ["git", *args], cwd=ROOT, capture_output=True, text=True, check=False, timeout=60
    )
    if result.returncode != 0:
        raise CheckFailed(f"git {' '.join(args)} failed: {result.stderr.strip()}")
    return result.stdout.strip()


def check_tag(version: str, tag: str | None) -> str:
    """The tag must be newer than every release tag, and new or on this commit."""
    head = _git("rev-parse", "HEAD")
    tags = [t for t in _git("tag", "--list", "v*").splitlines() if _RELEASE.match(t[1:])]
    newer = [t for t in tags if _numbers(t[1:]) > _numbers(version)]
    if newer:
        raise CheckFailed(f"version {version} is older than the tag(s) {', '.join(newer)}")
    if tag is None:
        return f"development version {version}: no tag to make"
    if tag in tags:
        tagged = _git("rev-list", "-n", "1", tag)
        if tagged != head:
            raise CheckFailed(
                f"{tag} already tags {tagged[:12]}, not this commit {head[:12]}: "
                "make the next version"
            )
        return f"{tag} tags this commit {head[:12]}"
    return f"tag to make: {tag} (on {head[:12]})"


def _run(argv: list[str], *, cwd: Path = ROOT, env: dict[str, str] | None = None) -> str:
    result = subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, check=False, timeout=1800
    )
    output = _ANSI.sub("", result.stdout + result.stderr).strip()
    if result.returncode != 0:
        raise CheckFailed(f"`{' '.join(argv)}` exited with {result.returncode}:\n{output[-6000:]}")
    return output


def relative_links(markdown: str) -> list[str]:
    """The relative link and image targets of ``markdown``, outside code blocks."""
    text = re.sub(r"```.*?```", "", markdown, flags=re.DOTALL)
    text = re.sub(r"`[^`\n]*`", "", text)
    return _RELATIVE_LINK.findall(text)


def _platform_suffix() -> str:
    """How a wheel's name ends when it carries a module compiled here (``-linux_x86_64.whl``)."""
    return "-" + sysconfig.get_platform().replace("-", "_").replace(".", "_") + ".whl"


def check_dists(dist: Path, version: str) -> tuple[Path, Path, str]:
    sdists = list(dist.glob("*.tar.gz"))
    wheels = list(dist.glob("*.whl"))
    if len(sdists) != 1 or len(wheels) != 1:
        raise CheckFailed(f"expected one sdist and one wheel in {dist}, found {sdists + wheels}")
    others = sorted(p.name for p in dist.iterdir() if p not in (*sdists, *wheels))
    if others:  # e.g. a build hook's leftovers
        raise CheckFailed(f"the build left more than the sdist and the wheel in {dist}: {others}")
    sdist, wheel = sdists[0], wheels[0]
    for built in (sdist, wheel):
        if f"-{version}" not in built.name:
            raise CheckFailed(f"{built.name} does not carry version {version}")
    twine = _run([sys.executable, "-m", "twine", "check", "--strict", str(sdist), str(wheel)])
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        meta_name = next(n for n in names if n.endswith(".dist-info/METADATA"))
        metadata = Parser().parsestr(zf.read(meta_name).decode())
        if metadata["Version"] != version:
            raise CheckFailed(f"the wheel's metadata says {metadata['Version']}, not {version}")
        description = metadata.get_payload()
        assert isinstance(description, str)
        left = relative_links(description)
        if left:
            raise CheckFailed(f"the package index would show relative links that 404: {left}")
        compiled = [n for n in names if re.fullmatch(r"liftbridge_client/_speedups\..*\.so", n)]
        if len(compiled) != 1 or not wheel.name.endswith(_platform_suffix()):
            raise CheckFailed(
                f"the wheel {wheel.name} should carry the compiled C accelerator "
                f"(liftbridge_client/_speedups.*.so, from hatch_build.py) and a platform tag; "
                f"it holds {compiled}"
            )
        for patch in sorted(PATCHES.rglob("*.patch")):
            inside = f"{PACKAGED_PATCHES}/{patch.relative_to(PATCHES).as_posix()}"
            if inside not in names or zf.read(inside) != patch.read_bytes():
                raise CheckFailed(f"the wheel lacks {inside} as {patch} has it")
    return sdist, wheel, twine


def test_sdist(sdist: Path, work: Path, version: str) -> str:
    """Install ``sdist`` into a fresh venv and run its tests/unit against that install."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    venv = work / "venv"
    _run([sys.executable, "-m", "venv", str(venv)])
    python = venv / "bin" / "python"
    _run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
          f"{sdist}[{TEST_EXTRAS}]"])  # fmt: skip
    said = _run([str(venv / "bin" / "liftbridge"), "--version"])
    if version not in said:
        raise CheckFailed(f"the installed `liftbridge --version` says {said!r}, not {version}")
    with tarfile.open(sdist) as tar:
        tar.extractall(work, filter="data")
    (source,) = (p for p in work.iterdir() if p.name.startswith("liftbridge_client-"))
    shared = ROOT.parent / "shared"
    if shared.is_dir():
        (work / "shared").symlink_to(shared)
    helpers = work / "helpers"
    helpers.mkdir()
    for name in ("bench", "scripts"):
        (helpers / name).symlink_to(source / name)
    (helpers / "release_check_plugin.py").write_text(_PLUGIN)
    imported = work / "imported.txt"
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env.update(
        PYTHONPATH=str(helpers),
        PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}",
        RELEASE_CHECK_IMPORTED=str(imported),
        # Whether the installed package works, not another search of inputs: the generated
        # tests draw a fifth of their examples (tests/budget.py; make test draws all).
        LIFTBRIDGE_TEST_EXAMPLES=EXAMPLES_SCALE,
    )
    # The venv's pytest script: the unpacked source tree is not on sys.path (python -m
    # would put the working directory first).
    argv = [str(venv / "bin" / "pytest"), "tests/unit", "-p", "no:cacheprovider", "-q"]
    summary = _run([*argv, "-p", "release_check_plugin"], cwd=source, env=env)
    files = imported.read_text().splitlines()
    outside = [f for f in files if not Path(f).is_relative_to(venv)]
    if not files or outside:
        raise CheckFailed(f"the unit tests imported the package from elsewhere: {outside}")
    # pytest's own last line; grpc's C core may log to stderr after it.
    lines = [line for line in summary.splitlines() if re.search(r" passed\b", line)]
    last = lines[-1].strip("= ") if lines else summary.splitlines()[-1]
    return f"{last} ({len(files)} modules of the package, all from the venv)"


# Run in the unit tests' process: where every module of the package it imported came from.
_PLUGIN = """
import os
import sys


def pytest_sessionfinish(session):
    files = [
        getattr(module, "__file__", None) or ""
        for name, module in list(sys.modules.items())
        if name == "liftbridge_client" or name.startswith("liftbridge_client.")
    ]
    with open(os.environ["RELEASE_CHECK_IMPORTED"], "w") as out:
        out.write("\\n".join(sorted(f for f in files if f)))
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, help="build and test in this directory, kept")
    args = parser.parse_args(argv)
    started = time.monotonic()
    step_started = started

    def step(name: str, result: str) -> None:
        nonlocal step_started
        now = time.monotonic()
        print(f"[{now - step_started:6.1f} s] {name}: {result}", flush=True)
        step_started = now

    try:
        version = version_of(VERSION_FILE.read_text())
        tag = check_changelog(version, CHANGELOG.read_text())
        step("version", f"{version}, CHANGELOG.md's top section agrees")
        step("tag", check_tag(version, tag))
        work = args.keep or Path(tempfile.mkdtemp(prefix="release-check-"))
        try:
            dist = work / "dist"
            shutil.rmtree(dist, ignore_errors=True)
            _run([sys.executable, "-m", "build", "--outdir", str(dist), str(ROOT)])
            step("build", ", ".join(sorted(p.name for p in dist.iterdir())))
            sdist, _, twine = check_dists(dist, version)
            step("twine check --strict", " ".join(twine.split()))
            step("sdist: tests/unit from a fresh venv", test_sdist(sdist, work / "sdist", version))
        finally:
            if args.keep is None:
                shutil.rmtree(work, ignore_errors=True)
    except CheckFailed as exc:
        print(f"release-check failed: {exc}", file=sys.stderr)
        return 1
    print(f"release-check passed in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
