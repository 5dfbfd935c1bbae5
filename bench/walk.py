"""The walk of one publish through the package's files, on the unit-test fakes.

``python -m bench.walk [--steps]`` prints, for a `Client.publish` with a key on the
general path (an explicit correlation id; or headers the one-step path refuses) and on
the one-step path (a key only), over NATS and over gRPC with the h2 stream transport
(tests/unit/publish_walk.py's ``WALKS``): how many of the
package's files it passes from the call until it waits for its ack, and how it moves
between them (down, stays, returns, climbs; tests/unit/publish_walk.py defines them).
``--steps`` prints each step between files.

Runs against whichever ``liftbridge_client`` is imported: a tree from before the
``_publish`` split (``_publish/routes.py``) is ranked with its own module order.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "unit"))

from publish_walk import WALKS, walk
from test_layout import PUBLISH_ORDER, ROOT

from liftbridge_client.options import Transport

# The order of the modules of _publish before the split (publisher, routes, acks, wire).
_BEFORE = ("publisher", "routes", "acks", "wire")


async def main(steps: bool) -> None:
    order = _BEFORE if (ROOT / "_publish" / "routes.py").exists() else PUBLISH_ORDER
    print(f"{ROOT}: _publish order {', '.join(order)}")
    for path, options in WALKS.items():
        for transport in (Transport.NATS, Transport.GRPC):
            result = await walk(transport, options, order)
            name = "NATS" if transport is Transport.NATS else "h2"
            print(f"{path} {name}: {result.summary()}")
            print(f"  files: {' '.join(result.files)}")
            print(f"  waits in {result.suspended_in}")
            for climb in result.climbs:
                print(f"  climb: {climb.source} -> {climb.target}.{climb.function}")
            if steps:
                print("    " + result.render().replace("\n", "\n    "))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[1])
    parser.add_argument("--steps", action="store_true")
    asyncio.run(main(parser.parse_args().steps))
