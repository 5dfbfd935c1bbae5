"""Reverse reads on servers that ignore ``SubscribeRequest.reverse`` (v1.9.0 and older).

Such a server streams forward from the start offset and then waits for new messages, so
asking it for a reverse read yields the wrong order and never ends. The emulation reads
forward windows instead, from the newest offset backwards: each window is a forward
subscription with a start and a stop offset (it ends by itself), and its messages are
yielded newest first. The result is what a server that honours the field sends: offsets
``top``, ``top - 1``, ... down to the oldest, then a clean end.

`windows` (pure) plans the windows; `ReverseReader` reads them. Stop offsets must exist:
on compacted streams, where offsets can be missing, use a server that honours reverse.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Iterator
from types import TracebackType
from typing import Protocol

from liftbridge_client.models import Message

log = logging.getLogger(__name__)


class Window(Protocol):
    """What the reader needs of a window's forward subscription (a `Subscription`)."""

    async def __aenter__(self) -> object: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...

    def __aiter__(self) -> AsyncIterator[Message]: ...

    async def close(self) -> None: ...


__all__ = ["WINDOW", "ReverseReader", "windows"]

WINDOW = 512
"""Messages per forward window: one Subscribe call (and that many messages held) each."""


def windows(top: int, oldest: int, size: int = WINDOW) -> Iterator[tuple[int, int]]:
    """``(start, stop)`` offset pairs (both inclusive) from ``top`` down to ``oldest``."""
    if size < 1:
        raise ValueError(f"window size must be >= 1, got {size}")
    high = top
    while high >= oldest:
        low = max(oldest, high - size + 1)
        yield low, high
        high = low - 1


class ReverseReader:
    """Messages from ``top`` down to ``oldest``, newest first, one window at a time.

    ``open_window(start, stop)`` makes the forward subscription of a window.
    """

    def __init__(
        self,
        open_window: Callable[[int, int], Window],
        top: int,
        oldest: int,
        *,
        size: int = WINDOW,
    ) -> None:
        self._open = open_window
        self._plan = windows(top, oldest, size)
        self._window: tuple[int, int] | None = None  # the window being read
        self._buffer: list[Message] = []
        self._current: Window | None = None
        self._closed = False

    async def next(self) -> Message | None:
        """The next message (lower offset than the last), or None after the oldest.

        A caller cancelled mid-window (a read timeout) loses nothing: the next call reads
        that window again from its start.
        """
        while not self._buffer:
            if self._closed:
                return None
            if self._window is None:
                self._window = next(self._plan, None)
                if self._window is None:
                    return None
            self._buffer = await self._read(*self._window)
            self._window = None
        return self._buffer.pop()

    async def _read(self, start: int, stop: int) -> list[Message]:
        log.debug("reverse emulation: reading window [%d, %d]", start, stop)
        sub = self._current = self._open(start, stop)
        try:
            async with sub:
                return [message async for message in sub]
        finally:
            self._current = None

    async def close(self) -> None:
        """Stop: a window being read ends at once. Idempotent."""
        self._closed = True
        self._buffer.clear()
        if self._current is not None:
            await self._current.close()
