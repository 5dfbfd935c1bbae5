"""Results -> text summary, docs/benchmarks.md and docs/benchmarks.png.

Every figure is shown with its ratio to go-liftbridge measured in the same run:
pipelined modes against go's PublishAsync without a barrier (go-async; go's batch-100 is a
second row), one-at-a-time modes against go's synchronous
publish, latencies against go at the same offered rate, subscribe against go's subscribe.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.ours import DEFAULT_WINDOW
from bench.stats import format_number, format_ratio, ratio, target_status

__all__ = ["baseline_for", "markdown", "summary", "targets", "write_docs"]

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "benchmarks.md"
CHART = ROOT / "docs" / "benchmarks.png"
# Hand-written findings about the committed full run, appended to the generated page.
ANALYSIS = ROOT / "bench" / "analysis.md"

GO = "go-liftbridge"
OURS = "liftbridge-client"
GUFO = "gufo-liftbridge"

# Modes that keep one message in flight and wait for its ack.
ONE_AT_A_TIME = frozenset({"sync", "nats-one", "grpc-one", "grpc-h2-one", "publish"})

Record = Mapping[str, Any]


def baseline_for(record: Record, records: Sequence[Record]) -> Record | None:
    """The go-liftbridge record a figure is compared with (None if there is none)."""
    kind = record.get("kind")
    keys: tuple[str, ...]
    if kind == "publish":
        mode = "sync" if record.get("mode") in ONE_AT_A_TIME else "go-async"
        keys = ("size", "partitions", "ack")
    elif kind == "latency":
        mode, keys = "async", ("rate",)
    elif kind == "subscribe":
        mode, keys = "earliest", ("size", "partitions")
    else:
        return None
    for other in records:
        if (
            other.get("client") == GO
            and other.get("kind") == kind
            and other.get("mode") == mode
            and other.get("ok")
            and all(other.get(k) == record.get(k) for k in keys)
        ):
            return other
    return None


def _latency(record: Record | None, name: str) -> float | None:
    if record is None:
        return None
    lat = record.get("latency_us") or {}
    value = lat.get(name)
    return float(value) if value is not None else None


def _rate(record: Record | None) -> float | None:
    if record is None or not record.get("ok"):
        return None
    value = record.get("msgs_per_s")
    return float(value) if value is not None else None


def _best(records: Sequence[Record], client: str, kind: str, **match: Any) -> Record | None:
    best: Record | None = None
    for r in records:
        if r.get("client") != client or r.get("kind") != kind or not r.get("ok"):
            continue
        if any(r.get(k) != v for k, v in match.items()):
            continue
        if best is None or (_rate(r) or 0) > (_rate(best) or 0):
            best = r
    return best


def _find(records: Sequence[Record], **match: Any) -> Record | None:
    for r in records:
        if all(r.get(k) == v for k, v in match.items()):
            return r
    return None


def targets(records: Sequence[Record]) -> list[dict[str, Any]]:
    """Where this client stands against the issue's four targets (256 B, 1 partition, LEADER)."""
    cfg = {"size": 256, "partitions": 1, "ack": "LEADER"}
    nats_pipe = _find(records, kind="publish", client=OURS, mode="nats-pipelined", **cfg)
    go_async = _find(records, kind="publish", client=GO, mode="go-async", **cfg)
    go_sync = _find(records, kind="publish", client=GO, mode="sync", **cfg)
    gufo_best = _best(records, GUFO, "publish", **cfg)
    ones = [
        _find(records, kind="publish", client=OURS, mode=m, **cfg)
        for m in ("nats-one", "grpc-h2-one", "grpc-one")
    ]
    sub_ours = _find(records, kind="subscribe", client=OURS, mode="earliest-h2") or _find(
        records, kind="subscribe", client=OURS
    )
    sub_go = _find(records, kind="subscribe", client=GO)
    rows: list[dict[str, Any]] = []

    def add(name: str, value: float | None, goal: float, higher: bool, detail: str) -> None:
        rows.append(
            {
                "target": name,
                "value": value,
                "goal": goal,
                "status": target_status(value, goal, higher_is_better=higher),
                "detail": detail,
            }
        )

    add(
        "pipelined NATS publish vs go-async",
        ratio(_rate(nats_pipe), _rate(go_async)),
        1.0,
        True,
        f"{format_number(_rate(nats_pipe))} vs {format_number(_rate(go_async))} msgs/s",
    )
    gufo_name = f"{gufo_best.get('mode')}" if gufo_best else "-"
    add(
        "pipelined NATS publish vs gufo's best",
        ratio(_rate(nats_pipe), _rate(gufo_best)),
        5.0,
        True,
        f"{format_number(_rate(nats_pipe))} vs {format_number(_rate(gufo_best))} msgs/s"
        f" (gufo {gufo_name})",
    )
    for one in ones:
        if one is None:
            continue
        add(
            f"one-at-a-time p50 ({one.get('mode')}) vs go synchronous p50",
            ratio(_latency(one, "p50"), _latency(go_sync, "p50")),
            1.0,
            False,
            f"{format_number(_latency(one, 'p50'))} vs "
            f"{format_number(_latency(go_sync, 'p50'))} us",
        )
    add(
        f"subscribe from EARLIEST ({sub_ours.get('mode') if sub_ours else '-'}) vs go",
        ratio(_rate(sub_ours), _rate(sub_go)),
        1.0,
        True,
        f"{format_number(_rate(sub_ours))} vs {format_number(_rate(sub_go))} msgs/s",
    )
    return rows


# ------------------------------------------------------------------ tables


def _status(record: Record) -> str:
    return "ok" if record.get("ok") else f"FAILED: {record.get('problem')}"


def publish_table(records: Sequence[Record]) -> list[str]:
    lines = [
        "| size | parts | ack | client | mode | msgs/s | MB/s | vs go | p50 us | p99 us "
        "| CPU us/msg | status |",
        "|---:|---:|---|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in records:
        if r.get("kind") != "publish":
            continue
        base = baseline_for(r, records)
        vs = ratio(_rate(r), _rate(base))
        base_mode = base.get("mode") if base else ""
        lines.append(
            f"| {r.get('size')} | {r.get('partitions')} | {r.get('ack')} | {r.get('client')} "
            f"| {r.get('mode')} | {format_number(_rate(r))} "
            f"| {format_number(r.get('mb_per_s') if r.get('ok') else None)} "
            f"| {format_ratio(vs)}{' (' + str(base_mode) + ')' if vs is not None else ''} "
            f"| {format_number(_latency(r, 'p50'))} | {format_number(_latency(r, 'p99'))} "
            f"| {format_number(r.get('cpu_us_per_msg'))} | {_status(r)} |"
        )
    return lines


def latency_table(records: Sequence[Record]) -> list[str]:
    lines = [
        "| offered msgs/s | client | mode | achieved msgs/s | p50 us | p95 us | p99 us "
        "| p99.9 us | p50 vs go | p99 vs go | status |",
        "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in records:
        if r.get("kind") != "latency":
            continue
        base = baseline_for(r, records)
        lines.append(
            f"| {r.get('rate')} | {r.get('client')} | {r.get('mode')} "
            f"| {format_number(r.get('achieved_rate'))}{_saturated(r)} "
            + " ".join(f"| {format_number(_latency(r, p))}" for p in ("p50", "p95", "p99", "p99.9"))
            + f" | {format_ratio(ratio(_latency(r, 'p50'), _latency(base, 'p50')))} "
            f"| {format_ratio(ratio(_latency(r, 'p99'), _latency(base, 'p99')))} "
            f"| {_status(r)} |"
        )
    return lines


def _saturated(record: Record) -> str:
    """A marker when the client could not keep up with the offered rate (< 95 %)."""
    achieved, offered = record.get("achieved_rate"), record.get("rate")
    if achieved is None or not offered or achieved >= 0.95 * float(offered):
        return ""
    return " (saturated)"


def subscribe_table(records: Sequence[Record]) -> list[str]:
    lines = [
        "| messages | client | msgs/s | MB/s | vs go | CPU us/msg | status |",
        "|---:|---|---:|---:|---:|---:|---|",
    ]
    for r in records:
        if r.get("kind") != "subscribe":
            continue
        base = baseline_for(r, records)
        lines.append(
            f"| {r.get('messages')} | {r.get('client')} | {format_number(_rate(r))} "
            f"| {format_number(r.get('mb_per_s'))} | {format_ratio(ratio(_rate(r), _rate(base)))} "
            f"| {format_number(r.get('cpu_us_per_msg'))} | {_status(r)} |"
        )
    return lines


def targets_table(records: Sequence[Record]) -> list[str]:
    lines = ["| target | measured | goal | status | figures |", "|---|---:|---:|---|---|"]
    for t in targets(records):
        sign = ">=" if "p50" not in t["target"] else "<="
        lines.append(
            f"| {t['target']} | {format_ratio(t['value'])} | {sign} {t['goal']}x "
            f"| {t['status']} | {t['detail']} |"
        )
    return lines


def profile_lines(profiles: Mapping[str, Any]) -> list[str]:
    lines: list[str] = []
    if not profiles:
        return ["Not profiled in this run (`python -m bench --profile`)."]
    if profiles.get("error"):
        lines.append(f"Profiling failed: {profiles['error']}")
    for name, prof in profiles.items():
        if not isinstance(prof, Mapping):
            continue
        lines += [
            "",
            f"### {name} ({prof.get('messages')} messages, "
            f"{format_number(prof.get('profiled_cpu_s'))} s profiled)",
            "",
            "| function | calls | own s | share | own us/msg |",
            "|---|---:|---:|---:|---:|",
        ]
        for row in prof.get("top", []):
            lines.append(
                f"| `{row['function']}` | {row['calls']} | {row['tottime_s']:.3f} "
                f"| {row['share'] * 100:.1f}% | {row['us_per_msg']:.2f} |"
            )
    return lines


def summary(results: Mapping[str, Any]) -> str:
    """A plain-text summary for the terminal: the targets table."""
    records = results.get("records", [])
    out = ["Targets (256 B, 1 partition, ack LEADER):"]
    out.extend(
        f"  {t['status']:<6} {format_ratio(t['value']):>7}  {t['target']}  ({t['detail']})"
        for t in targets(records)
    )
    return "\n".join(out)


def markdown(results: Mapping[str, Any], chart_name: str | None = CHART.name) -> str:
    records = results.get("records", [])
    machine = results.get("machine", {})
    plan = results.get("plan", {})
    clients = results.get("clients", {})
    res = next((r for r in records if r.get("kind") == "resources"), None)
    lines = [
        "# Benchmarks",
        "",
        "<!-- Generated by `python -m bench` (bench/report.py). Do not edit by hand. -->",
        "",
        f"Run {results.get('started')} ({plan.get('name')} mode, "
        f"{results.get('seconds', 0):.0f} s),"
        f" every client against the same fresh single node in one run: Liftbridge "
        f"{results.get('server', {}).get('liftbridge')} with embedded NATS on 127.0.0.1, "
        "replication factor 1.",
        "",
        "Regenerate with `make bench-full` (writes this page) or `make bench` (the ratios "
        "section's quick plan, 3-4 min; it prints its summary and appends it to "
        "`bench/results/<commit>.json`).",
        "",
        "## Machine and versions",
        "",
        f"- CPU: {machine.get('cpu_model')}, {machine.get('nproc')} cores; RAM "
        f"{machine.get('ram_gib')} GiB; {machine.get('os')}",
        f"- Python {machine.get('python')} ({machine.get('python_impl')}); {machine.get('go')}",
        f"- Server: Liftbridge {results.get('server', {}).get('liftbridge')} "
        f"({results.get('server', {}).get('topology')})",
        "- Clients: " + ", ".join(f"{name} {version}" for name, version in clients.items()),
        "",
        "## How it measures",
        "",
        "- Every run publishes to a fresh stream; afterwards the partitions' high watermarks "
        "must add up to the messages sent and every ack must have arrived, or the run fails "
        "(numbers never fail it).",
        "- go-liftbridge (bench/go): `sync` = Publish, waiting for each ack; `go-async` = "
        "PublishAsync every message back to back, then wait for every ack (the pipelined "
        "anchor); `batch-100` = PublishAsync 100 messages, wait for their acks, repeat; "
        "`async` = PublishAsync at a fixed offered rate.",
        f"- liftbridge-client: `*-pipelined` = `send()` with a window of {DEFAULT_WINDOW} in "
        "flight (the client's default `max_inflight`), then "
        "wait for every ack; `*-one` = `await publish()` one at a time; over NATS envelopes or "
        "gRPC PublishAsync. CPU us/msg = process CPU time / messages.",
        "- gufo-liftbridge 0.2.0 (own venv): `publish` = its unary Publish, which sends no "
        "deadline so the server returns without an ack (it confirms nothing; stored counts "
        "are still verified); `publish_bulk` = one PublishAsync stream waiting for all acks.",
        "- Messages go to partitions round robin; values are a-z bytes; no keys or headers.",
        f"- Publish counts: {plan.get('n_pipelined')} pipelined, {plan.get('n_one')} one at a "
        f"time; latency runs last {plan.get('rate_seconds')} s per rate; subscribe reads "
        f"{plan.get('n_subscribe')} messages of 256 B from EARLIEST.",
        "- Ratios (`vs go`): pipelined modes against `go-async`, one-at-a-time modes "
        "against go `sync`, same size/partitions/ack; latencies against go at the same rate. "
        "`grpc-h2` = gRPC over the h2 stream transport, `grpc` = over grpc.aio; subscribe "
        "`earliest-h2`/`earliest` likewise, each in a process of its own.",
        "",
    ]
    if chart_name:
        lines += [f"![benchmarks]({chart_name})", ""]
    lines += ["## Targets", "", *targets_table(records), ""]
    lines += ["## Publish throughput (with acks)", "", *publish_table(records), ""]
    lines += [
        "## Publish-to-ack latency at fixed offered load",
        "",
        "256 B, 1 partition, ack LEADER.",
        "",
        *latency_table(records),
        "",
    ]
    lines += [
        "(saturated): the client could not sustain the offered rate; `send()` then waits for "
        "window room, so the wait for room counts in its latency.",
        "",
    ]
    lines += ["## Subscribe throughput from EARLIEST", "", *subscribe_table(records), ""]
    lines += ["## Resources", ""]
    if res is not None and res.get("ok"):
        lines.append(
            f"liftbridge-client, {res.get('in_flight')} publishes of {res.get('size')} B queued "
            f"at once over NATS (`publish_nowait`, window {res.get('in_flight')}): RSS "
            f"{res.get('rss_baseline_mib', 0):.1f} MiB after connecting, "
            f"{res.get('rss_in_flight_mib', 0):.1f} MiB with all of them in flight "
            f"(+{res.get('rss_in_flight_mib', 0) - res.get('rss_baseline_mib', 0):.1f} MiB), "
            f"process peak {res.get('rss_peak_mib', 0):.1f} MiB; CPU "
            f"{res.get('cpu_us_per_msg', 0):.1f} us per message for the burst "
            f"({format_number(res.get('msgs_per_s'))} msgs/s)."
        )
    elif res is not None:
        lines.append(f"Resource run FAILED: {res.get('problem')}")
    else:
        lines.append("Not measured in this run.")
    lines += ["", "## Profiles (cProfile, top own time)", ""]
    lines += [
        "Own time per function under cProfile (which inflates call-heavy code); `us/msg` "
        "divides it by the messages of the profiled run.",
    ]
    lines += profile_lines(results.get("profiles", {}))
    if ANALYSIS.exists():
        lines += ["", ANALYSIS.read_text().strip()]
    failures = results.get("failures", [])
    lines += ["", "## Failures", ""]
    if failures:
        lines += [
            f"- {f.get('kind')} {f.get('client')} {f.get('mode')} "
            f"{f.get('size', '')} B p{f.get('partitions', '')} {f.get('ack', '')}: "
            f"{f.get('problem')}"
            for f in failures
        ]
    else:
        lines.append(
            "None: every message was acked (where the client asks for acks), stored and read back."
        )
    return "\n".join(lines) + "\n"


def chart(results: Mapping[str, Any], path: Path = CHART) -> bool:
    """Write the PNG chart; False when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    records = results.get("records", [])
    fig, axes = plt.subplots(1, 3, figsize=(16, 5))
    pubs = [
        r
        for r in records
        if r.get("kind") == "publish"
        and r.get("size") == 256
        and r.get("partitions") == 1
        and r.get("ack") == "LEADER"
    ]
    labels = [f"{r['client'].split('-')[0]}\n{r['mode']}" for r in pubs]
    axes[0].bar(labels, [_rate(r) or 0 for r in pubs], color=[_color(r) for r in pubs])
    axes[0].set_title("Publish with acks, 256 B, 1 partition, LEADER")
    axes[0].set_ylabel("msgs/s")
    axes[0].tick_params(axis="x", labelsize=7, rotation=45)
    lats = [r for r in records if r.get("kind") == "latency"]
    lat_labels = [f"{r['client'].split('-')[0]} {r['mode']}\n@{r['rate']}/s" for r in lats]
    xs = range(len(lats))
    axes[1].bar([x - 0.2 for x in xs], [_latency(r, "p50") or 0 for r in lats], 0.4, label="p50")
    axes[1].bar([x + 0.2 for x in xs], [_latency(r, "p99") or 0 for r in lats], 0.4, label="p99")
    axes[1].set_xticks(list(xs), lat_labels, fontsize=7, rotation=45)
    axes[1].set_yscale("log")
    axes[1].set_ylabel("publish->ack us (log)")
    axes[1].set_title("Latency at fixed offered load")
    axes[1].legend()
    subs = [r for r in records if r.get("kind") == "subscribe"]
    axes[2].bar(
        [r["client"] for r in subs], [_rate(r) or 0 for r in subs], color=[_color(r) for r in subs]
    )
    axes[2].set_title(f"Subscribe from EARLIEST ({subs[0]['messages'] if subs else 0} msgs)")
    axes[2].set_ylabel("msgs/s")
    axes[2].tick_params(axis="x", labelsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True


def _color(record: Record) -> str:
    return {GO: "tab:blue", OURS: "tab:green", GUFO: "tab:orange"}.get(
        str(record.get("client")), "gray"
    )


def write_docs(results: Mapping[str, Any]) -> None:
    """Write docs/benchmarks.md and the chart next to it."""
    from bench.ratio_report import existing_block, splice

    has_chart = chart(results)
    page = markdown(results, CHART.name if has_chart else None)
    block = existing_block(DOC.read_text()) if DOC.exists() else None
    DOC.write_text(splice(page, block) if block else page)  # keep the ratios section
    print(
        f"wrote {DOC.relative_to(ROOT)}" + (f" and {CHART.relative_to(ROOT)}" if has_chart else "")
    )
