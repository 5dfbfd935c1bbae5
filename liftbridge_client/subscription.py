"""Subscriptions: an async iterator over one stream partition.

SKELETON: the interface `client.py` relies on. Implementation pending.
"""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType
from typing import Self, TypedDict

from liftbridge_client._metadata import MetadataCache
from liftbridge_client.models import Message, StartPosition, StopPosition
from liftbridge_client.options import ClientOptions


class SubscribeArgs(TypedDict, total=False):
    start: StartPosition  # default NEW_ONLY
    start_offset: int  # with StartPosition.OFFSET
    start_timestamp_ns: int  # with StartPosition.TIMESTAMP
    start_time_delta: float  # seconds back from now (sets TIMESTAMP)
    stop: StopPosition  # default ON_CANCEL
    stop_offset: int
    stop_timestamp_ns: int
    read_isr_replica: bool
    resume: bool
    reverse: bool


class Subscription:
    def __init__(
        self,
        metadata: MetadataCache,
        options: ClientOptions,
        stream: str,
        partition: int,
        *,
        on_close: Callable[[Subscription], None],
        **kw: object,
    ) -> None:
        self._on_close = on_close

    async def __aenter__(self) -> Self:
        raise NotImplementedError

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Message:
        raise NotImplementedError

    async def close(self) -> None:
        self._on_close(self)
