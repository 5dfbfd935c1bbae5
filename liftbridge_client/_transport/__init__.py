"""How the client reaches brokers, and how what they report becomes a typed error.

`grpc` (the gRPC status, ack error and PublishAsync error tables; `BrokerPool`: one
grpc.aio channel per broker, deadlines, bounded retries), `probe` (why an address could
not be reached), `nats` (the NATS connection's authentication, TLS and teardown; short
cuts into nats-py for the publish hot path, each checking nats-py's internals first and
falling back), `h2` (Subscribe and PublishAsync as gRPC over asyncio and the ``h2``
library). Nothing here imports the packages that use it (`_publish`, `_cluster`, ...), and
only a client given NATS servers imports `nats` (and nats-py with it).
"""
