"""Broker outages as the publisher sees them: what to log, and when to try a broker again.

A PublishAsync stream that breaks before its broker ever answered it (connection refused,
reset while opening) says the broker cannot take publishes now. Opening the next stream
at once made the publisher spin while a dead leader was still named in the metadata:
the h2 transport gives back the publishes it never wrote, so each one went back to the
queue, was routed again (a metadata refresh each time) and broke again, some 500 times a
second until its ack wait ran out. Here every such failure in a row pushes the next
attempt at that broker further out (`RetryPolicy.backoff`); an answered stream ends the
outage. No I/O: the caller passes the time.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from liftbridge_client.options import RetryPolicy

__all__ = ["MIN_RETRY_DELAY", "OutageLog"]

log = logging.getLogger(__name__)

# A policy may ask for no backoff at all; a broker that refuses at once would then be
# retried in a busy loop. This floor keeps the retries of one broker below 100 a second.
MIN_RETRY_DELAY = 0.01


class OutageLog:
    """Per broker: one WARNING per outage (not one per broken stream) and its retry pace.

    An outage starts with the first broken stream of an address and ends when a stream
    to it answers (one INFO line). While streams break unanswered, `retry_at` says when
    the next may be opened.
    """

    def __init__(
        self, policy: RetryPolicy | None = None, clock: Callable[[], float] | None = None
    ) -> None:
        self._policy = policy or RetryPolicy()
        self._clock = clock
        self._down: dict[str, int] = {}  # address -> streams broken in this outage
        self._unanswered: dict[str, int] = {}  # address -> unanswered breaks in a row
        self._retry_at: dict[str, float] = {}

    def broke(
        self, address: str, cause: BaseException, failed: int, *, answered: bool = True
    ) -> None:
        """A stream to ``address`` broke (``answered``: the broker had answered it)."""
        count = self._down.get(address)
        if count is None:
            self._down[address] = 1
            log.warning(
                "PublishAsync stream to %s broke (%s); %d pending publishes failed",
                address,
                cause,
                failed,
            )
        else:
            self._down[address] = count + 1
            log.debug("PublishAsync stream to %s broke again (%s)", address, cause)
        if answered or self._clock is None:
            # It was working: the next stream may be tried at once.
            self._unanswered.pop(address, None)
            self._retry_at.pop(address, None)
            return
        n = self._unanswered.get(address, 0) + 1
        self._unanswered[address] = n
        self._retry_at[address] = self._clock() + max(self._policy.backoff(n), MIN_RETRY_DELAY)

    def answered(self, address: str) -> None:
        """A stream to ``address`` got its first answer: the outage, if any, is over."""
        self._unanswered.pop(address, None)
        self._retry_at.pop(address, None)
        count = self._down.pop(address, None)
        if count is not None:
            log.info("PublishAsync to %s works again (%d broken streams meanwhile)", address, count)

    def down(self, address: str) -> bool:
        """True from a broken stream to ``address`` until one to it answers."""
        return address in self._down

    def retry_at(self, address: str) -> float | None:
        """When a new stream to ``address`` may be opened; None if it may be now."""
        at = self._retry_at.get(address)
        if at is None or self._clock is None or at <= self._clock():
            return None
        return at
