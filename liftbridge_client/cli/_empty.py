"""Why a ``subscribe`` without ``--follow`` printed nothing, in the command's terms.

A read that ends without a message is told on stderr, never left silent. When the
user named a position (``--offset``, ``--time``, ``--since``, a stop position) that no
message meets, the exit status is `ExitStatus.NO_MESSAGES`; reading an empty partition
from its start or end asked for whatever there is, and "nothing" is that answer
(exit 0, as ``cat`` of an empty file).
"""

from __future__ import annotations

from dataclasses import dataclass

from liftbridge_client.cli._exit import ExitStatus
from liftbridge_client.cli._output import iso
from liftbridge_client.cli._params import format_duration

__all__ = ["Request", "why_empty"]


@dataclass(frozen=True, slots=True)
class Request:
    """The positions a subscribe asked for (the flags given, or None)."""

    stream: str
    partition: int
    offset: int | None = None
    time_ns: int | None = None
    since: float | None = None  # seconds, --since
    stop_offset: int | None = None
    stop_time_ns: int | None = None

    @property
    def where(self) -> str:
        return f"partition {self.partition} of stream {self.stream}"

    @property
    def positioned(self) -> bool:
        return any(
            v is not None
            for v in (self.offset, self.time_ns, self.since, self.stop_offset, self.stop_time_ns)
        )


def why_empty(
    req: Request, newest_offset: int, newest_time_ns: int | None
) -> tuple[str, ExitStatus]:
    """The ``no messages: ...`` line and the exit status of a read that printed nothing.

    ``newest_offset`` is the partition's newest offset (-1: empty) and ``newest_time_ns``
    that message's timestamp, when it could be read.
    """
    if newest_offset < 0:
        status = ExitStatus.NO_MESSAGES if req.positioned else ExitStatus.OK
        return f"no messages: {req.where} is empty (-f waits for new ones)", status
    newest = f"the newest message of {req.where} is offset {newest_offset}"
    if newest_time_ns:
        newest += f", from {iso(newest_time_ns)}"
    if req.offset is not None and req.offset > newest_offset:
        return (
            f"no messages: --offset {req.offset} is past the end ({newest}; -f waits for it)",
            ExitStatus.NO_MESSAGES,
        )
    if req.time_ns is not None:
        return (
            f"no messages at or after --time {iso(req.time_ns)}: {newest}",
            ExitStatus.NO_MESSAGES,
        )
    if req.since is not None:
        return (
            f"no messages in the last {format_duration(req.since)} (--since): {newest}",
            ExitStatus.NO_MESSAGES,
        )
    if req.stop_time_ns is not None:
        return (
            f"no messages before --stop-time {iso(req.stop_time_ns)} from the start "
            f"position: {newest}",
            ExitStatus.NO_MESSAGES,
        )
    # Nothing named explains it: e.g. retention removed the messages meanwhile.
    return f"no messages between the start and the stop position: {newest}", ExitStatus(
        ExitStatus.NO_MESSAGES if req.positioned else ExitStatus.OK
    )
