"""A leader that the other nodes' metadata answers leave out of their broker list.

A node answers FetchMetadata with itself and the brokers that answered its survey over
NATS (``<namespace>.raft.metadata.info``) in time. Here node n3's own NATS server takes
no message on that subject from its routes (a route import permission), so n1 and n2
never hear n3 answer their surveys and never list it, while n3 replicates, leads and
answers
over gRPC as usual: the state a 60-minute soak stayed in for 9 minutes, where a client
that knew the leader's id but had no address for it failed half its publishes with
"no known leader". The client here knows every node as a seed and refreshes its metadata
before each step, so most of the answers it caches come from n1 or n2.

:func:`survey_blind_leader` returns what the servers answered and what the client got;
tests/faults/test_survey_blind.py runs it in a private network namespace. By hand, as
root (from tests/):
``unshare --net --pid --kill-child -- python -m faults.survey_scenario --out /tmp/sv``.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
import uuid
from pathlib import Path

from liftbridge_client import Client, ClientOptions, StreamConfig, errors
from liftbridge_client.models import Metadata
from liftbridge_client.testing import LIFTBRIDGE_VERSION
from liftbridge_client.testing._netns import AddressedCluster

STREAMS = 4  # created, at most, until n3 leads one
STEPS = 30
SURVEY_SUBJECT = "*.raft.metadata.info"  # <clustering namespace>.raft.metadata.info
N3_NATS_CONFIG = f"""\
cluster {{
  permissions {{
    import {{ deny: ["{SURVEY_SUBJECT}"] }}
  }}
}}
"""


@dataclasses.dataclass
class SurveyOutcome:
    """What n1 and n3 answered, and what the client did with the partition n3 leads."""

    version: str
    stream: str = ""  # one partition, which n3 leads
    n3_lists: list[list[str]] = dataclasses.field(default_factory=list)  # n3's answers
    n1_lists: list[list[str]] = dataclasses.field(default_factory=list)  # n1's answers
    n1_leaders: list[str] = dataclasses.field(default_factory=list)  # of the stream's partition
    published: int = 0
    publish_errors: list[str] = dataclasses.field(default_factory=list)
    partition_metadata: int = 0  # FetchPartitionMetadata answers (asked of the leader)
    partition_metadata_errors: list[str] = dataclasses.field(default_factory=list)
    read: int = 0  # messages read back from the partition

    def to_dict(self) -> dict[str, object]:
        return dataclasses.asdict(self)


def start_serving(cluster: AddressedCluster, timeout: float = 60.0) -> None:
    """Start the cluster and wait until it serves, without waiting for every node's
    FetchMetadata to list every broker: n1's and n2's never list n3 here."""
    cluster.nats.start()
    for node in cluster.nodes:
        node.start(wait=False)
    cluster.wait_ready(timeout=timeout, every_broker_listed=False)


def _listed(metadata: Metadata) -> list[str]:
    return sorted(b.id for b in metadata.brokers)


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


async def _leader(client: Client, stream: str, outcome: SurveyOutcome) -> str:
    answer = await client.fetch_metadata(stream)
    outcome.n3_lists.append(_listed(answer))
    info = answer.streams.get(stream)
    return info.partitions[0].leader if info is not None and 0 in info.partitions else ""


async def survey_blind_leader(cluster: AddressedCluster, version: str) -> SurveyOutcome:
    outcome = SurveyOutcome(version=version)
    a1, _, a3 = cluster.addresses
    prefix = f"survey-{uuid.uuid4().hex[:8]}"
    stream = ""
    # Every address is n3's for this client: it asks n3 alone.
    alone = ClientOptions(address_overrides=dict.fromkeys(cluster.addresses, a3))
    async with Client([a3], options=alone) as at_n3:
        # The metadata leader gives a new stream's partitions to the brokers leading the
        # fewest: streams of one partition, replicated on all three, until n3 leads one.
        for attempt in range(STREAMS):
            name = f"{prefix}-{attempt}"
            await at_n3.create_stream(name, name, StreamConfig(replication_factor=3))
            async with asyncio.timeout(30):
                while not (leader := await _leader(at_n3, name, outcome)):  # noqa: ASYNC110
                    await asyncio.sleep(0.2)
            if leader == "n3":
                stream = outcome.stream = name
                break
        else:
            raise RuntimeError(f"n3 led none of {STREAMS} new streams: {outcome.to_dict()}")
    partition = 0  # the stream's only one
    async with Client([a1]) as at_n1:
        for _ in range(5):
            answer = await at_n1.fetch_metadata(stream)
            outcome.n1_lists.append(_listed(answer))
            outcome.n1_leaders.append(answer.streams[stream].partitions[partition].leader)
    # Every node a seed, n3 first: the client learns n3's address once, from n3.
    async with Client([a3, *cluster.addresses[:2]]) as client:
        for step in range(STEPS):
            await client.fetch_metadata()  # a refresh, answered by any node it knows
            try:
                await client.publish(stream, f"m{step}".encode(), partition=partition)
                outcome.published += 1
            except errors.LiftbridgeError as exc:
                outcome.publish_errors.append(_error(exc))
            try:
                await client.fetch_partition_metadata(stream, partition)
                outcome.partition_metadata += 1
            except errors.LiftbridgeError as exc:
                outcome.partition_metadata_errors.append(_error(exc))
        if outcome.published:
            async with asyncio.timeout(20):
                async with client.subscribe(
                    stream, partition, start_offset=0, stop_offset=outcome.published - 1
                ) as sub:
                    outcome.read = len([m async for m in sub])
    return outcome


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--version", default=LIFTBRIDGE_VERSION)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    cluster = AddressedCluster(
        3,
        base_dir=args.out / "cluster",
        version=args.version,
        routed=True,
        nats_configs={"n3": N3_NATS_CONFIG},
        log_level="info",
    )
    try:  # not `with`: it would wait for every node listed everywhere (start_serving)
        start_serving(cluster)
        outcome = asyncio.run(survey_blind_leader(cluster, args.version))
    finally:
        cluster.close()
    (args.out / "outcome.json").write_text(json.dumps(outcome.to_dict(), indent=1))
    print(json.dumps(outcome.to_dict()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
