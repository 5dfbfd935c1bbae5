"""The documentation site: it builds with --strict, and it is complete.

The same build as `make docs` (mkdocs.yml), once per module into a temporary directory.
Complete means: every page of docs/ is in the navigation, every public name of every
public module is in the API reference, and no link or image on the built site 404s (a
relative link to a repository file outside docs/ works in the clone but not on the site).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import zlib
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import griffe
import pytest
from mkdocs.utils.yaml import yaml_load

ROOT = Path(__file__).resolve().parents[2]

# The public modules whose names the reference must show: the package, its public
# modules and subpackages. liftbridge_client.cli is the `liftbridge` command, documented
# as commands on docs/cli.md, not as Python names.
NOT_IN_THE_REFERENCE = {"liftbridge_client.cli"}


@pytest.fixture(scope="module")
def built(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[subprocess.CompletedProcess[str], Path]:
    site = tmp_path_factory.mktemp("docs") / "site"
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        env=dict(os.environ, NO_MKDOCS_2_WARNING="1"),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    return result, site


@pytest.fixture
def site(built: tuple[subprocess.CompletedProcess[str], Path]) -> Path:
    # --strict still writes the pages before it aborts: the checks below run on them, so
    # one failing build reports every kind of defect at once.
    _, site = built
    if not (site / "index.html").exists():
        pytest.fail(f"mkdocs build wrote no site:\n{built[0].stderr[-5000:]}")
    return site


def test_docs_site_builds_strict_with_the_api_reference(
    built: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    result, site = built
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stderr[-5000:]}"
    client = (site / "reference" / "client" / "index.html").read_text()
    # Generated from the docstrings: the methods, with their documentation.
    for anchor in ("liftbridge_client.Client.publish", "liftbridge_client.Subscription.next"):
        assert f'id="{anchor}"' in client, anchor
    assert "Publish one message to a stream and wait for its ack." in client
    errors_ref = (site / "reference" / "errors" / "index.html").read_text()
    assert 'id="liftbridge_client.errors.CursorsDisabledError"' in errors_ref
    assert (site / "errors" / "index.html").exists()
    assert (site / "cli" / "index.html").exists()
    benchmarks = (site / "benchmarks" / "index.html").read_text()
    assert 'src="../benchmarks.png"' in benchmarks
    assert (site / "benchmarks.png").stat().st_size > 10_000


def _nav_pages(node: Any) -> Iterator[str]:
    if isinstance(node, str):
        if not re.match(r"^[a-z][a-z0-9+.-]*:", node):  # not an external URL
            yield node
    elif isinstance(node, list):
        for item in node:
            yield from _nav_pages(item)
    elif isinstance(node, dict):
        for value in node.values():
            yield from _nav_pages(value)


def test_every_docs_page_is_in_the_nav() -> None:
    config = yaml_load((ROOT / "mkdocs.yml").read_text())  # with mkdocs' !ENV and !relative
    docs = ROOT / config.get("docs_dir", "docs")
    pages = {p.relative_to(docs).as_posix() for p in docs.rglob("*.md")}
    in_nav = set(_nav_pages(config["nav"]))
    assert sorted(pages - in_nav) == [], "pages of docs/ missing from mkdocs.yml's nav"
    assert sorted(in_nav - pages) == [], "nav entries naming no page of docs/"
    # And mkdocs itself fails --strict on a page left out (rather than an INFO line).
    assert config["validation"]["omitted_files"] == "warn"


def _inventory(site: Path) -> list[str]:
    """The objects the API reference documents: objects.inv, as mkdocstrings writes it."""
    data = (site / "objects.inv").read_bytes()
    header, body = data.split(b"\n", 4)[:4], data.split(b"\n", 4)[4]
    assert header[0] == b"# Sphinx inventory version 2"
    return [line.split(" ", 1)[0] for line in zlib.decompress(body).decode().splitlines()]


def _public_modules(package: griffe.Module) -> Iterator[griffe.Module]:
    yield package
    for name, member in package.members.items():
        if name.startswith("_") or not isinstance(member, griffe.Module):
            continue
        yield from _public_modules(member)


def test_every_public_name_is_in_the_api_reference(site: Path) -> None:
    # Statically (griffe, as mkdocstrings reads the code): nothing is imported, so the
    # spark module needs no JVM and a module that fails to import still gets checked.
    package = griffe.load("liftbridge_client", search_paths=[str(ROOT)], resolve_aliases=True)
    assert isinstance(package, griffe.Module)
    documented: set[str] = set()
    for path in _inventory(site):
        documented.add(path)
        try:
            obj = package if path == package.path else package[path.split(".", 1)[1]]
            documented.add(obj.canonical_path)
        except (KeyError, griffe.AliasResolutionError, griffe.CyclicAliasError):
            pass
    missing: list[str] = []
    checked: list[str] = []
    for module in _public_modules(package):
        parent = module.parent.path if module.parent is not None else None
        if module.path in NOT_IN_THE_REFERENCE or parent in NOT_IN_THE_REFERENCE:
            continue
        checked.append(module.path)
        for name in (str(n) for n in module.exports or ()):
            if name.startswith("__"):
                continue  # __version__: not an API object
            target = module[name]
            path = target.canonical_path if target.is_alias else target.path
            if f"{module.path}.{name}" not in documented and path not in documented:
                missing.append(f"{module.path}.{name}")
    for needed in (
        "liftbridge_client",
        "liftbridge_client.exactly_once",
        "liftbridge_client.spark",
        "liftbridge_client.testing",
        "liftbridge_client.groups",
        "liftbridge_client.activity",
        "liftbridge_client.tracing",
    ):
        assert needed in checked
    assert not missing, "absent from the API reference (docs/reference/): " + ", ".join(missing)


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.targets: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name in ("href", "src") and value:
                self.targets.append(value)


def broken_site_links(site: Path) -> list[str]:
    """Relative href/src of every built page whose file does not exist on the site."""
    broken = []
    for page in sorted(site.rglob("*.html")):
        parser = _Links()
        parser.feed(page.read_text(encoding="utf-8"))
        for target in parser.targets:
            parts = urlsplit(target)
            if parts.scheme or parts.netloc or not parts.path:
                continue  # a URL elsewhere, or an anchor on this page
            base = site if parts.path.startswith("/") else page.parent
            resolved = (base / unquote(parts.path).lstrip("/")).resolve()
            if resolved.is_dir():
                resolved /= "index.html"
            if not resolved.is_file() or site.resolve() not in resolved.parents:
                broken.append(f"{page.relative_to(site)}: {target}")
    return broken


def test_no_link_on_the_built_site_is_broken(site: Path) -> None:
    assert broken_site_links(site) == []


def test_the_link_crawler_finds_a_link_to_a_repository_file(tmp_path: Path) -> None:
    # What consumer-groups.md had: ../examples/x.py exists in the clone, not on the site.
    (tmp_path / "page").mkdir()
    (tmp_path / "page" / "index.html").write_text(
        '<a href="../other/">ok</a> <a href="#top">ok</a> <a href="https://x.invalid/">ok</a>'
        '<img src="../img.png"> <a href="../../examples/consumer_group.py">broken</a>'
        '<a href="../gone/#x">broken</a>'
    )
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "index.html").write_text("")
    (tmp_path / "img.png").write_bytes(b"")
    assert broken_site_links(tmp_path) == [
        "page/index.html: ../../examples/consumer_group.py",
        "page/index.html: ../gone/#x",
    ]


def test_rest_docstrings_become_markdown() -> None:
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from griffe_docstrings import markdown_docstring
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    text = (
        "Uses :class:`~pkg.mod.Thing` and :func:`pkg.run`, for example::\n"
        "\n"
        "    async with x:\n"
        "        pass\n"
        "\n"
        "Then more text. A line with :: inside stays."
    )
    assert markdown_docstring(text) == (
        "Uses `Thing` and `pkg.run`, for example:\n"
        "\n"
        "```python\n"
        "async with x:\n"
        "    pass\n"
        "```\n"
        "\n"
        "Then more text. A line with :: inside stays."
    )
    # Not Python (the tree in errors.py): a text block.
    assert markdown_docstring("The tree::\n\n    A\n    └── B\n") == (
        "The tree:\n\n```text\nA\n└── B\n```\n"
    )


def test_broken_links_are_found_and_repository_files_are_not_broken(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from mkdocs_hooks import broken_links
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    docs = ROOT / "docs"
    text = (
        "[a](quickstart.md) [b](../examples/quickstart.py) [c](missing.md#x) "
        "[d](https://example.invalid/x) [e](#local) [f](reference/client.md#top)\n"
        "```console\n[g](inside-code.md)\n```\n[h](../nope/file.py)"
    )
    assert broken_links(text, docs) == ["missing.md#x", "../nope/file.py"]


PRIVATE_TYPES = (
    "MetadataCache",
    "BrokerPool",
    "FeatureDetector",
    "SubscribeArgs",
    "PublishOptions",
)


@pytest.mark.parametrize(
    ("page", "anchor"),
    [
        ("client", "liftbridge_client.Client.publish"),
        ("client", "liftbridge_client.Client.subscribe"),
        ("client", "liftbridge_client.Subscription"),
        ("groups", "liftbridge_client.groups.Consumer"),
        ("activity", "liftbridge_client.activity.ActivityStream"),
    ],
)
def test_reference_signatures_show_no_private_types(site: Path, page: str, anchor: str) -> None:
    """The reference shows what a user passes: one signature per publish verb with its
    keywords, and no constructor for objects only the client makes (0.2 showed
    `Consumer(metadata: MetadataCache, pool: BrokerPool, ...)`)."""
    text = (site / "reference" / page / "index.html").read_text()
    start = text.index(f'id="{anchor}"')
    entry = text[start : start + 8000]
    heading = re.sub(r"<[^>]+>", " ", entry.split("doc-contents", 1)[0])
    for private in PRIVATE_TYPES:
        assert private not in heading, f"{anchor}: {private} in its signature"
    if anchor.endswith(".publish"):
        assert "ack_wait" in heading
        assert len(re.findall(r"\bpublish\s*\(", heading)) == 1  # no overloads shown
