"""The NATS detour's decisions (`_publish.strand.Strand`) and how `Detour` carries them out."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from liftbridge_client._publish.strand import MAX_DETOUR, MIN_DETOUR, Detour, Strand
from liftbridge_client._tasks import TaskSupervisor
from liftbridge_client._transport.nats import move_nats


def test_the_first_detour_is_the_longer_of_the_floor_and_two_ack_waits() -> None:
    assert Strand(1.0).silent(100.0) == MIN_DETOUR
    assert Strand(4.0).silent(100.0) == 8.0


def test_timeouts_during_a_detour_start_no_other() -> None:
    strand = Strand(1.0)
    assert strand.silent(0.0) == MIN_DETOUR
    for now in (0.1, 2.0, MIN_DETOUR - 0.01):
        assert strand.detoured(now)
        assert strand.silent(now) is None
    assert not strand.detoured(MIN_DETOUR)
    assert strand.detours == 1


def test_a_strand_found_again_soon_doubles_the_detour_up_to_the_cap() -> None:
    strand = Strand(1.0)
    now, lengths = 0.0, []
    for _ in range(8):
        length = strand.silent(now)
        assert length is not None
        lengths.append(length)
        now += length + 1.0  # NATS tried again, and stranded within a second
    assert lengths[:4] == [MIN_DETOUR, 2 * MIN_DETOUR, 4 * MIN_DETOUR, 8 * MIN_DETOUR]
    assert max(lengths) == MAX_DETOUR
    assert lengths[-1] == MAX_DETOUR


def test_a_strand_long_after_the_last_detour_starts_from_the_floor_again() -> None:
    strand = Strand(1.0)
    assert strand.silent(0.0) == MIN_DETOUR
    assert strand.silent(MIN_DETOUR + 1.0) == 2 * MIN_DETOUR
    later = MIN_DETOUR + 1.0 + 2 * MIN_DETOUR + 4 * 2 * MIN_DETOUR + 1.0
    assert strand.silent(later) == MIN_DETOUR


class _Nats:
    """What `move_nats` uses of a nats-py client; ``force`` False: an older nats-py."""

    def __init__(self, servers: int, *, force: bool = True, connected: bool = True) -> None:
        self.servers = [f"nats://127.0.0.1:{4222 + i}" for i in range(servers)]
        self.is_connected = connected
        self.moves: list[str] = []
        if force:
            self.force_reconnect = self._force

    async def _force(self) -> None:
        self.moves.append("force_reconnect")

    async def _process_op_err(self, exc: Exception) -> None:
        self.moves.append(f"op_err: {exc}")


@pytest.mark.parametrize(
    ("nc", "moved", "how"),
    [
        (_Nats(3), True, "force_reconnect"),
        (_Nats(3, force=False), True, "op_err: moving to another NATS server"),
        (_Nats(1), False, None),  # nowhere else to go
        (_Nats(3, connected=False), False, None),  # nats-py is reconnecting already
    ],
    ids=["force", "older-nats-py", "one-server", "reconnecting"],
)
async def test_move_nats(nc: _Nats, moved: bool, how: str | None) -> None:
    assert await move_nats(nc) is moved  # type: ignore[arg-type]
    assert nc.moves == ([how] if how else [])


async def test_a_detour_routes_around_nats_and_back(supervisor: TaskSupervisor) -> None:
    loop = asyncio.get_running_loop()
    routes: list[bool] = []
    nc = _Nats(3)
    strand = Strand(0.01)
    detour = Detour(strand, loop, routes.append, nc, supervisor.spawn)  # type: ignore[arg-type]
    monkey: Any = strand
    monkey._base = 0.3  # a short detour for the test
    detour.stranded(False)  # a leader moved: go around NATS, but leave the connection
    detour.stranded(False)  # within the detour: nothing more
    assert routes == [True]
    await asyncio.sleep(0.05)
    assert nc.moves == []
    detour.stranded(True)  # a leader that did not move hears nothing: move, once
    detour.stranded(True)
    await asyncio.sleep(0.05)
    assert nc.moves == ["force_reconnect"]
    assert routes == [True]
    await asyncio.sleep(0.3)
    assert routes == [True, False]
    assert strand.detours == 1
    detour.stranded(True)  # a new detour moves again
    await asyncio.sleep(0.05)
    assert routes == [True, False, True]
    assert nc.moves == ["force_reconnect"] * 2
    detour.close()  # its timer is cancelled: the route stays as it is
    detour.stranded(True)
    await asyncio.sleep(0.8)
    assert routes == [True, False, True]
    assert nc.moves == ["force_reconnect"] * 2


async def test_timeouts_a_nats_outage_explains_start_no_detour(supervisor: TaskSupervisor) -> None:
    """nats-py lost its connection (and the client warned about it): the publishes that
    time out during it, and for 2 x ack_wait after the reconnect, are no strand."""
    loop = asyncio.get_running_loop()
    routes: list[bool] = []
    strand = Strand(0.1)
    detour = Detour(strand, loop, routes.append, _Nats(3), supervisor.spawn)  # type: ignore[arg-type]
    assert detour.outage(down=True) is False  # an outage, not our move: the client warns
    detour.stranded(True)
    assert detour.outage(down=False) is False
    detour.stranded(True)  # within 2 x ack_wait of the reconnect
    assert routes == []
    await asyncio.sleep(0.25)
    detour.stranded(False)
    assert routes == [True]
    detour.close()


async def test_the_detours_own_move_is_no_outage(supervisor: TaskSupervisor) -> None:
    loop = asyncio.get_running_loop()
    nc = _Nats(3)
    detour = Detour(Strand(0.01), loop, lambda _: None, nc, supervisor.spawn)  # type: ignore[arg-type]
    detour.stranded(True)
    await asyncio.sleep(0.05)
    assert nc.moves == ["force_reconnect"]
    assert detour.outage(down=True) is True  # the client logs it at INFO
    assert detour.outage(down=False) is True
    assert detour.outage(down=True) is False  # a later loss is an outage again
    detour.close()


async def test_a_move_that_cannot_happen_leaves_outages_as_outages(
    supervisor: TaskSupervisor,
) -> None:
    loop = asyncio.get_running_loop()
    nc = _Nats(1)  # nowhere to move
    detour = Detour(Strand(0.01), loop, lambda _: None, nc, supervisor.spawn)  # type: ignore[arg-type]
    detour.stranded(True)
    await asyncio.sleep(0.05)
    assert nc.moves == []
    assert detour.outage(down=True) is False
    detour.close()
