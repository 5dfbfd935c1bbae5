"""Waiting for a condition in tests, instead of sleeping and hoping."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

__all__ = ["wait_until"]

_POLL = 0.002  # seconds between checks: short next to any server round trip


async def wait_until(
    predicate: Callable[[], object], *, timeout: float = 5.0, what: str = "the condition"
) -> None:
    """Return as soon as ``predicate()`` is true; `TimeoutError` naming ``what`` after ``timeout``.

    For state that has no event to await (another library's internals, a server's).
    """
    try:
        async with asyncio.timeout(timeout):
            while not predicate():  # noqa: ASYNC110 - there is no event to wait on
                await asyncio.sleep(_POLL)
    except TimeoutError:
        raise TimeoutError(f"{what} did not happen within {timeout}s") from None
