"""The cluster through its unary RPCs.

`metadata` (`MetadataCache`: the last FetchMetadata and leader routing, `call_leader`),
`admin` (create, delete, pause and read-only streams; the metadata RPCs; stored consumer
positions in the ``__cursors`` stream), `groups` (the consumer-group RPCs, and a member's
positions and assignment changes without IO), `feature_probe` (`FeatureDetector`: what
each broker supports, observed; the table is the public `liftbridge_client.features`).
"""
