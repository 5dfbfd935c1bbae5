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


# ---- What a reader sees: no swallowed tags, no paths to open, code that fits ----

# The elements the built site may contain (HTML and the SVG of the theme's icons). Any
# other start tag is text that Markdown passed on as HTML: `array<struct<key: ...>>`
# outside backticks showed as "array<struct>" (the rest was read as a tag).
KNOWN_TAGS = frozenset(
    [
        "a",
        "abbr",
        "article",
        "aside",
        "b",
        "blockquote",
        "body",
        "br",
        "button",
        "caption",
        "circle",
        "cite",
        "code",
        "col",
        "colgroup",
        "dd",
        "del",
        "details",
        "div",
        "dl",
        "dt",
        "em",
        "figcaption",
        "figure",
        "footer",
        "form",
        "g",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "head",
        "header",
        "hr",
        "html",
        "i",
        "img",
        "input",
        "ins",
        "kbd",
        "label",
        "li",
        "line",
        "link",
        "main",
        "mark",
        "meta",
        "nav",
        "ol",
        "option",
        "p",
        "path",
        "polygon",
        "pre",
        "rect",
        "s",
        "samp",
        "script",
        "section",
        "select",
        "small",
        "source",
        "span",
        "strong",
        "style",
        "sub",
        "summary",
        "sup",
        "svg",
        "table",
        "tbody",
        "td",
        "template",
        "textarea",
        "tfoot",
        "th",
        "thead",
        "title",
        "tr",
        "u",
        "ul",
        "use",
        "var",
    ]
)
_VOID = frozenset(
    [
        "area",
        "base",
        "br",
        "col",
        "embed",
        "hr",
        "img",
        "input",
        "link",
        "meta",
        "source",
        "track",
        "wbr",
    ]
)
# A docs page by its repository path: on the site it is a link to the page.
_DOCS_PATH = re.compile(r"(?<![\w/.-])docs/[\w-]+\.md\b")
# This repository's tests: a site reader cannot open them; only contributor notes
# (an admonition or details block of type "contributors") cite them.
_TESTS_PATH = re.compile(r"(?<![\w/.-])tests/[\w./-]*")
# At a 1280 px window a code block shows 80 characters (measured in headless Chromium:
# the index's 82-character install line was cut at its 81st).
CODE_WIDTH = 80


class _Reader(HTMLParser):
    """The text of a page as a reader sees it, with where each piece stands."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[tuple[str, str]] = []  # (tag, class attribute)
        self.unknown: list[str] = []
        self.text: list[tuple[str, bool, bool, bool]] = []  # text, pre, link, contributors
        self.python_lines: list[str] = []
        self._python: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in KNOWN_TAGS:
            self.unknown.append(tag)
        if tag in _VOID:
            return
        classes = dict(attrs).get("class") or ""
        self.stack.append((tag, classes))
        if tag == "pre" and any("language-python" in c for _, c in self.stack):
            self._python = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "pre" and self._python is not None:
            self.python_lines += "".join(self._python).splitlines()
            self._python = None
        for i in range(len(self.stack) - 1, -1, -1):
            if self.stack[i][0] == tag:
                del self.stack[i:]
                break

    def handle_data(self, data: str) -> None:
        if self._python is not None:
            self._python.append(data)
        tags = [t for t, _ in self.stack]
        contributors = any("contributors" in c.split() for _, c in self.stack)
        self.text.append((data, "pre" in tags, "a" in tags, contributors))


def read_page(html: str) -> _Reader:
    reader = _Reader()
    reader.feed(html)
    return reader


def reader_defects(site: Path) -> list[str]:
    """What a reader of the built site would trip on, one line per defect."""
    found: list[str] = []
    for page in sorted(site.rglob("*.html")):
        name = page.relative_to(site).as_posix()
        reader = read_page(page.read_text(encoding="utf-8"))
        found += [f"{name}: <{tag}> is not HTML: text read as a tag" for tag in reader.unknown]
        for text, pre, link, contributors in reader.text:
            if pre or link:
                continue
            found += [f"{name}: {p} (link the page)" for p in _DOCS_PATH.findall(text)]
            if not contributors:
                found += [f"{name}: {p} (not on the site)" for p in _TESTS_PATH.findall(text)]
        found += [
            f"{name}: a Python line of {len(line)} characters (over {CODE_WIDTH}): {line!r}"
            for line in reader.python_lines
            if len(line) > CODE_WIDTH
        ]
    return found


def test_the_site_shows_no_raw_tags_no_repository_paths_and_code_that_fits(site: Path) -> None:
    assert reader_defects(site) == []


def test_the_reader_check_finds_each_defect(tmp_path: Path) -> None:
    long = "x = " + "1" * 80
    (tmp_path / "page.html").write_text(
        "<p>headers: array<struct<key: string, value: binary>></p>"
        "<p>see docs/compatibility.md and <code>tests/unit/test_x.py</code></p>"
        '<p><a href="../compatibility/">docs/compatibility.md</a></p>'
        '<div class="admonition contributors"><p>tests/faults/ for developers</p></div>'
        '<details class="contributors"><summary>x</summary><p>tests/unit</p></details>'
        "<pre><code>pytest tests/unit docs/testing.md</code></pre>"
        f'<div class="language-python highlight"><pre><span></span><code>{long}\nok = 1'
        "</code></pre></div><p>after tests/integration</p>"
    )
    assert reader_defects(tmp_path) == [
        "page.html: <struct<key:> is not HTML: text read as a tag",
        "page.html: docs/compatibility.md (link the page)",
        "page.html: tests/unit/test_x.py (not on the site)",
        "page.html: tests/integration (not on the site)",
        f"page.html: a Python line of 84 characters (over 80): {long!r}",
    ]
