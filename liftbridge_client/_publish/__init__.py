"""Publishing, from a call to its ack.

Where a publish is queued and sent: `publisher` (`Publisher`: the checks, the queue, the
one sender loop). Where it leaves the client: `routes`, behind one interface
(`item.Route`: prepare, direct, submit, send, usable, close): `NatsRoute` over
`nats_route.NatsPublisher` (enveloped messages on the partition's NATS subject, acks on the
client's inbox) and `LeaderRoute` over one PublishAsync stream per leader
(`grpc_route.PublishStream` on grpc.aio, `h2_route.H2PublishStream` on the h2 transport).
Where it is acked: `acks` (`Correlator`: correlation id -> `PublishFuture`, ack timeouts,
the in-flight window).

Beside them: `item` (the queued `Item`, and the `Route` and `Slots` protocols), `args`
(the per-call keywords and their checks), `wire` (PublishAsync's plain request and ack
bytes without protobuf), `outages` (when a stream to a broken broker is tried again),
`timeouts` (why a NATS publish got no ack).
"""
