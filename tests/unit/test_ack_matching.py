"""Acks on the NATS inbox settle a publish only when they name its stream and subject."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from publish_fakes import Rig, ack_scan, make_rig

from liftbridge_client import errors
from liftbridge_client._proto import api_pb2
from liftbridge_client._publish.acks import AckFuture

__all__ = ["ack_scan"]  # the fixture: every test runs with the C scan and without
pytestmark = pytest.mark.usefixtures("ack_scan")


@pytest.fixture
async def rig() -> AsyncIterator[Rig]:
    r = await make_rig(ack_wait=30)
    yield r
    await r.close()


async def sent(rig: Rig, cid: str, partition: int = 0) -> AckFuture:
    fut = rig.publisher.publish_nowait("s", b"v", correlation_id=cid, partition=partition)
    for _ in range(5):
        await asyncio.sleep(0)  # the sender writes it
    assert rig.wire.published
    return fut


@pytest.mark.parametrize(
    ("stream", "subject"),
    [
        ("other", "s.subj"),  # another stream's ack (e.g. its server acked a forged publish)
        ("s", "s.subj.1"),  # the right stream, another partition
        ("", ""),  # a hand-made ack naming nothing
        ("s", ""),
    ],
)
async def test_mismatching_ack_is_counted_dropped_and_the_real_one_resolves(
    rig: Rig, stream: str, subject: str
) -> None:
    fut = await sent(rig, "c1")
    rig.ack("c1", 666, stream=stream, subject=subject)
    await asyncio.sleep(0)
    assert not fut.done()
    stats = rig.publisher.stats()
    assert (stats.mismatched_acks, stats.unknown_acks, stats.pending) == (1, 0, 1)
    rig.ack("c1", 7)  # the server's: stream "s", subject "s.subj"
    ack = await asyncio.wait_for(fut, 5)
    assert ack is not None
    assert ack.offset == 7
    assert rig.publisher.stats().mismatched_acks == 1


async def test_a_forged_error_ack_cannot_fail_a_publish(rig: Rig) -> None:
    fut = await sent(rig, "c2", partition=2)
    rig.ack("c2", 0, error=api_pb2.Ack.INCORRECT_OFFSET, subject="s.subj")
    await asyncio.sleep(0)
    assert not fut.done()
    rig.ack("c2", 0, error=api_pb2.Ack.TOO_LARGE)  # the real one names s.subj.2
    with pytest.raises(errors.MessageTooLargeError):
        await asyncio.wait_for(fut, 5)
    assert rig.publisher.stats().mismatched_acks == 1


async def test_acks_for_nobody_stay_unknown_not_mismatched(rig: Rig) -> None:
    rig.ack("nobody", 1, stream="x", subject="y")
    stats = rig.publisher.stats()
    assert (stats.unknown_acks, stats.mismatched_acks) == (1, 0)
