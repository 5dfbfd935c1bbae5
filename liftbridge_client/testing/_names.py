"""Unique stream names and subjects, so tests never collide.

Stream subjects are not namespaced by Liftbridge: two streams on one NATS server with the
same subject both receive its messages, even across clusters. Every name and subject made
here carries a random suffix.
"""

from __future__ import annotations

import re
import uuid
from typing import NamedTuple

__all__ = ["StreamName", "StreamNames"]

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")
_MAX_LABEL = 40


class StreamName(NamedTuple):
    """A stream name and its NATS subject."""

    name: str
    subject: str


def _slug(text: str) -> str:
    return _UNSAFE.sub("-", text).strip("-")[:_MAX_LABEL].strip("-")


class StreamNames:
    """Makes unique ``(name, subject)`` pairs with a readable prefix (e.g. the test name).

    ``names("orders")`` gives ``StreamName("test_x-orders-1f2e3d4c5b6a", "lbtest.test_x.
    orders.1f2e3d4c5b6a")``: names and subjects use only ``[A-Za-z0-9_-]`` (names become
    directory names on the server; ``.`` separates subject tokens).
    """

    def __init__(self, prefix: str = "lbtest") -> None:
        """Use ``prefix`` (sanitised) at the start of every name."""
        self.prefix = _slug(prefix) or "lbtest"

    def __call__(self, label: str = "") -> StreamName:
        """Return a fresh pair; ``label`` (optional) tells streams of one test apart."""
        token = uuid.uuid4().hex[:12]
        parts = [self.prefix, _slug(label), token]
        kept = [part for part in parts if part]
        return StreamName(name="-".join(kept), subject="lbtest." + ".".join(kept))
