"""The documentation site builds with --strict: a broken link or API reference fails here.

The same build as `make docs` (mkdocs.yml), into a temporary directory.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_docs_site_builds_strict_with_the_api_reference(tmp_path: Path) -> None:
    site = tmp_path / "site"
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        env=dict(os.environ, NO_MKDOCS_2_WARNING="1"),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stderr[-5000:]}"
    client = (site / "reference" / "client" / "index.html").read_text()
    # Generated from the docstrings: the methods, with their documentation.
    for anchor in ("liftbridge_client.Client.publish", "liftbridge_client.Subscription.next"):
        assert f'id="{anchor}"' in client, anchor
    assert "Publish one message and wait for its ack." in client
    errors_ref = (site / "reference" / "errors" / "index.html").read_text()
    assert 'id="liftbridge_client.errors.CursorsDisabledError"' in errors_ref
    assert (site / "errors" / "index.html").exists()
    assert (site / "cli" / "index.html").exists()
    benchmarks = (site / "benchmarks" / "index.html").read_text()
    assert 'src="../benchmarks.png"' in benchmarks
    assert (site / "benchmarks.png").stat().st_size > 10_000


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
