"""The raw ack route into nats-py's parser (liftbridge_client._nats_raw)."""

from __future__ import annotations

import logging
from typing import Any, cast

import pytest

from liftbridge_client._nats_raw import route_sid, unroute_sid


class Sub:
    def __init__(self, sid: int) -> None:
        self._id = sid


class Conn:
    """What the router needs of nats-py's Client: ``_process_msg`` and ``stats``."""

    def __init__(self) -> None:
        self.stats = {"in_msgs": 0, "in_bytes": 0}
        self.slow: list[tuple[int, bytes, bytes | None]] = []

    async def _process_msg(
        self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes | None
    ) -> None:
        self.stats["in_msgs"] += 1
        self.slow.append((sid, data, headers))


async def test_routed_sid_goes_to_the_handler_the_rest_to_nats_py() -> None:
    conn = Conn()
    got: list[bytes] = []
    assert route_sid(cast(Any, conn), Sub(7), got.append)
    assert route_sid(cast(Any, conn), Sub(7), got.append)  # installing twice: one router
    await conn._process_msg(7, b"_INBOX.x", b"", b"ack1", b"")
    await conn._process_msg(8, b"other", b"", b"m", b"")  # another subscription
    await conn._process_msg(7, b"_INBOX.x", b"", b"with-headers", b"NATS/1.0\r\nA: b\r\n\r\n")
    await conn._process_msg(7, b"_INBOX.x", b"", b"ack2", None)
    assert got == [b"ack1", b"ack2"]
    assert [(sid, data) for sid, data, _ in conn.slow] == [(8, b"m"), (7, b"with-headers")]
    assert conn.stats == {"in_msgs": 4, "in_bytes": 8}  # counted on both paths
    unroute_sid(cast(Any, conn), Sub(7))
    await conn._process_msg(7, b"_INBOX.x", b"", b"ack3", b"")
    assert got == [b"ack1", b"ack2"]
    assert conn.slow[-1] == (7, b"ack3", b"")


async def test_a_failing_handler_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    conn = Conn()

    def broken(data: bytes) -> None:
        raise RuntimeError("bug")

    assert route_sid(cast(Any, conn), Sub(1), broken)
    with caplog.at_level(logging.ERROR, logger="liftbridge_client._nats_raw"):
        await conn._process_msg(1, b"s", b"", b"x", b"")
    assert "handler of NATS subscription 1 failed" in caplog.text


def test_nothing_is_routed_without_a_parser_hook_or_a_sid() -> None:
    class Bare:
        pass

    assert not route_sid(cast(Any, Bare()), Sub(1), print)
    assert not route_sid(cast(Any, Conn()), object(), print)
    unroute_sid(cast(Any, Bare()), Sub(1))  # nothing routed: nothing to do
