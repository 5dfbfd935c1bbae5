"""Publishing, from a call to its ack.

Where a publish is checked, queued and sent: `publisher` (`Publisher`: the checks, the
queue, the one sender loop; `TimeoutCheck`: why a publish got no ack). Where it leaves
the client: behind one interface, `route` (`Route`: prepare, direct, submit, send,
usable, close; the queued `Item`), one module per transport: `nats` (`NatsRoute` over
`NatsPublisher`: enveloped messages on the partition's NATS subject, acks on the
client's inbox) and `leaders` (`LeaderRoute`: one PublishAsync stream per leader), over
`grpc` (`PublishStream` on grpc.aio; PublishToSubject) or `h2` (`H2PublishStream` on the
h2 transport), with `outages` pacing the brokers that refused a stream. Where it is
acked: `acks` (`Correlator`: correlation id -> `PublishFuture`, ack timeouts, the
in-flight window). Beside them, `wire`: PublishAsync's plain request and ack bytes
without protobuf (pure).
"""
