"""Parsing of command line values, without IO: durations, times, headers, encodings.

Each parser raises ``ValueError`` with a message for the user; the click types wrap
them so a bad value is a usage error naming the option.
"""

from __future__ import annotations

import base64
import re
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

import click

__all__ = [
    "DURATION",
    "HEADER",
    "TIME",
    "decode_bytes",
    "parse_duration",
    "parse_header",
    "parse_time_ns",
]

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")


def parse_duration(text: str) -> float:
    """Seconds from ``1.5`` (seconds), ``500ms``, ``30s``, ``5m``, ``2h``, ``1d`` or ``1h30m``."""
    text = text.strip()
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        if not seconds >= 0:  # negative or NaN
            raise ValueError(f"a duration must be >= 0, got {text!r}")
        return seconds
    pos, total = 0, 0.0
    for match in _DURATION.finditer(text):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    if pos == 0 or pos != len(text):
        raise ValueError(f"not a duration: {text!r} (examples: 1.5, 500ms, 30s, 5m, 1h30m)")
    return total


def parse_time_ns(text: str) -> int:
    """Unix nanoseconds from ISO 8601 (no offset means UTC) or ``@<unix seconds>``."""
    text = text.strip()
    if text.startswith("@"):
        # Decimal, not float: a float has no nanoseconds left at today's Unix times.
        try:
            seconds = Decimal(text[1:])
        except InvalidOperation:
            seconds = Decimal("NaN")
        if not seconds.is_finite():
            raise ValueError(f"not a unix time: {text!r} (example: @1700000000.5)")
        return int(seconds * 1_000_000_000)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(
            f"not a time: {text!r} (examples: 2026-11-23T12:00:00Z, @1700000000)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp()) * 1_000_000_000 + moment.microsecond * 1000


def parse_header(text: str) -> tuple[str, bytes]:
    """``name=value`` into ``(name, value bytes)``; the value may be empty."""
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise ValueError(f"a header is name=value, got {text!r}")
    return name, value.encode()


def decode_bytes(data: bytes) -> tuple[str | None, str | None]:
    """``(text, None)`` for UTF-8 data, ``(None, base64)`` for anything else."""
    try:
        return data.decode(), None
    except UnicodeDecodeError:
        return None, base64.b64encode(data).decode("ascii")


class _Parsed(click.ParamType[Any]):
    """A click type from a parser function (ValueError -> usage error naming the option)."""

    def __init__(self, name: str, parser: Any) -> None:
        self.name = name
        self._parser = parser

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value  # a default already converted
        try:
            return self._parser(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


DURATION = _Parsed("duration", parse_duration)
TIME = _Parsed("time", parse_time_ns)
HEADER = _Parsed("name=value", parse_header)
