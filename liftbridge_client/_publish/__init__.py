"""Publishing, from a call to its ack, in 11 modules (each imports only the ones after it).

- `publisher`: `Publisher`, the queue and its one sender loop. Each verb (``publish``,
  ``send``, ``publish_nowait``) takes the client's typed arguments and picks the path:
  the one-step path for a plain publish (its route's ``direct``), else the general path,
  whose arguments `_publish_args` checks once, then the queue.
- `timeouts`: `TimeoutCheck`, why a NATS publish got no ack (one metadata check per
  burst of timeouts).
- `strand`: `Strand` and `Detour`, when NATS publishes go over the leaders' streams
  instead (the NATS server the client is on cut off from their leaders).
- `route`: what a publish is on its way out (`Item`), the interface of the ways out
  (`Route`: prepare, direct, submit, send, usable, close) and what they share with the
  publisher (`Slots`: correlation ids, the ack wait, the sender's queue).
- One module per transport: `nats` (`NatsRoute` over `NatsPublisher`: enveloped
  messages on the partition's NATS subject, acks on the client's inbox) and `leaders`
  (`LeaderRoute`: one PublishAsync stream per leader), over `grpc` (`PublishStream` on
  grpc.aio; PublishToSubject) or `h2` (`H2PublishStream` on the h2 transport), with
  `outages` pacing the brokers that refused a stream.
- `acks`: where a publish is acked (`Correlator`: correlation id -> `PublishFuture`, ack
  timeouts, the in-flight window).
- `wire`: PublishAsync's plain request and ack bytes without protobuf (pure).
"""
