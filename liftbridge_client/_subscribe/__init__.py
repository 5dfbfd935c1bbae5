"""What `liftbridge_client.subscription` builds on.

`spec` (`SubscribeSpec`: validated arguments, the SubscribeRequest, what a status ending
a subscription means; no IO) and `reverse` (`ReverseReader`: reverse reads emulated with
forward windows on servers that ignore ``SubscribeRequest.reverse``).
"""
