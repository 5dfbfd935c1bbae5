"""A griffe extension for the docs site: the docstrings' reST habits, as Markdown.

The package's docstrings are read in a terminal as often as on the site, so they use
Sphinx roles (``:class:`~x.Y```) and ``::`` literal blocks, and name a docs page by its
path (``docs/compatibility.md``). mkdocstrings renders Markdown: roles become code spans,
literal blocks fenced code, and a page's path a link to that page of the site (the
reference pages are docs/reference/*.md, so ``../compatibility.md``). mkdocs.yml loads
this file through the python handler's ``extensions``.
"""

from __future__ import annotations

import ast
import re
import textwrap
from typing import Any

import griffe

__all__ = ["ReSTToMarkdown", "markdown_docstring"]

_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|data|mod|attr|exc|obj):`(~?)([^`]+)`")


def _role(match: re.Match[str]) -> str:
    tilde, target = match.groups()
    return f"`{target.rsplit('.', 1)[-1] if tilde else target}`"


def _language(code: str) -> str:
    """``python`` for code that compiles (top-level await allowed), else ``text``."""
    try:
        compile(code, "<docstring>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    except SyntaxError:
        return "text"
    return "python"


# docs/<page>.md, optionally with an #anchor, in backticks or not; not inside a word or
# a longer path (tests/docs/x.md).
_PAGE = re.compile(r"(?<![\w/.-])(`{0,2})docs/([a-z0-9-]+)\.md(#[\w-]+)?\1(?![\w/])")


def _page_link(match: re.Match[str]) -> str:
    _, page, anchor = match.groups()
    return f"[{page.replace('-', ' ')}](../{page}.md{anchor or ''})"


def markdown_docstring(text: str) -> str:
    """``text`` with Sphinx roles as code spans, ``::`` literal blocks fenced and docs
    page paths as links to the pages."""
    lines = _PAGE.sub(_page_link, _ROLE.sub(_role, text)).splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if not line.rstrip().endswith("::"):
            out.append(line)
            continue
        # The block: after blank lines, the lines indented deeper than the "::" line.
        base = len(line) - len(line.lstrip())
        j = i
        while j < len(lines) and not lines[j].strip():
            j += 1
        block: list[str] = []
        while j < len(lines) and (
            not lines[j].strip() or len(lines[j]) - len(lines[j].lstrip()) > base
        ):
            block.append(lines[j])
            j += 1
        while block and not block[-1].strip():
            block.pop()
        if not block:
            out.append(line)
            continue
        stripped = line.rstrip()[:-2].rstrip()
        if stripped.strip():
            out.append(stripped + ":")
        body = textwrap.dedent("\n".join(block))
        out += ["", " " * base + "```" + _language(body)]
        out += [" " * base + b if b else "" for b in body.splitlines()]
        out += [" " * base + "```", ""]
        i = j
    return "\n".join(out)


class ReSTToMarkdown(griffe.Extension):
    """Rewrites every docstring with `markdown_docstring`."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = markdown_docstring(obj.docstring.value)
