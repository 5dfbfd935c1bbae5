"""scripts/release_check.py (`make release-check`): the version, CHANGELOG.md's top
section and the tag to be made must agree, and the package index must get no relative
link. The build, twine and the sdist's unit tests run in `make release-check` itself."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def load_script() -> ModuleType:
    path = ROOT / "scripts" / "release_check.py"
    spec = importlib.util.spec_from_file_location("release_check_under_test", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


rc = load_script()

RELEASED = """# Changelog

Intro.

## Unreleased

## 0.3.0 (2026-11-28)

- three

## 0.2.0 (2026-11-26)

- two
"""


def test_the_repository_agrees_with_itself() -> None:
    version = rc.version_of((ROOT / "liftbridge_client" / "_version.py").read_text())
    import liftbridge_client

    assert version == liftbridge_client.__version__
    assert rc.check_changelog(version, (ROOT / "CHANGELOG.md").read_text()) in (
        None,
        f"v{version}",
    )


def test_a_release_makes_its_tag() -> None:
    assert rc.check_changelog("0.3.0", RELEASED) == "v0.3.0"
    assert rc.check_changelog("0.3.0", RELEASED.replace("## Unreleased\n\n", "")) == "v0.3.0"


@pytest.mark.parametrize(
    ("version", "changelog", "words"),
    [
        ("0.3.1", RELEASED, "top released section is 0.3.0"),
        ("0.2.0", RELEASED, "top released section is 0.3.0"),
        ("0.3.0", RELEASED.replace("## Unreleased\n", "## Unreleased\n\n- new\n"), "entries"),
        ("0.3.0", RELEASED.replace(" (2026-11-28)", ""), "is not '## X.Y.Z (YYYY-MM-DD)'"),
        ("0.3.0", RELEASED.replace("(2026-11-26)", "(2026-11-29)"), "newest first"),
        ("0.3.0", RELEASED.replace("## 0.2.0", "## 0.4.0"), "newest first"),
        ("0.3", RELEASED, "neither X.Y.Z nor X.Y.Z.devN"),
        ("0.3.0", "# Changelog\n\n## Unreleased\n", "no released version section"),
        ("0.3.0", RELEASED + "\n## Unreleased\n", "top section, once"),
        ("0.3.0", RELEASED.replace("## 0.2.0", "## Version two"), "is not '## X.Y.Z"),
    ],
)
def test_disagreements_fail_with_the_reason(version: str, changelog: str, words: str) -> None:
    with pytest.raises(rc.CheckFailed, match=words.replace("(", r"\(").replace(")", r"\)")):
        rc.check_changelog(version, changelog)


def test_a_development_version_makes_no_tag() -> None:
    unreleased = RELEASED.replace("## Unreleased\n", "## Unreleased\n\n- new\n")
    assert rc.check_changelog("0.3.1.dev0", unreleased) is None
    with pytest.raises(rc.CheckFailed, match="not above"):
        rc.check_changelog("0.3.0.dev0", unreleased)


def test_relative_links_are_found_outside_code() -> None:
    text = (
        "[a](docs/x.md) ![i](img.png) [b](https://x.invalid/y) [c](#here)\n"
        "`[d](in-code.md)`\n```\n[e](in-block.md)\n```\n[f](mailto:a@b.invalid)"
    )
    assert rc.relative_links(text) == ["docs/x.md", "img.png"]


def _git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t.invalid", *args],
        cwd=repo,
        check=True,
        capture_output=True,
    )


def test_the_tag_is_new_or_on_this_commit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "commit", "-q", "--allow-empty", "-m", "one")
    monkeypatch.setattr(rc, "ROOT", tmp_path)
    assert rc.check_tag("0.3.0", "v0.3.0").startswith("tag to make: v0.3.0")
    _git(tmp_path, "tag", "v0.3.0")
    assert rc.check_tag("0.3.0", "v0.3.0").startswith("v0.3.0 tags this commit")
    _git(tmp_path, "commit", "-q", "--allow-empty", "-m", "two")
    with pytest.raises(rc.CheckFailed, match=r"v0\.3\.0 already tags"):
        rc.check_tag("0.3.0", "v0.3.0")
    assert "no tag to make" in rc.check_tag("0.3.1.dev0", None)
    _git(tmp_path, "tag", "v0.4.0")
    with pytest.raises(rc.CheckFailed, match="older than the tag"):
        rc.check_tag("0.3.1.dev0", None)
