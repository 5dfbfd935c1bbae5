"""Client-side CPU per publish, without a server: the publisher on the unit-test fakes.

``python -m bench.pubmicro [--n 100000] [--repeat 5] [--transport nats]`` publishes ``n``
messages with ``publish_nowait`` (window 1024, 256 B, partition 0, ack LEADER) over the
NATS path and over the gRPC path (or only the ``--transport`` given), answering each with
an ack, and prints the median us per message of ``repeat`` runs. Only this client's
code (and asyncio) is measured: the fakes write nowhere, and the ack bytes / responses
are built before the clock starts. Much less noisy than the end-to-end runs on a shared
machine.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "unit"))

from publish_fakes import make_rig

from liftbridge_client import envelope
from liftbridge_client._proto import api_pb2
from liftbridge_client.models import AckPolicy
from liftbridge_client.options import Transport
from liftbridge_client.testing import wait_until

_BATCH = 512


async def run(n: int, transport: Transport) -> float:
    # gRPC: an in-process broker acks every request itself (its CPU counts here too).
    rig = await make_rig(max_inflight=1024, transport=transport, auto_ack=True)
    p = rig.publisher
    value = bytes(97 + i % 26 for i in range(256))
    cid_prefix = p.cid_prefix
    start_id = 1
    nats_pub = p._nats_pub
    assert nats_pub is not None
    if transport is Transport.NATS:
        acks = [
            envelope.encode_ack(
                api_pb2.Ack(
                    stream="s",
                    partitionSubject="s.subj",
                    msgSubject="s.subj",
                    offset=i,
                    ackInbox="_INBOX.fake",
                    correlationId=f"{cid_prefix}{start_id + i}",
                    receptionTimestamp=1,
                    commitTimestamp=2,
                )
            )
            for i in range(n)
        ]
    futs: list[asyncio.Future[Any]] = []
    cpu0 = time.process_time()
    for base in range(0, n, _BATCH):
        futs.extend(
            p.publish_nowait("s", value, partition=0, ack_policy=AckPolicy.LEADER)
            for _ in range(min(_BATCH, n - base))
        )
        for _ in range(4):
            await asyncio.sleep(0)  # the sender / writer put them on the (fake) wire
        if transport is Transport.GRPC:  # the in-process broker's acks free the window
            await wait_until(lambda: p.pending <= 1024 - _BATCH, what="acks")
        end = min(base + _BATCH, n)
        if transport is Transport.NATS:
            for data in acks[base:end]:
                nats_pub.dispatch(data)
    results = await asyncio.gather(*futs)
    cpu = time.process_time() - cpu0
    assert all(r is not None for r in results)
    await rig.close()
    return cpu / n * 1e6


async def main(args: argparse.Namespace) -> None:
    for transport in args.transports:
        runs = [await run(args.n, transport) for _ in range(args.repeat)]
        print(f"{transport.name}: median {statistics.median(runs):.2f} us/msg  runs {runs!r}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=100000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument(
        "--transport",
        dest="transports",
        action="append",
        type=lambda name: Transport[name.upper()],
        help="nats or grpc (repeatable; default both)",
    )
    ns = parser.parse_args()
    ns.transports = ns.transports or [Transport.NATS, Transport.GRPC]
    asyncio.run(main(ns))
