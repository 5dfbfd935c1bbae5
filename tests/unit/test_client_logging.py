"""What the client logs about NATS: one WARNING per outage, nothing while connecting."""

from __future__ import annotations

import logging

import nats.errors
import pytest

from liftbridge_client import Client


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.WARNING and r.name.startswith("liftbridge_client")
    ]


class _Publisher:
    """What the NATS callbacks tell the publisher; ``moving``: the detour asked for it."""

    def __init__(self, moving: bool = False) -> None:
        self.moving = moving
        self.outages: list[bool] = []

    def nats_outage(self, down: bool) -> bool:
        self.outages.append(down)
        return self.moving


async def test_the_detours_own_move_logs_no_warning(caplog: pytest.LogCaptureFixture) -> None:
    client = Client(["127.0.0.1:9292"])
    publisher = _Publisher(moving=True)
    client._publisher = publisher  # type: ignore[assignment]
    caplog.set_level(logging.DEBUG, logger="liftbridge_client")
    await client._on_nats_disconnected()
    await client._on_nats_reconnected()
    assert _warnings(caplog) == []
    assert "NATS: moving to another server" in caplog.text
    assert publisher.outages == [True, False]


async def test_an_outage_logs_one_warning_naming_the_loss(caplog: pytest.LogCaptureFixture) -> None:
    client = Client(["127.0.0.1:9292"])
    client._publisher = _Publisher()  # type: ignore[assignment]  # connected, for logging
    caplog.set_level(logging.DEBUG, logger="liftbridge_client")
    # What nats-py calls on a lost connection: the error, then the disconnect, then an
    # error per failed reconnect attempt.
    await client._on_nats_error(nats.errors.UnexpectedEOF())
    await client._on_nats_disconnected()
    await client._on_nats_error(ConnectionRefusedError(111, "Connect call failed"))
    await client._on_nats_error(ConnectionRefusedError(111, "Connect call failed"))
    assert _warnings(caplog) == [
        "NATS connection lost (nats: unexpected EOF); reconnecting (publishes are buffered)"
    ]
    await client._on_nats_reconnected()
    await client._on_nats_error(nats.errors.Error("nats: permissions violation"))
    assert len(_warnings(caplog)) == 2  # other errors of a live connection still warn


async def test_connecting_logs_no_warning(caplog: pytest.LogCaptureFixture) -> None:
    client = Client(["127.0.0.1:9292"])
    caplog.set_level(logging.DEBUG, logger="liftbridge_client")
    for _ in range(3):
        await client._on_nats_error(ConnectionRefusedError(111, "Connect call failed"))
    await client._on_nats_disconnected()
    assert _warnings(caplog) == []  # connect() raises with the reason instead
    assert list(client._nats_errors) == ["[Errno 111] Connect call failed"]
