"""Socket options of the client's own TCP connections to brokers.

A subscription only receives: when packets to and from its broker are dropped (a firewall,
a dead link, a host gone without a reset), nothing tells it, and HTTP/2 pings cannot be
sent often enough to tell it either, because the server (grpc-go's enforcement policy)
closes a connection that pings more than once per 5 minutes while it sends no data. The
kernel can: keepalive probes are answered by the peer's kernel, never counted as pings,
and ``TCP_USER_TIMEOUT`` drops a connection whose sent bytes stay unacknowledged. A
paused broker process still has its kernel answer, so only a cut network trips them.
"""

from __future__ import annotations

import logging
import socket
from typing import Protocol

__all__ = ["detect_dead_peer"]

log = logging.getLogger(__name__)


class _Sock(Protocol):
    def setsockopt(self, level: int, option: int, value: int, /) -> None: ...


def detect_dead_peer(sock: _Sock | None, seconds: float | None) -> bool:
    """Make the kernel drop the connection of ``sock`` about ``seconds`` after its peer
    stopped answering (idle or not). False where the platform lacks the options (the
    connection then relies on HTTP/2 keepalive pings alone) or when ``seconds`` is None."""
    if sock is None or seconds is None:
        return False
    idle = max(1, int(seconds / 2))
    interval = max(1, int(seconds / 6))
    options = [(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)]
    # Linux names; macOS has TCP_KEEPALIVE for the idle time, Windows none of these.
    for name, value in (
        ("TCP_KEEPIDLE", idle),
        ("TCP_KEEPALIVE", idle),
        ("TCP_KEEPINTVL", interval),
        ("TCP_KEEPCNT", 3),
        ("TCP_USER_TIMEOUT", max(1000, int(seconds * 1000))),
    ):
        option = getattr(socket, name, None)
        if option is not None:
            options.append((socket.IPPROTO_TCP, option, value))
    try:
        for level, option, value in options:
            sock.setsockopt(level, option, value)
    except OSError as exc:  # e.g. a platform that names an option but refuses it
        log.debug("could not set TCP keepalive options: %s", exc)
        return False
    return len(options) > 1
