"""Publishing, from a call to its ack.

Where a publish is queued and sent: `publisher` (`Publisher`: the queue, the one sender
loop, the direct path and the choice of route). Where it is written: the routes,
`nats_route` (`NatsPublisher`: enveloped messages on the partition's NATS subject, acks on
the client's inbox), `grpc_route` (`PublishStream`: PublishAsync on grpc.aio; and
PublishToSubject) and `h2_route` (`H2PublishStream`: PublishAsync on the h2 transport).
Where it is acked: `acks` (`Correlator`: correlation id -> `PublishFuture`, ack timeouts,
the in-flight window).

Beside them: `args` (the per-call keywords, their checks and the queued `Item`), `wire`
(PublishAsync's plain request and ack bytes without protobuf), `outages` (when a publish
stream to a broken broker is tried again).
"""
