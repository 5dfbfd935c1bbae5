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
    "DURATION_UNITS",
    "HEADER",
    "POSITIVE_DURATION",
    "TIME",
    "decode_bytes",
    "format_duration",
    "parse_duration",
    "parse_header",
    "parse_positive_duration",
    "parse_time_ns",
]

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)")
DURATION_UNITS = "ms, s, m, h, d, w"


def parse_duration(text: str) -> float:
    """Seconds from ``500ms``, ``30s``, ``5m``, ``2h``, ``7d``, ``1w``, ``1h30m`` (or ``0``).

    A number without a unit is refused (``0`` excepted): as in the nats CLI and Go, and
    because ``--retention-max-age 7`` read as seconds would expire a week's worth of data
    in 7 seconds.
    """
    text = text.strip()
    if _NUMBER.fullmatch(text):
        value = float(text)
        if value == 0:
            return 0.0
        if value < 0:
            raise ValueError(f"a duration must be >= 0, got {text!r}")
        raise ValueError(
            f"{text!r} has no unit: write {text}s, {text}m, {text}h, {text}d or {text}w "
            f"(units: {DURATION_UNITS})"
        )
    pos, total = 0, 0.0
    for match in _DURATION.finditer(text):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    if pos == 0 or pos != len(text):
        raise ValueError(
            f"not a duration: {text!r} (examples: 500ms, 30s, 5m, 1h30m, 7d, 2w; "
            f"units: {DURATION_UNITS})"
        )
    return total


def parse_positive_duration(text: str) -> float:
    """`parse_duration`, refusing zero (a timeout or a wait)."""
    seconds = parse_duration(text)
    if seconds <= 0:
        raise ValueError(f"must be more than 0, got {text!r} (examples: 500ms, 5s, 1m)")
    return seconds


def format_duration(seconds: float) -> str:
    """``seconds`` as the largest whole units, the way `parse_duration` reads them back."""
    if seconds <= 0:
        return "0s"
    ms = round(seconds * 1000)
    parts = []
    for unit, size in (("w", 604_800_000), ("d", 86_400_000), ("h", 3_600_000), ("m", 60_000)):
        count, ms = divmod(ms, size)
        if count:
            parts.append(f"{count}{unit}")
    whole, rest = divmod(ms, 1000)
    if whole:
        parts.append(f"{whole}s")
    if rest:
        parts.append(f"{rest}ms")
    return "".join(parts) or "0s"


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
            message = str(exc)
            if param is not None and ctx is not None and param.name is not None:
                source = ctx.get_parameter_source(param.name)
                envvar = getattr(param, "envvar", None)
                if source is click.core.ParameterSource.ENVIRONMENT and isinstance(envvar, str):
                    # The user typed no such flag: name where the value came from.
                    message += f" (from ${envvar})"
            self.fail(message, param, ctx)


DURATION = _Parsed("duration", parse_duration)
POSITIVE_DURATION = _Parsed("duration", parse_positive_duration)
TIME = _Parsed("time", parse_time_ns)
HEADER = _Parsed("name=value", parse_header)
