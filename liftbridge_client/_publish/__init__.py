"""Publishing, from a call to its ack, in three files.

Where a publish is checked, queued and sent: `publisher` (`Publisher`: the checks, the
queue, the one sender loop; `TimeoutCheck`: why a publish got no ack). Where it leaves
the client: `routes`, behind one interface (`Route`: prepare, direct, submit, send,
usable, close), with `NatsRoute` over `NatsPublisher` (enveloped messages on the
partition's NATS subject, acks on the client's inbox) and `LeaderRoute` over one
PublishAsync stream per leader (`PublishStream` on grpc.aio, `H2PublishStream` on the h2
transport). Where it is acked: `acks` (`Correlator`: correlation id -> `PublishFuture`,
ack timeouts, the in-flight window). Beside them, `wire`: PublishAsync's plain request
and ack bytes without protobuf (pure).
"""
