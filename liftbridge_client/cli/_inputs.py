"""Where ``publish`` reads messages from: arguments, files, stdin; lines or whole inputs.

Files and stdin are read in a worker thread, a chunk at a time, so a slow input
(``tail -f log | liftbridge publish ...``) never stalls the event loop and acks
keep flowing while it waits.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import BinaryIO

__all__ = ["messages", "split_key"]

_CHUNK = 1 << 16


async def _chunks(stream: BinaryIO) -> AsyncIterator[bytes]:
    read = getattr(stream, "read1", stream.read)
    while chunk := await asyncio.to_thread(read, _CHUNK):
        yield chunk


async def _lines(stream: BinaryIO) -> AsyncIterator[bytes]:
    rest = b""
    async for chunk in _chunks(stream):
        lines = (rest + chunk).split(b"\n")
        rest = lines.pop()
        for line in lines:
            yield line.removesuffix(b"\r")
    if rest:
        yield rest.removesuffix(b"\r")


async def _whole(stream: BinaryIO) -> bytes:
    return b"".join([chunk async for chunk in _chunks(stream)])


def _open(path: str) -> BinaryIO:
    if path == "-":
        return sys.stdin.buffer
    return Path(path).open("rb")


async def messages(
    values: Sequence[str], files: Sequence[str], *, whole: bool
) -> AsyncIterator[bytes]:
    """Message values: ``values`` first, then each file (``-`` is stdin), by line or whole.

    With neither values nor files, stdin.
    """
    for value in values:
        yield value.encode()
    if not values and not files:
        files = ["-"]
    for path in files:
        stream = _open(path)
        try:
            if whole:
                yield await _whole(stream)
            else:
                async for line in _lines(stream):
                    yield line
        finally:
            if stream is not sys.stdin.buffer:
                stream.close()


def split_key(line: bytes, separator: bytes) -> tuple[bytes | None, bytes]:
    """``key<sep>value`` into ``(key, value)``; a line without the separator has no key."""
    key, sep, value = line.partition(separator)
    if not sep:
        return None, line
    return key, value
