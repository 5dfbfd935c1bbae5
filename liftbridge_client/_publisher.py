"""Publishing: NATS envelopes or gRPC, with acks correlated to futures.

SKELETON: the interface `client.py` relies on. Implementation pending.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import TypedDict

import nats.aio.client

from liftbridge_client._grpc import BrokerPool
from liftbridge_client._metadata import MetadataCache
from liftbridge_client.models import Ack, AckPolicy
from liftbridge_client.options import ClientOptions, Transport

# A partitioner maps (stream, key, value, partition count) to a partition id.
Partitioner = Callable[[str, bytes | None, bytes, int], int]


class PublishArgs(TypedDict, total=False):
    """Per-call publish options (all keyword-only, all optional)."""

    key: bytes | None
    headers: Mapping[str, bytes] | None
    partition: int | None  # explicit partition wins over the partitioner
    partitioner: Partitioner | None  # default: by key when a key is given, else 0
    ack_policy: AckPolicy
    expected_offset: int  # optimistic concurrency; -1 (default) = no check
    correlation_id: str | None  # default: a fresh unique id
    transport: Transport | None  # default: the client's
    ack_wait: float | None  # default: ClientOptions.ack_wait


class SubjectPublishArgs(TypedDict, total=False):
    key: bytes | None
    headers: Mapping[str, bytes] | None
    ack_policy: AckPolicy
    correlation_id: str | None
    ack_wait: float | None


class Publisher:
    def __init__(
        self,
        *,
        metadata: MetadataCache,
        pool: BrokerPool,
        options: ClientOptions,
        nats: nats.aio.client.Client | None,
    ) -> None:
        self._metadata = metadata
        self._pool = pool
        self._options = options
        self._nats = nats

    async def start(self) -> None:
        """Subscribe the ack inbox (NATS) and get ready to publish."""

    async def publish(self, stream: str, value: bytes, **kw: object) -> Ack | None:
        raise NotImplementedError

    async def send(self, stream: str, value: bytes, **kw: object) -> asyncio.Future[Ack | None]:
        raise NotImplementedError

    def publish_nowait(self, stream: str, value: bytes, **kw: object) -> asyncio.Future[Ack | None]:
        raise NotImplementedError

    async def publish_to_subject(self, subject: str, value: bytes, **kw: object) -> Ack | None:
        raise NotImplementedError

    async def flush(self, timeout: float | None) -> None:
        raise NotImplementedError

    async def close(self, cause: BaseException | None) -> None:
        """Fail every pending future with ConnectionClosedError chained to ``cause``."""
