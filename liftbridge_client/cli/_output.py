"""Terminal output: rich consoles, tables, JSON, and model objects as JSON-ready dicts."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from rich.console import Console
from rich.table import Table

from liftbridge_client.cli._params import decode_bytes
from liftbridge_client.models import Broker, Message, PartitionInfo, StreamInfo

__all__ = [
    "broker_dict",
    "console",
    "counted",
    "err_console",
    "iso",
    "message_dict",
    "partition_dict",
    "print_json",
    "print_table",
    "stream_dict",
]

console = Console(highlight=False)
if not console.is_terminal:
    # Piped tables keep whole names (rich assumes 80 columns off a terminal).
    console.width = 200
err_console = Console(stderr=True, highlight=False)


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """``1 message``, ``2 messages``: a count with its noun in the right number."""
    return f"{count} {noun if count == 1 else plural or noun + 's'}"


def print_json(data: object) -> None:
    """One JSON document on stdout (not through rich: exactly what scripts parse)."""
    sys.stdout.write(json.dumps(data) + "\n")
    sys.stdout.flush()


def print_table(
    title: str | None, columns: Sequence[str], rows: Iterable[Sequence[object]]
) -> None:
    table = Table(title=title, title_justify="left", show_lines=False)
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*("" if cell is None else str(cell) for cell in row))
    console.print(table)


def iso(ns: int) -> str | None:
    """ISO 8601 UTC of Unix nanoseconds, floored to microseconds (None for 0: never).

    Floored, so that ``subscribe --time`` given this text starts at that message.
    """
    if not ns:
        return None
    seconds = datetime.fromtimestamp(ns // 1_000_000_000, tz=UTC)
    moment = seconds.replace(microsecond=ns // 1000 % 1_000_000)
    return moment.isoformat(timespec="microseconds").replace("+00:00", "Z")


def _bytes_fields(name: str, data: bytes) -> dict[str, str | None]:
    text, b64 = decode_bytes(data)
    if b64 is None:
        return {name: text}
    return {name: None, f"{name}_base64": b64}


def message_dict(msg: Message) -> dict[str, Any]:
    """A message as JSON: bytes as UTF-8 text, or ``<field>_base64`` when not UTF-8."""
    headers: dict[str, Any] = {}
    for name, value in sorted(msg.headers.items()):  # stable output: the server's order varies
        text, b64 = decode_bytes(value)
        headers[name] = text if b64 is None else {"base64": b64}
    return {
        "stream": msg.stream,
        "partition": msg.partition,
        "offset": msg.offset,
        "timestamp_ns": msg.timestamp_ns,
        "timestamp": iso(msg.timestamp_ns),
        "subject": msg.subject,
        **_bytes_fields("key", msg.key),
        **_bytes_fields("value", msg.value),
        # The NATS reply subject, only when the message has one (a plain NATS publish with
        # a reply); the server's "reply" header said the same and is left out of headers.
        **({"reply_subject": msg.reply_subject} if msg.reply_subject else {}),
        "headers": headers,
    }


def broker_dict(broker: Broker) -> dict[str, Any]:
    return {
        "id": broker.id,
        "address": broker.address,
        "partitions": broker.partition_count,
        "leaders": broker.leader_count,
    }


def partition_dict(part: PartitionInfo) -> dict[str, Any]:
    return {
        "stream": part.stream,
        "partition": part.id,
        "leader": part.leader,
        "replicas": list(part.replicas),
        "isr": list(part.isr),
        "high_watermark": part.high_watermark,
        "newest_offset": part.newest_offset,
        "paused": part.paused,
        "readonly": part.readonly,
    }


def stream_dict(stream: StreamInfo, partitions: Mapping[int, PartitionInfo]) -> dict[str, Any]:
    return {
        "name": stream.name,
        "subject": stream.subject,
        "created": iso(stream.creation_timestamp_ns),
        "partitions": [partition_dict(p) for _, p in sorted(partitions.items())],
    }
