"""Issue 32's measure of the house: one publish walks down the package's layers.

`publish_walk.walk` traces a `Client.publish` with a key, on the fakes, from the call to
the wire (NATS's outgoing buffer, the h2 call): on the general path and on the one-step
path, over NATS and over gRPC on h2. Whatever the path, the publish only goes down: no
module calls back into one above it (the layers of test_layout.py, and the order of the
``_publish`` modules).
"""

from __future__ import annotations

import pytest
from publish_walk import WALKS, classify, walk

from liftbridge_client.options import Transport


@pytest.mark.parametrize("transport", [Transport.NATS, Transport.GRPC], ids=["nats", "h2"])
@pytest.mark.parametrize("path", list(WALKS))
async def test_a_publish_goes_down_to_the_wire_without_climbing_back(
    path: str, transport: Transport
) -> None:
    result = await walk(transport, WALKS[path])
    assert [f"{s.source} -> {s.target}.{s.function}" for s in result.climbs] == []
    # The client makes one typed call into the publisher, which picks the path.
    leaving_client = [s for s in result.steps if s.source == "client" and s.kind == "down"]
    # (then, on the general path, awaits the coroutine it got back)
    assert leaving_client[0].target == "_publish.publisher"
    assert leaving_client[0].function == "Publisher.publish"
    assert {s.target for s in leaving_client} == {"_publish.publisher"}
    # The general path checks the arguments once, beside _validate; the one-step path
    # takes only what needs no check.
    checks = [s.function for s in result.steps if s.kind == "down" and s.target == "_publish_args"]
    assert checks == (["stream_publish"] if path.startswith("general") else [])


def test_a_call_up_the_layers_is_a_climb() -> None:
    assert classify("_publish.nats", "_publish.publisher") == "climb"
    assert classify("_publish.route", "_publish.leaders") == "climb"
    assert classify("_transport.nats", "_publish.nats") == "climb"
    assert classify("_publish.publisher", "_publish_args") == "down"
    assert classify("_publish.nats", "_publish.route") == "down"
    assert classify("_validate", "envelope") == "down"  # beside, in one layer
    assert classify("client", "client") == "stay"
