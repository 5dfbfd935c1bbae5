"""Exactly-once publishing and reading on Liftbridge streams, after Gazette's message package.

Pure layers (no IO): `uuids` (v1 UUIDs with producer, clock and flags), `framing`,
`mapping`, `sequencer`. IO layers on top of `liftbridge_client.Client`: `publisher`
(`ExactlyOncePublisher`) and `reader` (`read_committed`, `read_uncommitted`).
See docs/exactly-once.md.
"""

from __future__ import annotations

from liftbridge_client.exactly_once.mapping import (
    Mapping,
    ModuloMapping,
    RandomMapping,
    RendezvousMapping,
)
from liftbridge_client.exactly_once.publisher import (
    CLOCKS_HEADER,
    UUID_HEADER,
    AckIntent,
    ExactlyOncePublisher,
    intents_from_json,
    intents_to_json,
)
from liftbridge_client.exactly_once.reader import (
    CommittedReader,
    delivered,
    read_committed,
    read_uncommitted,
    uuid_of,
    value_uuid,
)
from liftbridge_client.exactly_once.sequencer import (
    Checkpoint,
    Envelope,
    PartitionRef,
    ProducerState,
    QueueOutcome,
    Sequencer,
)
from liftbridge_client.exactly_once.uuids import (
    Clock,
    Flags,
    build_uuid,
    clock_of,
    flags_of,
    new_producer_id,
    producer_of,
)

__all__ = [
    "CLOCKS_HEADER",
    "UUID_HEADER",
    "AckIntent",
    "Checkpoint",
    "Clock",
    "CommittedReader",
    "Envelope",
    "ExactlyOncePublisher",
    "Flags",
    "Mapping",
    "ModuloMapping",
    "PartitionRef",
    "ProducerState",
    "QueueOutcome",
    "RandomMapping",
    "RendezvousMapping",
    "Sequencer",
    "build_uuid",
    "clock_of",
    "delivered",
    "flags_of",
    "intents_from_json",
    "intents_to_json",
    "new_producer_id",
    "producer_of",
    "read_committed",
    "read_uncommitted",
    "uuid_of",
    "value_uuid",
]
