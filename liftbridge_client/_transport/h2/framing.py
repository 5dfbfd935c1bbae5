"""gRPC length-prefixed messages over a byte stream (sans-IO).

Each message is a 1-byte compressed flag, a 4-byte big-endian length, then the
bytes. `MessageSplitter` takes the DATA payloads of one call as they come, cut
anywhere, and returns every message completed by each piece in one pass.
"""

from __future__ import annotations

import struct
from typing import Final

from grpc import StatusCode

from liftbridge_client._transport.h2.status import H2RpcError

__all__ = ["DEFAULT_MAX_MESSAGE", "MessageSplitter", "encode_message"]

DEFAULT_MAX_MESSAGE: Final = 64 * 1024 * 1024  # as the grpc.aio channels' receive limit
_HEAD: Final = struct.Struct(">BI")
_unpack_head = _HEAD.unpack_from
_pack_head = _HEAD.pack


def encode_message(payload: bytes) -> bytes:
    """One uncompressed gRPC message."""
    return _pack_head(0, len(payload)) + payload


class MessageSplitter:
    """Cuts a call's DATA bytes into gRPC messages; keeps an incomplete tail.

    A message flagged compressed is refused (this client never offers
    compression, so the server must not send any), and so is one longer than
    ``max_length``: both raise `H2RpcError` and the splitter must not be fed again.
    """

    __slots__ = ("_have", "_max", "_need", "_parts")

    def __init__(self, max_length: int = DEFAULT_MAX_MESSAGE) -> None:
        self._max = max_length
        self._parts: list[bytes] = []  # an incomplete tail, in pieces (no quadratic joins)
        self._have = 0  # bytes in _parts
        self._need = 0  # bytes the message in _parts needs in all (0: its head is not complete)

    @property
    def buffered(self) -> int:
        """Bytes held for a message not complete yet."""
        return self._have

    def feed(self, data: bytes) -> list[bytes]:
        """The messages ``data`` completes, in order."""
        if self._parts:
            self._parts.append(data)
            self._have += len(data)
            if not self._need:
                if self._have < 5:
                    return []
                head = b"".join(self._parts)
                self._parts = [head]
                self._need = self._check(head, 0)
            if self._have < self._need:
                return []
            data = b"".join(self._parts)
            self._parts = []
            self._have = self._need = 0
        out: list[bytes] = []
        size = len(data)
        i = 0
        need = 0
        while size - i >= 5:
            flag, length = _unpack_head(data, i)
            if flag or length > self._max:
                self._check(data, i)
            end = i + 5 + length
            if end > size:
                need = end - i
                break
            out.append(data[i + 5 : end])
            i = end
        if i < size:
            self._parts.append(data[i:] if i else data)
            self._have = size - i
            self._need = need
        return out

    def _check(self, data: bytes, at: int) -> int:
        """The whole size of the message whose head is at ``at``; raise if it is refused."""
        flag: int
        length: int
        flag, length = _unpack_head(data, at)
        if flag == 1:
            raise H2RpcError(
                StatusCode.INTERNAL,
                "the server sent a compressed gRPC message; this client offers no "
                "compression (grpc-accept-encoding) and refuses it",
            )
        if flag:
            raise H2RpcError(StatusCode.INTERNAL, f"bad gRPC message flag {flag:#x}")
        if length > self._max:
            raise H2RpcError(
                StatusCode.RESOURCE_EXHAUSTED,
                f"received message larger than max ({length} vs. {self._max})",
            )
        return 5 + length
