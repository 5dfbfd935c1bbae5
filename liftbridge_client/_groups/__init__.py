"""What `liftbridge_client.groups` (the consumer) builds on.

`rpc` (the consumer-group RPCs, with the errors a member acts on) and `state` (positions
per partition and assignment changes, no IO).
"""
