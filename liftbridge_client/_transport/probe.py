"""Why an address could not be reached: one raw TCP look at it, on the failure path only.

grpc-core and nats-py report a failed first contact in their own terms ("failed to
connect to all addresses", a timeout after ``connect_timeout``) and hide the reason a
user can act on. When connecting fails, `explain` looks at each address itself:

- the host name does not resolve (DNS);
- the connection is refused (nothing listens on that port), or not answered;
- something else listens there: a NATS server greets every client with an
  ``INFO {...}`` line at once, and a gRPC server (grpc-go, as Liftbridge) sends an
  HTTP/2 SETTINGS frame at once, so a few bytes tell one from the other. A NATS
  address given as a broker, or a broker's gRPC address given as a NATS server, is
  then named as such.

Nothing here runs while connecting works, and nothing here needs nats-py.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from liftbridge_client.errors import ProtocolError

__all__ = ["Finding", "Protocol", "describe", "explain", "nats_address"]

# How long a probe waits for the greeting (both servers send theirs at once).
GREETING_WAIT = 0.5


class Protocol(enum.Enum):
    """What the address should speak."""

    GRPC = "a Liftbridge gRPC server"
    NATS = "a NATS server"


@dataclass(frozen=True, slots=True)
class Finding:
    """What the probe of ``address`` found: ``reason`` in words, and its exception.

    ``certain``: the address cannot work as given (the name does not resolve, or another
    protocol answers there); waiting longer will not help.
    """

    address: str
    reason: str
    cause: BaseException | None = None
    certain: bool = False


def nats_address(url: str) -> str:
    """``host:port`` of a NATS server URL (``nats://h:p``, ``tls://h:p``, ``h:p``, ``h``)."""
    parts = urlsplit(url if "://" in url else f"nats://{url}")
    host = parts.hostname or "127.0.0.1"
    try:
        port = parts.port or 4222
    except ValueError:
        port = 4222
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


def _greeting_kind(data: bytes) -> str | None:
    """Which server sent ``data`` first: 'nats', 'http2', 'http1', or None (unknown)."""
    if data.startswith(b"INFO ") or data.startswith(b"INFO\t"):
        return "nats"
    # An HTTP/2 frame header: 24-bit length, type 4 (SETTINGS), flags, stream 0.
    if len(data) >= 9 and data[3] == 4 and data[5:9] == b"\0\0\0\0":
        return "http2"
    if data.startswith(b"HTTP/"):
        return "http1"
    return None


async def _probe(address: str, expect: Protocol, timeout: float) -> Finding | None:
    try:
        host, port = _split(address)
    except ValueError:
        return Finding(address, "not a host:port address", certain=True)
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(timeout):
            await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        return Finding(
            address, f"the host name {host!r} does not resolve ({exc.strerror})", exc, True
        )
    except TimeoutError as exc:
        return Finding(address, f"resolving {host!r} took over {timeout}s", exc)
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection(host, port)
    except ConnectionRefusedError as exc:
        return Finding(address, "connection refused: nothing listens on that port", exc)
    except TimeoutError as exc:
        return Finding(address, f"no answer to connecting within {timeout}s", exc)
    except OSError as exc:
        return Finding(address, f"cannot connect: {exc.strerror or exc}", exc)
    try:
        data = b""
        with contextlib.suppress(TimeoutError, OSError):
            async with asyncio.timeout(min(GREETING_WAIT, timeout)):
                data = await reader.read(64)
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
    return _judge(address, expect, data)


def _judge(address: str, expect: Protocol, data: bytes) -> Finding | None:
    kind = _greeting_kind(data)
    # The bytes themselves are the evidence: the cause a wrong-protocol finding chains.
    sent = ProtocolError(f"{address} sent {data[:24]!r} first; {expect.value} was expected")
    if expect is Protocol.GRPC:
        if kind == "nats":
            return Finding(
                address,
                "a NATS server listens there (it sent 'INFO {'), not a Liftbridge gRPC "
                "server: this looks like the NATS port, give the broker's gRPC port "
                "(9292 by default)",
                sent,
                certain=True,
            )
        if kind == "http1":
            return Finding(address, "an HTTP/1 server answers there, not gRPC", sent, True)
        return None  # an HTTP/2 server, or a quiet one: the gRPC error says more
    if kind == "nats":
        return None
    if kind == "http2":
        return Finding(
            address,
            "an HTTP/2 server listens there (it sent a SETTINGS frame, not a NATS 'INFO' "
            "line): this looks like a Liftbridge gRPC port, give the NATS port "
            "(4222 by default)",
            sent,
            certain=True,
        )
    if data:
        return Finding(
            address,
            f"the server there is not NATS: its first bytes were {data[:16]!r}, not 'INFO {{'",
            sent,
            certain=True,
        )
    return Finding(
        address,
        f"the server accepted the connection but sent no NATS 'INFO' line within {GREETING_WAIT}s",
    )


async def explain(
    addresses: Sequence[str], expect: Protocol, timeout: float = 1.0
) -> list[Finding]:
    """Probe each address (in parallel); the findings of those with something to say."""
    found = await asyncio.gather(*(_probe(a, expect, timeout) for a in addresses))
    return [f for f in found if f is not None]


def describe(findings: Sequence[Finding]) -> str:
    """The findings in one line: ``address: reason; address: reason``."""
    return "; ".join(f"{f.address}: {f.reason}" for f in findings)
