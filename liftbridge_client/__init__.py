"""liftbridge-client: an asyncio client for Liftbridge.

Start with `Client`; everything it returns is defined in `models`, everything
it raises in `errors`, and its settings in `options`.
"""

from __future__ import annotations

from liftbridge_client._publish.acks import PublishFuture
from liftbridge_client._version import __version__
from liftbridge_client.client import Client
from liftbridge_client.errors import LiftbridgeError
from liftbridge_client.groups import AutoOffset, Consumer, ConsumerOptions
from liftbridge_client.models import (
    Ack,
    AckPolicy,
    Broker,
    ConsumerGroupInfo,
    EventTimestamps,
    Message,
    Metadata,
    PartitionInfo,
    PublishStats,
    StartPosition,
    StopPosition,
    StreamInfo,
)
from liftbridge_client.options import (
    ClientOptions,
    NatsAuth,
    RetryPolicy,
    StreamConfig,
    StreamTransport,
    TLSConfig,
    TracingOptions,
    Transport,
)
from liftbridge_client.partitioning import KeyPartitioner, Partitioner, RoundRobinPartitioner
from liftbridge_client.subscription import Subscription

__all__ = [
    "Ack",
    "AckPolicy",
    "AutoOffset",
    "Broker",
    "Client",
    "ClientOptions",
    "Consumer",
    "ConsumerGroupInfo",
    "ConsumerOptions",
    "EventTimestamps",
    "KeyPartitioner",
    "LiftbridgeError",
    "Message",
    "Metadata",
    "NatsAuth",
    "PartitionInfo",
    "Partitioner",
    "PublishFuture",
    "PublishStats",
    "RetryPolicy",
    "RoundRobinPartitioner",
    "StartPosition",
    "StopPosition",
    "StreamConfig",
    "StreamInfo",
    "StreamTransport",
    "Subscription",
    "TLSConfig",
    "TracingOptions",
    "Transport",
    "__version__",
]
