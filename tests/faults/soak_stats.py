"""The soak's arithmetic, pure functions only: percentiles, trend slopes and the report.

A soak passes when its resource lines are flat. "Flat" is decided on the second half of
the run (the first half is warm-up: caches, connection pools and the allocator settle) by
the least-squares slope of each series against time, compared with ``THRESHOLDS``:

- client RSS: 0.5 MiB/min (a leak of 1 KiB per message at 200 msg/s is 12 MiB/min; what
  stays below this is allocator noise and the soak's own bookkeeping, 1 byte per value);
- open file descriptors and asyncio tasks: 0.25/min (one leaked per fault, every 60-90 s,
  is 0.7-1/min);
- OS threads: 0.1/min (gRPC's and the default executor's pools are bounded);
- Python's allocated blocks (``sys.getallocatedblocks``): 1500/min. RSS lags what Python
  frees and keeps what it once took, so a leak of objects shows here first and clearer
  (one exactly-once reader ring of 4096 messages is about 47,000 blocks, 3-4 MiB).

Latency percentiles and server RSS/fds are reported with their slopes but not judged:
faults dominate them, and the servers are not the code under test.

``verdict`` has three outcomes: FAIL (a judged series grows or an end check failed), PASS
(every judged series was judged, and flat, and the end checks passed) and NOT JUDGED (the
end checks passed but a series could not be judged: the run was too short). NOT JUDGED
is no pass: a 5-minute soak has 2.5 minutes in its judged half, too short to tell a
leak from warm-up.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

# Per minute, over the second half of the run.
THRESHOLDS: Mapping[str, float] = {
    "rss_mib": 0.5,
    "fds": 0.25,
    "tasks": 0.25,
    "threads": 0.1,
    "py_blocks": 1500.0,
}
MIN_TREND_SAMPLES = 4  # fewer samples in the judged half: no verdict, said so
# A judged half shorter than this is reported, not judged: warm-up alone lasts minutes
# (the exactly-once reader's ring of 4096 messages fills in 3.4 min at 20 msg/s).
MIN_TREND_MINUTES = 5.0


def percentile(values: Sequence[float], q: float) -> float | None:
    """The nearest-rank ``q``-th percentile (0 < q <= 100) of ``values``; None if empty."""
    if not 0 < q <= 100:
        raise ValueError(f"percentile {q} is out of (0, 100]")
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def slope(points: Sequence[tuple[float, float]]) -> float | None:
    """Least-squares slope of y against x; None with fewer than two distinct x."""
    if len(points) < 2:
        return None
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    sxx = sum((x - mean_x) ** 2 for x, _ in points)
    if sxx == 0:
        return None
    sxy = sum((x - mean_x) * (y - mean_y) for x, y in points)
    return sxy / sxx


@dataclasses.dataclass(frozen=True)
class Trend:
    """One series' slope over the judged half, per minute."""

    metric: str
    per_min: float | None
    threshold: float | None  # None: reported, not judged
    samples: int
    first: float | None  # the fitted line at the start and end of the judged half
    last: float | None
    minutes: float = 0.0  # how long the judged half lasts

    @property
    def flagged(self) -> bool:
        """Growing faster than its threshold."""
        return self.judged and self.per_min is not None and self.per_min > (self.threshold or 0)

    @property
    def judged(self) -> bool:
        """Whether there were enough samples, over long enough, to judge it."""
        return (
            self.threshold is not None
            and self.samples >= MIN_TREND_SAMPLES
            and self.minutes >= MIN_TREND_MINUTES
        )

    def describe(self) -> str:
        """One line: slope, threshold and verdict."""
        if self.per_min is None:
            return f"{self.metric}: no slope ({self.samples} samples)"
        where = f"{self.first:.1f} -> {self.last:.1f}" if self.first is not None else ""
        if self.threshold is None:
            verdict = "reported"
        elif not self.judged:
            verdict = (
                f"not judged ({self.samples} samples over {self.minutes:.1f} min; "
                f"needs {MIN_TREND_SAMPLES} over {MIN_TREND_MINUTES:g})"
            )
        else:
            verdict = "GROWING" if self.flagged else "flat"
        limit = f" (limit {self.threshold:g}/min)" if self.threshold is not None else ""
        return f"{self.metric}: {self.per_min:+.3f}/min{limit}, {where}: {verdict}"


def judged_half(
    samples: Sequence[Mapping[str, Any]], warmup: float = 0.5
) -> list[Mapping[str, Any]]:
    """The samples after the warm-up share of the run's duration (by their ``t``)."""
    if not samples:
        return []
    end = max(float(s["t"]) for s in samples)
    start = end * warmup
    return [s for s in samples if float(s["t"]) >= start]


def trend(samples: Sequence[Mapping[str, Any]], metric: str, *, warmup: float = 0.5) -> Trend:
    """The slope per minute of ``metric`` over the samples after the warm-up."""
    points = [
        (float(s["t"]) / 60.0, float(s[metric]))
        for s in judged_half(samples, warmup)
        if s.get(metric) is not None
    ]
    per_min = slope(points)
    first = last = None
    if per_min is not None:
        mean_x = sum(x for x, _ in points) / len(points)
        mean_y = sum(y for _, y in points) / len(points)
        first = mean_y + per_min * (points[0][0] - mean_x)
        last = mean_y + per_min * (points[-1][0] - mean_x)
    minutes = points[-1][0] - points[0][0] if points else 0.0
    return Trend(metric, per_min, THRESHOLDS.get(metric), len(points), first, last, minutes)


def client_trends(samples: Sequence[Mapping[str, Any]], *, warmup: float = 0.5) -> list[Trend]:
    """The judged client series, then the reported ones (latency)."""
    return [
        trend(samples, metric, warmup=warmup)
        for metric in (*THRESHOLDS, "lat_p50_ms", "lat_p99_ms")
    ]


def server_trends(samples: Sequence[Mapping[str, Any]], *, warmup: float = 0.5) -> list[Trend]:
    """Per server (``servers`` of each sample: name -> {rss_mib, fds}): reported only."""
    names = sorted({name for s in samples for name in s.get("servers", {})})
    out = []
    for name in names:
        for metric in ("rss_mib", "fds"):
            flat = [
                {"t": s["t"], f"{name} {metric}": s["servers"][name].get(metric)}
                for s in samples
                if name in s.get("servers", {})
            ]
            out.append(
                dataclasses.replace(trend(flat, f"{name} {metric}", warmup=warmup), threshold=None)
            )
    return out


def merge_servers(
    client: Sequence[Mapping[str, Any]], servers: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """Each client sample with the runner's sample nearest to it in wall time: the
    servers' figures (``servers``) and the faults of that interval (``fault``)."""
    merged = []
    for sample in client:
        row = dict(sample)
        if servers:
            near = min(servers, key=lambda s: abs(float(s["wall"]) - float(sample["wall"])))
            row["servers"] = near.get("servers", {})
            row["fault"] = near.get("fault", "")
        merged.append(row)
    return merged


TABLE_COLUMNS = (
    ("t", "t min", "{:.1f}"),
    ("fault", "fault", "{}"),
    ("rss_mib", "RSS MiB", "{:.1f}"),
    ("fds", "fds", "{}"),
    ("tasks", "tasks", "{}"),
    ("threads", "thr", "{}"),
    ("py_kblocks", "py kblocks", "{:.0f}"),
    ("acked", "acked", "{}"),
    ("consumed", "consumed", "{}"),
    ("lat_p50_ms", "p50 ms", "{:.1f}"),
    ("lat_p99_ms", "p99 ms", "{:.1f}"),
    ("lat_max_ms", "max ms", "{:.0f}"),
    ("errors_total", "errors", "{}"),
    ("server_rss_mib", "nodes RSS MiB", "{}"),
    ("server_fds", "nodes fds", "{}"),
)


def _cell(row: Mapping[str, Any], key: str, fmt: str) -> str:
    if key == "t":
        return fmt.format(float(row["t"]) / 60)
    if key == "py_kblocks":
        blocks = row.get("py_blocks")
        return "-" if blocks is None else fmt.format(blocks / 1000)
    if key == "errors_total":
        return str(sum(row.get("errors", {}).values()))
    if key in ("server_rss_mib", "server_fds"):
        metric = key.removeprefix("server_")
        servers = row.get("servers", {})
        return (
            "/".join(
                "-" if servers[n].get(metric) is None else f"{servers[n][metric]:.0f}"
                for n in sorted(servers)
                if n != "nats"
            )
            or "-"
        )
    value = row.get(key)
    if value is None or value == "":
        return "-"
    return fmt.format(value)


def interval_table(rows: Sequence[Mapping[str, Any]], every: int = 1) -> list[str]:
    """Markdown table lines, one row per ``every`` samples (the last one always)."""
    lines = [
        "| " + " | ".join(title for _, title, _ in TABLE_COLUMNS) + " |",
        "|" + "---|" * len(TABLE_COLUMNS),
    ]
    for index, row in enumerate(rows):
        if index % every and index != len(rows) - 1:
            continue
        lines.append("| " + " | ".join(_cell(row, k, f) for k, _, f in TABLE_COLUMNS) + " |")
    return lines


def failures(trends: Sequence[Trend], final: Mapping[str, Any] | None) -> list[str]:
    """Why the soak failed (empty: it passed): growing series and failed end checks."""
    why = [f"{t.metric} grows {t.per_min:+.3f}/min" for t in trends if t.flagged]
    if final is None:
        return [*why, "the client process left no final report"]
    if final.get("lost"):
        why.append(f"{final['lost']} acked messages never consumed")
    if final.get("eo_lost"):
        why.append(f"{final['eo_lost']} exactly-once messages acked but not read committed")
    if final.get("eo_duplicates"):
        why.append(f"{final['eo_duplicates']} exactly-once messages read committed twice")
    if final.get("pending_after_close"):
        why.append(f"{final['pending_after_close']} publish futures pending after close")
    if final.get("tasks_after_close"):
        why.append(f"tasks left after close: {final['tasks_after_close']}")
    if final.get("crash"):
        why.append(f"the client process crashed: {final['crash']}")
    return why


PASS, FAIL, NOT_JUDGED = "PASS", "FAIL", "NOT JUDGED"
# The soak's exit status per outcome (2 is taken: the soak's tools are missing).
EXIT_STATUS: Mapping[str, int] = {PASS: 0, FAIL: 1, NOT_JUDGED: 3}


@dataclasses.dataclass(frozen=True)
class Verdict:
    """What the soak concludes: an outcome and why."""

    outcome: str  # PASS, FAIL or NOT_JUDGED
    reasons: tuple[str, ...] = ()

    @property
    def exit_status(self) -> int:
        return EXIT_STATUS[self.outcome]

    def line(self) -> str:
        """The report's last line."""
        text = f"verdict: {self.outcome}"
        return f"{text}: {'; '.join(self.reasons)}" if self.reasons else text


def verdict(
    trends: Sequence[Trend], final: Mapping[str, Any] | None, extra: Sequence[str] = ()
) -> Verdict:
    """FAIL on any failure (``failures`` and ``extra``), else NOT JUDGED when a series
    with a threshold was not judged (too few samples, too short a judged half), else PASS."""
    why = [*failures(trends, final), *extra]
    if why:
        return Verdict(FAIL, tuple(why))
    unjudged = [t for t in trends if t.threshold is not None and not t.judged]
    if unjudged:
        shortest = min(unjudged, key=lambda t: (t.minutes, t.samples))
        return Verdict(
            NOT_JUDGED,
            (
                f"{', '.join(t.metric for t in unjudged)} not judged: the judged half "
                f"had {shortest.samples} samples over {shortest.minutes:.1f} min, a verdict "
                f"needs {MIN_TREND_SAMPLES} over {MIN_TREND_MINUTES:g} min (a soak of "
                f"{2 * MIN_TREND_MINUTES + 1:g} min or more)",
                "the end checks passed",
            ),
        )
    return Verdict(PASS)
