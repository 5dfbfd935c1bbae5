"""Profiles, running rounds in their own namespaces, and the results table.

A profile says which fault kinds run, how many rounds of each and how long their faults
last. ``FAULTS_PROFILE`` picks one (``short`` inside ``make test``, ``standard`` for
``make test-faults``, ``long`` for benchmark-style runs); ``FAULTS_KINDS`` (comma list),
``FAULTS_ROUNDS``, ``FAULTS_SEED`` (added to each round's seed), ``FAULTS_CYCLES``,
``FAULTS_FAULT_S``, ``FAULTS_QUIET_S``, ``FAULTS_TIMEOUTS`` (``harness``, ``equal`` or
``server``), ``FAULTS_VERSION`` (else the plugin's ``--liftbridge-version``) and
``FAULTS_STRICT`` (``1``: any anomaly fails its round) override its parts.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from faults.fault_nemesis import CRASH_KINDS, KINDS, ROUTED_KINDS
from faults.fault_restart import READ_BOUND
from liftbridge_client.testing import LIFTBRIDGE_VERSION, private_netns_argv

ROOT = Path(__file__).resolve().parents[2]
RUNNER = "faults.fault_runner"  # run with -m from tests/ (PYTHONPATH), as pytest imports it
RESULTS_DIR = ROOT / ".faults"  # git-ignored: one directory per session, one per round


@dataclasses.dataclass(frozen=True)
class Profile:
    """What a session runs."""

    name: str
    kinds: tuple[str, ...]
    rounds: int
    cycles: int
    fault_s: float
    quiet_s: float
    timeouts: str = "harness"
    version: str = LIFTBRIDGE_VERSION
    strict: bool = False  # every anomaly fails its round, known server defects included
    seed: int = 0  # added to every round's seed, so repeated sessions draw other faults

    def round_timeout(self) -> float:
        """A bound on one round, whatever happens: setup, faults, recovery, reads."""
        leader_timeout = 15.0 if self.timeouts == "server" else 3.0
        # A split is held until the majority acks (runner.hold_split: 60 s at most).
        hold = 60.0 if set(self.kinds) & set(ROUTED_KINDS) else 0.0
        # A crash is followed by reading its still streams back, for READ_BOUND at most.
        reads = READ_BOUND if set(self.kinds) & set(CRASH_KINDS) else 0.0
        per_cycle = self.fault_s + self.quiet_s + hold + reads
        return 150 + self.cycles * per_cycle + 10 * leader_timeout

    def runner_args(self, kind: str, round_: int, out: Path) -> list[str]:
        """The runner's command line for one round (seeded by kind and round)."""
        seed = (KINDS.index(kind) + 1) * 1000 + round_ + self.seed
        options = {
            "kind": kind,
            "round": round_,
            "seed": seed,
            "out": out,
            "version": self.version,
            "timeouts": self.timeouts,
            "cycles": self.cycles,
            "fault-s": self.fault_s,
            "quiet-s": self.quiet_s,
            # The runner's checks end this long before the round is killed (a margin for
            # stopping the servers and judging the history).
            "deadline-s": self.round_timeout() - 25,
        }
        args = [arg for name, value in options.items() for arg in (f"--{name}", str(value))]
        return [*args, "--strict"] if self.strict else args


PROFILES = {
    # Inside `make test`: a few minutes, one round of the kinds that hurt most.
    "short": Profile(
        "short",
        ("isolate-leader", "leader-in", "pause-leader", "kill-leader", "combo"),
        rounds=1,
        cycles=1,
        fault_s=8.0,
        quiet_s=4.0,
    ),
    # `make test-faults`: every kind, twice, two faults per round.
    "standard": Profile("standard", KINDS, rounds=2, cycles=2, fault_s=8.0, quiet_s=5.0),
    # Benchmark-style: every kind ten times, three longer faults per round.
    "long": Profile("long", KINDS, rounds=10, cycles=3, fault_s=10.0, quiet_s=6.0),
}


def profile_from_env(environ: Mapping[str, str] | None = None) -> Profile:
    """The profile ``FAULTS_PROFILE`` names (default ``short``), with overrides applied."""
    env = os.environ if environ is None else environ
    name = env.get("FAULTS_PROFILE", "short")
    if name not in PROFILES:
        raise ValueError(f"FAULTS_PROFILE={name!r}: choose one of {sorted(PROFILES)}")
    profile = PROFILES[name]
    changes: dict[str, Any] = {}
    if env.get("FAULTS_KINDS"):
        kinds = tuple(k.strip() for k in env["FAULTS_KINDS"].split(",") if k.strip())
        if unknown := [k for k in kinds if k not in KINDS]:
            raise ValueError(f"FAULTS_KINDS: unknown {unknown}; known: {list(KINDS)}")
        changes["kinds"] = kinds
    for key, field, cast in (
        ("FAULTS_ROUNDS", "rounds", int),
        ("FAULTS_CYCLES", "cycles", int),
        ("FAULTS_FAULT_S", "fault_s", float),
        ("FAULTS_QUIET_S", "quiet_s", float),
        ("FAULTS_TIMEOUTS", "timeouts", str),
        ("FAULTS_VERSION", "version", str),
        ("FAULTS_SEED", "seed", int),
    ):
        if env.get(key):
            changes[field] = cast(env[key])
    if env.get("FAULTS_STRICT", "") not in ("", "0"):
        changes["strict"] = True
    if changes.get("timeouts", "harness") not in ("harness", "equal", "server"):
        raise ValueError("FAULTS_TIMEOUTS must be harness, equal or server")
    return dataclasses.replace(profile, **changes)


def missing_tools() -> list[str]:
    """What a fault run needs and this machine lacks (root, unshare, ip, iptables, tc)."""
    missing = [tool for tool in ("unshare", "ip", "iptables", "tc") if shutil.which(tool) is None]
    if os.geteuid() != 0:
        missing.append("root (network namespaces and iptables)")
    return missing


def require_tools(what: str) -> None:
    """Skip (fail with ``$CI`` set, where nothing may skip) when `missing_tools` names any."""
    import pytest  # the rounds' runners import this module too, outside pytest

    if missing := missing_tools():
        message = f"{what} needs {', '.join(missing)}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


def run_round(profile: Profile, kind: str, round_: int, out: Path) -> dict[str, Any]:
    """Run one round in a fresh network and PID namespace; return its summary.

    The runner writes its summary even when it fails; a round that has to be killed (its
    bound passed) or that left none gets a summary that says so.
    """
    argv = private_netns_argv(
        [sys.executable, "-m", RUNNER, *profile.runner_args(kind, round_, out)]
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), str(ROOT)])}
    started = time.monotonic()
    out.mkdir(parents=True, exist_ok=True)
    with (out / "runner.log").open("w") as log:
        try:
            done = subprocess.run(
                argv,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                timeout=profile.round_timeout(),
                check=False,
            )
            status: str | int = done.returncode
        except subprocess.TimeoutExpired:
            # subprocess.run killed unshare, and with it the namespace's first process.
            status = "timeout"
    summary_path = out / "summary.json"
    if summary_path.exists():
        summary: dict[str, Any] = json.loads(summary_path.read_text())
    else:
        summary = {"kind": kind, "round": round_, "verdict": None, "unexpected": ["no-summary"]}
    summary["status"] = status
    summary["wall_s"] = round(time.monotonic() - started, 1)
    summary["out"] = str(out)
    return summary


COLUMNS = (
    "kind",
    "rounds",
    "acked",
    "lost",
    "displaced",
    "eo acked",
    "eo lost",
    "eo dup",
    "divergent",
    "sub gaps",
    "read lost",
    "group lost",
    "group dup",
    "group gaps",
    "group recover s (max)",
    "split: majority acks s (max)",
    "split: minority acks",
    "split: stranded NATS s (max)",
    "restart: hidden",
    "restart: readable s (max)",
    "recover s (max)",
    "stall s (max)",
    "other",
    "errors",
)


def table(summaries: Sequence[dict[str, Any]]) -> list[str]:
    """The results per fault kind, as Markdown table lines."""
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for summary in summaries:
        by_kind.setdefault(summary["kind"], []).append(summary)
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for kind, rows in by_kind.items():
        verdicts = [r["verdict"] for r in rows if r.get("verdict")]

        def total(key: str, verdicts: list[dict[str, Any]] = verdicts) -> int:
            return sum(int(v.get(key) or 0) for v in verdicts)

        recover = [v["recover_s"] for v in verdicts if v.get("recover_s") is not None]
        majority = [v["majority_s"] for v in verdicts if v.get("majority_s") is not None]
        stranded = [v["stranded_s"] for v in verdicts if v.get("stranded_s") is not None]
        restart_read = [
            v["restart_read_s"] for v in verdicts if v.get("restart_read_s") is not None
        ]
        group_recover = [
            v["group_recover_s"] for v in verdicts if v.get("group_recover_s") is not None
        ]
        stalls = [float(v.get("unavailable_s") or 0) for v in verdicts]
        counted = {
            "acked-lost",
            "acked-displaced",
            "eo-acked-lost",
            "eo-duplicate",
            "divergent-replica",
            "subscriber-gap",
            "read-lost",
            "group-lost",
            "group-lost-truncated",
            "group-gap",
            "acked-hidden",
        }
        other: dict[str, int] = {}
        for v in verdicts:
            for kind_ in {a["kind"] for a in v.get("anomalies", [])} - counted:
                other[kind_] = other.get(kind_, 0) + 1  # rounds with it
        for r in rows:
            if r.get("status") == "timeout":
                other["timeout"] = other.get("timeout", 0) + 1
        errors: dict[str, int] = {}
        for v in verdicts:
            for name, count in v.get("errors", {}).items():
                errors[name] = errors.get(name, 0) + count
        top = ", ".join(f"{n} {c}" for n, c in sorted(errors.items(), key=lambda x: -x[1])[:3])
        broken = len(rows) - len(verdicts)
        cells = [
            kind,
            f"{len(rows)}" + (f" ({broken} without verdict)" if broken else ""),
            total("acked"),
            f"{total('acked_lost')} in {sum(1 for v in verdicts if v.get('acked_lost'))}",
            total("displaced"),
            total("eo_acked"),
            f"{total('eo_lost')} in {sum(1 for v in verdicts if v.get('eo_lost'))}",
            total("eo_duplicates"),
            total("divergent"),
            total("sub_gaps"),
            total("read_lost"),
            f"{total('group_lost')} in {sum(1 for v in verdicts if v.get('group_lost'))}",
            total("group_duplicates"),
            total("group_gaps"),
            f"{max(group_recover):.1f}" if group_recover else "-",
            f"{max(majority):.1f}" if majority else "-",
            total("minority_acked"),
            f"{max(stranded):.1f}" if stranded else "-",
            f"{total('hidden')} in {sum(1 for v in verdicts if v.get('hidden'))}",
            f"{max(restart_read):.1f}" if restart_read else "-",
            f"{max(recover):.1f}" if recover else "-",
            f"{max(stalls):.1f}" if stalls else "-",
            ", ".join(f"{k} in {n}" for k, n in sorted(other.items())) or "-",
            top or "-",
        ]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return lines
