"""Each route's one-step publish (`Route.direct`) is an optimisation only: the bytes it
puts on the wire and the outcome its caller gets are those of the general path
(`Route.prepare` + `submit`/`send`), for any plain publish.

Two publishers share one correlation-id prefix and counter position, so the direct
publish of one and the general publish of the other carry the same id; the general one is
forced by an explicit ``expected_offset=-1`` (the default value, but not a keyword the
one-step path takes).
"""

from __future__ import annotations

import asyncio
from typing import Any

import hypothesis.strategies as st
from hypothesis import given, settings
from publish_fakes import Rig, make_rig

from liftbridge_client._publish.routes import LeaderRoute, NatsRoute
from liftbridge_client.models import Ack, AckPolicy
from liftbridge_client.options import StreamTransport, Transport
from liftbridge_client.testing import wait_until

PLAIN = {
    "value": st.binary(max_size=3000),
    "partition": st.integers(min_value=0, max_value=2),
    "ack_policy": st.sampled_from(list(AckPolicy)),
    "key": st.one_of(st.none(), st.binary(max_size=300)),
}


async def _twins(**options: Any) -> tuple[Rig, Rig]:
    one, two = await make_rig(**options), await make_rig(**options)
    two.publisher.cid_prefix = one.publisher.cid_prefix
    return one, two


@settings(max_examples=40, deadline=None)
@given(crc=st.booleans(), **{**PLAIN, "partition": st.none() | PLAIN["partition"]})
def test_the_nats_one_step_publish_writes_the_general_paths_bytes(
    crc: bool, value: bytes, partition: int | None, ack_policy: AckPolicy, key: bytes | None
) -> None:
    # No partition: the key picks it (the default KeyPartitioner), on both paths.
    async def compare() -> None:
        one, two = await _twins(transport=Transport.NATS, envelope_crc=crc)
        try:
            assert isinstance(one.publisher._default_route, NatsRoute)
            direct = one.publisher.send_plain("s", value, partition, ack_policy, None, False, key)
            assert direct is not None  # the one-step path took it
            general = two.publisher.publish_nowait(
                "s", value, key=key, partition=partition, ack_policy=ack_policy, expected_offset=-1
            )
            await wait_until(
                lambda: bool(one.wire.published and two.wire.published), what="both written"
            )
            assert one.wire.published == two.wire.published  # subject and bytes
            if ack_policy is AckPolicy.NONE:  # written: both resolve to None at once
                assert await direct is None
                assert await general is None
                return
            cid = direct.correlation_id
            assert cid == general.correlation_id
            one.ack(cid, 7)
            two.ack(cid, 7)
            got = await asyncio.gather(direct, general)
            assert all(isinstance(ack, Ack) and ack.offset == 7 for ack in got)
            assert got[0] == got[1]
        finally:
            await one.close()
            await two.close()

    asyncio.run(compare())


@settings(max_examples=25, deadline=None)
@given(**{**PLAIN, "value": st.binary(min_size=1, max_size=3000)})  # b"" is not plain
def test_the_h2_one_step_publish_sends_the_general_paths_request(
    value: bytes, partition: int, ack_policy: AckPolicy, key: bytes | None
) -> None:
    async def compare() -> None:
        options = {"transport": Transport.GRPC, "stream_transport": StreamTransport.H2}
        one, two = await _twins(auto_ack=True, **options)
        try:
            assert isinstance(one.publisher._default_route, LeaderRoute)
            # The first publish opens the leader's stream; the second takes the one step.
            for rig in (one, two):
                await rig.publisher.publish("s", b"open", partition=partition)
            direct = one.publisher.send_plain("s", value, partition, ack_policy, None, False, key)
            assert direct is not None  # the one-step path took it
            general = two.publisher.publish_nowait(
                "s", value, key=key, partition=partition, ack_policy=ack_policy, expected_offset=-1
            )
            assert direct.correlation_id == general.correlation_id
            got = await asyncio.gather(direct, general)
            await wait_until(
                lambda: len(one.server.published) == len(two.server.published) == 2,
                what="the broker reading both",
            )
            sent = [rig.server.published[-1][1] for rig in (one, two)]
            assert sent[0] == sent[1]  # the request the broker decoded, field by field
            assert sent[0].value == value
            assert sent[0].key == (key or b"")
            if ack_policy is AckPolicy.NONE:
                assert list(got) == [None, None]
            else:
                assert got[0] is not None
                assert got[1] is not None
                assert got[0].correlation_id == got[1].correlation_id
        finally:
            await one.close()
            await two.close()

    asyncio.run(compare())
