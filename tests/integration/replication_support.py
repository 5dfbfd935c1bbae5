"""Preconditions for tests that kill a partition leader and then count acked messages."""

from __future__ import annotations

import asyncio

import pytest

from liftbridge_client import Client, errors
from liftbridge_client.models import PartitionInfo
from liftbridge_client.testing import Cluster

# Every server version can lose acked messages to a leader kill: stale failover witnesses
# elect again and may pick a follower that truncated to its high watermark. The harness's
# short fetch timeout (testing/_config.py) makes that rare on v1.9.0 and master; v1.7.1
# still lost acked messages under repeated kills with it (docs/compatibility.md). Tests that
# count acked messages across a leader kill therefore run against v1.9.0 and master only; on
# v1.7.1 (`make test-compat`) the summary names them as left out.
KILLS_A_LEADER = pytest.mark.server_versions("v1.9.0", "master")


async def wait_for_full_isr(
    client: Client, stream: str, partition: int = 0, *, timeout: float = 30.0
) -> PartitionInfo:
    """Block until the partition's leader reports every replica in its ISR.

    Why: v1.9.0 acks ALL once every replica *then* in the ISR has a message. A follower that
    lagged (3 s here, easily reached on a busy machine just after a stream is created) is
    dropped from the ISR, and its leader adds it back on the strength of a caught-up request
    it saw earlier, without checking that the follower has what was committed meanwhile. A
    leader killed in that window can hand leadership to it, and the acked messages are gone
    (seen once in CI: the new leader's log was empty after an ALL ack; docs/testing.md).
    A test of "an ALL ack survives the leader" therefore starts from a full ISR.
    """
    last: PartitionInfo | None = None
    try:
        async with asyncio.timeout(timeout):
            while True:
                try:
                    # Answered by the leader itself: its view decides what an ack means.
                    last = await client.fetch_partition_metadata(stream, partition)
                except errors.NotFoundError:
                    # The stream was just created: a node (one just restarted, say) may
                    # answer before it has applied the creation.
                    pass
                except errors.LiftbridgeError as exc:
                    if not exc.retriable:
                        raise
                else:
                    if last.leader and set(last.isr) == set(last.replicas):
                        return last
                await asyncio.sleep(0.1)
    except TimeoutError:
        raise AssertionError(
            f"{stream}/{partition}: ISR not full within {timeout:.0f} s (last seen: {last})"
        ) from None


_HISTORY_WORDS = ("leader", "ISR", "Truncat", "timeout")


def print_partition_history(cluster: Cluster, stream: str, lines: int = 60) -> None:
    """Print each node's last log lines about ``stream``'s leaders, ISR and timeouts.

    For a failure that only shows up in full runs: pytest shows captured output of a failed
    test, and the servers' own logs say whether leadership kept moving.
    """
    for node in cluster.nodes:
        about = [
            line
            for line in node.logs().splitlines()
            if stream in line and any(word in line for word in _HISTORY_WORDS)
        ]
        print(f"--- {node!r}: {len(about)} lines on {stream}, the last {lines}:")
        print("\n".join(about[-lines:]))
