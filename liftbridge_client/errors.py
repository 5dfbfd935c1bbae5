"""Every exception liftbridge-client raises, under one root.

The tree::

    LiftbridgeError
    ├── InvalidInputError (also ValueError)  rejected client-side, nothing was sent
    ├── PartitionerError                     the user's partitioner raised; nothing was sent
    ├── ProtocolError                        bytes that do not decode
    │   ├── EnvelopeError
    │   │   ├── EnvelopeTooShortError
    │   │   ├── BadMagicError
    │   │   ├── UnsupportedVersionError
    │   │   ├── BadHeaderLengthError
    │   │   ├── CrcMismatchError
    │   │   ├── UnknownMessageTypeError
    │   │   └── UnexpectedMessageTypeError
    │   ├── PayloadDecodeError               the envelope was fine, the protobuf was not
    │   ├── FramingError                     an exactly-once framing that does not decode
    │   │   ├── FrameDesyncError             a fixed frame without its magic word
    │   │   └── TruncatedFrameError          the data ended inside a frame
    │   ├── ReplayMismatchError              a sequencer replay outside its range
    │   └── OutOfOrderAckError               pipelined messages landed out of order; retriable
    ├── ConnectionClosedError                the client was closed or lost its connection
    ├── NoBrokerAvailableError               no seed or broker could be reached; retriable
    │   └── NatsUnreachableError             no NATS server of ``nats_servers`` could be reached
    ├── FeatureNotSupportedError           the broker(s) lack what a call needs
    ├── InflightLimitError                   publish_nowait with a full in-flight window; retriable
    ├── LiftbridgeTimeoutError (also builtins.TimeoutError)  retriable
    │   └── AckTimeoutError                  no ack within the ack wait time
    ├── PublishError                         the server refused a published message
    │   ├── IncorrectOffsetError             optimistic concurrency check failed
    │   ├── MessageTooLargeError
    │   ├── EncryptionFailedError
    │   ├── ReadonlyPartitionError
    │   └── PartitionPausedError             a NATS publish to a paused partition
    ├── SubscriptionEnded                    why the server ended a subscription
    │   ├── StopPositionReached
    │   ├── ReadonlyPartitionEnd
    │   ├── StreamDeletedEnd
    │   └── PartitionPausedEnd
    ├── DataLossError                        offsets a Spark read needed are gone
    └── ServerError                          a gRPC status from the server
        ├── InvalidArgumentError
        ├── NotFoundError
        │   └── StreamNotLoadedError         listed lately; retriable after a metadata refresh
        ├── AlreadyExistsError
        ├── FailedPreconditionError
        │   └── NotLeaderError               retriable after a metadata refresh
        ├── ResourceExhaustedError
        ├── PermissionDeniedError            incl. the server's plain "not authorized"
        ├── UnauthenticatedError
        ├── UnavailableError                 retriable after a metadata refresh
        ├── DeadlineExceededError            also builtins.TimeoutError; retriable
        ├── RequestCancelledError            CANCELLED
        ├── InternalServerError
        │   └── CursorsDisabledError         the server has no cursors stream
        └── UnknownServerError

Every class carries ``retriable``: True when sending the same request again may
succeed (after a metadata refresh where ``invalid_metadata`` is True too). Both
flags hold where the tree says so and are inherited by subclasses.
"""

# tests/unit/test_errors.py checks the tree above against the classes.

from __future__ import annotations

import builtins
import re

# Control characters but tab and newline (C0, DEL and C1), the line and paragraph
# separators, and the bidirectional overrides and isolates (text that reorders what follows
# it on a terminal): shown escaped in messages.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


class LiftbridgeError(Exception):
    """Root of every error this package raises."""

    retriable: bool = False
    invalid_metadata: bool = False

    def __str__(self) -> str:
        # A message quotes names and server text as given: a NUL or an escape sequence
        # in them would reach logs and terminals raw, so such characters show as \xNN
        # (or \uNNNN).
        text = super().__str__()
        return _CONTROL.sub(_escaped, text) if _CONTROL.search(text) else text


class InvalidInputError(LiftbridgeError, ValueError):
    """An argument was rejected before anything was sent to the server."""


class PartitionerError(LiftbridgeError):
    """The partitioner given to the client (or to the call) raised; nothing was sent.

    Its exception is the ``__cause__``. (A partitioner that returns a partition the
    stream does not have is an `InvalidInputError`.)
    """


# ---------------------------------------------------------------- wire


class ProtocolError(LiftbridgeError):
    """Bytes received (or given to a decoder) do not follow the protocol."""


class EnvelopeError(ProtocolError):
    """A Liftbridge envelope header failed validation."""


class EnvelopeTooShortError(EnvelopeError):
    """Fewer bytes than the 8-byte minimum header."""


class BadMagicError(EnvelopeError):
    """The first four bytes are not the Liftbridge magic number."""


class UnsupportedVersionError(EnvelopeError):
    """The envelope version byte is not one this client understands."""


class BadHeaderLengthError(EnvelopeError):
    """HeaderLen is below 8, beyond the data, or not 12 while the CRC flag is set."""


class CrcMismatchError(EnvelopeError):
    """The payload's CRC-32C does not match the one in the header."""


class UnknownMessageTypeError(EnvelopeError):
    """The MsgType byte names no known message type."""


class UnexpectedMessageTypeError(EnvelopeError):
    """A valid envelope of another message type than the caller expected."""


class PayloadDecodeError(ProtocolError):
    """The envelope was valid but its protobuf payload did not decode."""


# ---------------------------------------------------------------- connection


class ConnectionClosedError(LiftbridgeError):
    """The client was closed, or lost its connection, before the operation finished."""


class NoBrokerAvailableError(LiftbridgeError):
    """None of the seed or known broker addresses could be reached."""

    retriable = True


class NatsUnreachableError(NoBrokerAvailableError):
    """None of the NATS servers (``nats_servers``) could be reached when connecting.

    The message names the cause for each address (a host that does not resolve, a
    refused connection, another protocol on the port, NATS's own refusal), chained to
    it. A subclass of `NoBrokerAvailableError`, so code that catches that still does.
    """


class InflightLimitError(LiftbridgeError):
    """``max_inflight`` publishes are already awaiting acks; wait (or use send()) and retry."""

    retriable = True


class FeatureNotSupportedError(LiftbridgeError):
    """A call needs a server feature that the broker(s) serving it do not have.

    ``feature`` names the client feature (see the compatibility docs) and ``broker``
    the broker that lacks it, when one is known. Nothing was sent that could have
    changed the server's state.
    """

    def __init__(self, message: str, *, feature: str = "", broker: str = "") -> None:
        super().__init__(message)
        self.feature = feature
        self.broker = broker


class LiftbridgeTimeoutError(LiftbridgeError, builtins.TimeoutError):
    """An operation did not finish within its deadline."""

    retriable = True


class AckTimeoutError(LiftbridgeTimeoutError):
    """No ack arrived for a published message within the ack wait time.

    The message may or may not have been stored: acks are at-least-once.
    """


# ---------------------------------------------------------------- publish


class PublishError(LiftbridgeError):
    """The server refused a published message (an ack or async error said so)."""


class IncorrectOffsetError(PublishError):
    """The partition's next offset did not match the message's expected offset."""


class MessageTooLargeError(PublishError):
    """The message is larger than the server accepts."""


class EncryptionFailedError(PublishError):
    """The server could not encrypt the message at rest."""


class ReadonlyPartitionError(PublishError):
    """The partition is read-only.

    Over gRPC the server refuses the message; over NATS it drops it without an answer,
    and the client raises this once the publish's ack wait ran out and the partition's
    metadata says it is read-only (chained to the `AckTimeoutError`).
    """


class PartitionPausedError(PublishError):
    """A NATS publish went to a paused partition: nobody received it.

    A paused partition listens on NATS again only once it is resumed (a gRPC publish or
    a subscribe resumes it; over gRPC this error never happens). Raised once the
    publish's ack wait ran out and the metadata says the partition is paused, chained to
    the `AckTimeoutError`.
    """


# ---------------------------------------------------------------- subscriptions


class SubscriptionEnded(LiftbridgeError):
    """A subscription ended for a reason the server states (`Subscription.end_reason`).

    `StopPositionReached` and `ReadonlyPartitionEnd` end iteration cleanly;
    `StreamDeletedEnd` and `PartitionPausedEnd` are raised by the iteration.
    """


class StopPositionReached(SubscriptionEnded):
    """The stop position was reached (or, with ``stop=LATEST``, the partition was empty).

    Iteration ends cleanly.
    """


class ReadonlyPartitionEnd(SubscriptionEnded):
    """The end of a read-only partition was reached. Iteration ends cleanly."""


class StreamDeletedEnd(SubscriptionEnded):
    """The stream was deleted while subscribed. Raised by the iteration."""


class PartitionPausedEnd(SubscriptionEnded):
    """The partition was paused while subscribed. Raised by the iteration.

    Subscribe with ``resume=True`` to resume a paused partition.
    """


# ---------------------------------------------------------------- gRPC status


class ServerError(LiftbridgeError):
    """The server answered a call with a non-OK gRPC status."""

    code_name: str = "UNKNOWN"

    def __init__(self, message: str, *, details: str = "") -> None:
        super().__init__(message)
        self.details = details


class InvalidArgumentError(ServerError):
    code_name = "INVALID_ARGUMENT"


class NotFoundError(ServerError):
    code_name = "NOT_FOUND"


class StreamNotLoadedError(NotFoundError):
    """NOT_FOUND for a stream the metadata listed lately, and has not yet left out of a
    few answers in a row over a few seconds: most likely a broker that restarted and has
    not reloaded its streams (it answers so for a second or two). Sending again, after a
    moment, may succeed; once the metadata proves the stream gone, the client raises
    plain `NotFoundError`."""

    retriable = True
    invalid_metadata = True


class AlreadyExistsError(ServerError):
    code_name = "ALREADY_EXISTS"


class FailedPreconditionError(ServerError):
    code_name = "FAILED_PRECONDITION"


class NotLeaderError(FailedPreconditionError):
    """The broker is not the leader for the partition; metadata is stale."""

    retriable = True
    invalid_metadata = True


class ResourceExhaustedError(ServerError):
    code_name = "RESOURCE_EXHAUSTED"


class PermissionDeniedError(ServerError):
    code_name = "PERMISSION_DENIED"


class UnauthenticatedError(ServerError):
    code_name = "UNAUTHENTICATED"


class UnavailableError(ServerError):
    code_name = "UNAVAILABLE"
    retriable = True
    invalid_metadata = True


class DeadlineExceededError(ServerError, builtins.TimeoutError):
    code_name = "DEADLINE_EXCEEDED"
    retriable = True


class RequestCancelledError(ServerError):
    code_name = "CANCELLED"


class InternalServerError(ServerError):
    code_name = "INTERNAL"


class CursorsDisabledError(InternalServerError):
    """Cursors are off on the server: it has no ``__cursors`` stream.

    The server answers cursor calls with INTERNAL "Cursors stream does not exist"
    until ``cursors.stream.partitions`` is set to 1 or more in its configuration.
    """


class UnknownServerError(ServerError):
    code_name = "UNKNOWN"


class DataLossError(LiftbridgeError):
    """Offsets a reader needed are gone: retention removed them, or the stream was
    recreated with fewer messages (the Spark source's ``failOnDataLoss``)."""


class FramingError(ProtocolError):
    """A value that the exactly-once framing of its stream cannot decode."""


class FrameDesyncError(FramingError):
    """A fixed frame did not start with its magic word (66 33 93 36).

    ``skipped`` holds the bytes discarded up to the next magic word (or up to the last 3
    bytes, which may start one); reading may continue after it.
    """

    def __init__(self, message: str, skipped: bytes = b"") -> None:
        super().__init__(message)
        self.skipped = skipped


class TruncatedFrameError(FramingError):
    """The data ended inside a frame (or inside a frame header)."""


class ReplayMismatchError(ProtocolError):
    """Messages handed to a Sequencer replay lie outside the range it asked for."""


class OutOfOrderAckError(ProtocolError):
    """The acks of one producer's pipelined messages show offsets that do not rise with
    their clocks: readers would drop a message, so its rows go out again."""

    retriable = True
