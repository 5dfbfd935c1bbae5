"""A private event loop and a connected client, for one Spark task or driver-side reader.

Spark runs the data source's methods in plain Python worker processes with no running
event loop. Each task (and the driver-side stream reader, for the query's life) gets its
own `asyncio.Runner` and `Client`, created on first use - never in ``__init__``, which
Spark runs in short-lived processes and pickles - and closed in `close()`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar

from liftbridge_client.client import Client
from liftbridge_client.options import ClientOptions

__all__ = ["TaskRuntime"]

log = logging.getLogger(__name__)

T = TypeVar("T")


class TaskRuntime:
    """`run` coroutines on a private loop with a lazily connected `client`."""

    def __init__(
        self,
        brokers: Sequence[str],
        nats_servers: Sequence[str] = (),
        options: ClientOptions | None = None,
    ) -> None:
        self._brokers = list(brokers)
        self._nats = list(nats_servers)
        self._options = options or ClientOptions()
        self._runner: asyncio.Runner | None = None
        self._client: Client | None = None

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._runner is None:
            self._runner = asyncio.Runner()
        return self._runner.run(coro)

    @property
    def client(self) -> Client:
        """The connected client (connects on first use)."""
        if self._client is None:
            client = Client(self._brokers, nats_servers=self._nats or None, options=self._options)
            self.run(client.connect())  # a failed connect has closed what it opened
            self._client = client
        return self._client

    def close(self, *, drain: bool = True) -> None:
        """Close the client and the loop; idempotent, and never raises (logs instead)."""
        client, self._client = self._client, None
        runner, self._runner = self._runner, None
        try:
            if client is not None and runner is not None:
                runner.run(client.close(drain=drain))
        except Exception:
            log.warning("closing the Liftbridge client failed", exc_info=True)
        finally:
            if runner is not None:
                runner.close()
