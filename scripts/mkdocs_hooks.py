"""mkdocs hooks for the docs site (mkdocs.yml ``hooks``).

Warns for every relative link of a page whose target does not exist on disk, so
``--strict`` fails on it. mkdocs reports a link to a file outside docs/ as well (it
exists in the clone but not on the site); tests/unit/test_docs_site.py also crawls the
built site for links that 404.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

__all__ = ["broken_links", "on_page_markdown"]

log = logging.getLogger("mkdocs.hooks.links")

_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)


def broken_links(markdown: str, page_dir: Path) -> list[str]:
    """Relative link targets of ``markdown`` (outside code) that do not exist on disk."""
    text = _FENCE.sub("", markdown)
    broken = []
    for target in _LINK.findall(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith(("#", "/")):
            continue  # a URL, an anchor on the page, or an absolute path
        path = target.split("#", 1)[0]
        if path and not (page_dir / path).exists():
            broken.append(target)
    return broken


def on_page_markdown(markdown: str, *, page: Any, **kwargs: Any) -> str:
    source = page.file.abs_src_path
    if source:
        for target in broken_links(markdown, Path(source).parent):
            log.warning("%s: broken link %s", page.file.src_path, target)
    return markdown
