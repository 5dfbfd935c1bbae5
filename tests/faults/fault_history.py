"""The history of one fault run: every operation, observation and fault, as JSON lines.

Jepsen's model: a client operation is an ``invoke`` followed by ``ok`` (it happened),
``fail`` (it certainly did not) or ``info`` (unknown: a timeout, a lost connection; the
message may or may not be stored). Liftbridge tells a client almost nothing certain about
a failed publish, so the workloads record failures as ``info``. Besides operations:

- ``sub``: a message a live subscriber received (``offset``, ``value``);
- ``read``: a final read after healing (``f`` = ``leader``, ``replica`` or ``committed``;
  ``data.entries`` = ``[[partition, offset, value], ...]``, ``data.node`` for replicas);
- ``nemesis``: a fault starting (``f`` = ``start``) or healed (``f`` = ``stop``), with its
  kind in ``value`` and its targets in ``data``;
- ``note``: phases of the run (``setup``, ``healed``, ``recovered``, ...).

``t`` is seconds since the run started (monotonic), so the file can be read as a timeline;
``wall`` on the first event anchors it to the server logs. Events are written as they
happen, so a run that crashes still leaves its history.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

KINDS = frozenset({"invoke", "ok", "fail", "info", "sub", "read", "nemesis", "note"})


@dataclass(slots=True)
class Event:
    """One line of a history."""

    t: float
    type: str
    process: str = ""
    f: str = ""
    stream: str | None = None
    partition: int | None = None
    offset: int | None = None
    value: str | None = None
    error: str | None = None
    data: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        """The event as one JSON object, without empty fields."""
        out: dict[str, Any] = {"t": round(self.t, 4), "type": self.type}
        for key in ("process", "f", "stream", "partition", "offset", "value", "error"):
            val = getattr(self, key)
            if val not in (None, ""):
                out[key] = val
        if self.data:
            out["data"] = self.data
        return json.dumps(out, separators=(",", ":"))

    @classmethod
    def from_json(cls, line: str) -> Event:
        """Parse one line written by :meth:`to_json`."""
        raw = json.loads(line)
        if raw.get("type") not in KINDS:
            raise ValueError(f"unknown event type in {line[:80]!r}")
        return cls(
            t=float(raw["t"]),
            type=raw["type"],
            process=raw.get("process", ""),
            f=raw.get("f", ""),
            stream=raw.get("stream"),
            partition=raw.get("partition"),
            offset=raw.get("offset"),
            value=raw.get("value"),
            error=raw.get("error"),
            data=raw.get("data", {}),
        )


class Recorder:
    """Appends events to a history file as they happen (and keeps them in memory)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.events: list[Event] = []
        self._t0 = time.monotonic()
        self._file: IO[str] = path.open("w", buffering=1)  # line-buffered: crash-safe
        self.emit("note", f="start", data={"wall": time.time()})

    def now(self) -> float:
        """Seconds since the run started."""
        return time.monotonic() - self._t0

    def emit(self, type_: str, **fields: Any) -> Event:
        """Record an event now."""
        event = Event(t=self.now(), type=type_, **fields)
        self.events.append(event)
        self._file.write(event.to_json() + "\n")
        return event

    def close(self) -> None:
        """Flush and close the file."""
        self._file.close()


def load(path: Path) -> list[Event]:
    """Every event of a history file, in order."""
    with path.open() as handle:
        return list(parse(handle))


def parse(lines: Iterable[str]) -> Iterator[Event]:
    """Events from JSON lines (blank lines skipped)."""
    for line in lines:
        if line.strip():
            yield Event.from_json(line)


def error_name(exc: BaseException) -> str:
    """How a history names an exception: its class, then its message, shortened."""
    text = str(exc).replace("\n", " ")
    return f"{type(exc).__name__}: {text[:160]}" if text else type(exc).__name__
