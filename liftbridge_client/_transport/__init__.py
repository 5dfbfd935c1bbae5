"""How the client reaches brokers, and how what they report becomes a typed error.

`grpc` (`BrokerPool`: one grpc.aio channel per broker, deadlines, bounded retries), `h2`
(Subscribe and PublishAsync as gRPC over asyncio and the ``h2`` library), `nats_connect`
(the NATS connection's authentication and TLS as nats-py arguments; dropping its socket and
tasks on close), `nats_raw` (short cuts into nats-py for the NATS publish hot path; like
`h2`'s fast path, each checks nats-py's internals first and falls back), `errors_map` (gRPC
statuses, ack errors and PublishAsync errors -> `liftbridge_client.errors`). Nothing here
imports the packages that use it (`_publish`, `_cluster`, `_groups`, ...).
"""
