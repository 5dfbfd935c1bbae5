"""Exit statuses of the `liftbridge` command, and the error a status stands for.

Scripts can rely on them; docs/cli.md lists them.
"""

from __future__ import annotations

import enum

from liftbridge_client import errors

__all__ = ["ExitStatus", "status_for"]


class ExitStatus(enum.IntEnum):
    OK = 0
    ERROR = 1  # any other error
    USAGE = 2  # bad arguments (click), or a value the client rejected (InvalidInputError)
    UNREACHABLE = 3  # no broker or NATS server reached, the connection lost, a stream not reloaded
    NOT_FOUND = 4  # the stream or partition does not exist (or was deleted)
    ALREADY_EXISTS = 5  # streams create: the name is taken
    TIMEOUT = 6  # no answer or ack in time
    REFUSED = 7  # the server refused a message (read-only, too large, offset, encryption)
    UNSUPPORTED = 8  # the server lacks a feature the command needs (FeatureNotSupportedError)
    NO_MESSAGES = 9  # subscribe without --follow: no message at the position asked for
    INTERRUPTED = 130  # Ctrl-C, as shells report SIGINT


# Most specific first: the first class the error is an instance of decides.
_STATUSES: tuple[tuple[type[BaseException], ExitStatus], ...] = (
    (errors.InvalidInputError, ExitStatus.USAGE),
    (errors.NoBrokerAvailableError, ExitStatus.UNREACHABLE),
    (errors.ConnectionClosedError, ExitStatus.UNREACHABLE),
    (errors.UnavailableError, ExitStatus.UNREACHABLE),
    (errors.StreamNotLoadedError, ExitStatus.UNREACHABLE),  # a broker that restarted
    (errors.NotFoundError, ExitStatus.NOT_FOUND),
    (errors.StreamDeletedEnd, ExitStatus.NOT_FOUND),
    (errors.AlreadyExistsError, ExitStatus.ALREADY_EXISTS),
    (errors.LiftbridgeTimeoutError, ExitStatus.TIMEOUT),
    (errors.DeadlineExceededError, ExitStatus.TIMEOUT),
    (errors.PublishError, ExitStatus.REFUSED),
    (errors.FeatureNotSupportedError, ExitStatus.UNSUPPORTED),
)


def status_for(exc: BaseException) -> ExitStatus:
    """The exit status reporting ``exc``."""
    for kind, status in _STATUSES:
        if isinstance(exc, kind):
            return status
    return ExitStatus.ERROR
