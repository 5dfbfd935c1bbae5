"""CPU time of processes and process trees, from Linux's ``/proc/<pid>/stat``.

A Spark job's client-side CPU is spread over processes that come and go: the driver JVM
(``local[N]``: the executors too) and the Python workers it forks. A reaped child's CPU
usually lands in its parent's cutime/cstime, but pyspark's worker daemon ignores SIGCHLD,
and the kernel then drops the CPU of every worker that exits. :class:`TreeCpuSampler`
therefore samples the tree's processes (their own utime + stime) every few tens of
milliseconds while a job runs and keeps the last value seen of each process that ends:
a process that lives shorter than one interval is missed, and so is the last interval of
one that ends. Servers started by the same Python process are excluded with their
subtrees, so they can be measured on their own (:func:`pid_cpu`).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "StatTimes",
    "TreeCpuSampler",
    "parse_stat",
    "pid_cpu",
    "snapshot",
    "subtree",
    "tree_cpu",
]

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PROC = Path("/proc")


@dataclass(frozen=True, slots=True)
class StatTimes:
    """The fields of one ``/proc/<pid>/stat`` line this module uses (times in ticks)."""

    ppid: int
    utime: int
    stime: int
    cutime: int
    cstime: int
    starttime: int = 0  # clock ticks after boot: tells a reused pid from the old process

    def own(self, tick: float = _TICK) -> float:
        """Seconds of CPU the process itself used."""
        return (self.utime + self.stime) / tick

    def total(self, tick: float = _TICK) -> float:
        """Seconds of CPU of the process and its reaped children."""
        return (self.utime + self.stime + self.cutime + self.cstime) / tick


def parse_stat(text: str) -> StatTimes:
    """Parse a stat line; the command name may hold spaces and parentheses."""
    fields = text.rsplit(")", 1)[1].split()
    # fields[0] is field 3 (state): ppid is field 4, utime..cstime are fields 14..17,
    # starttime is field 22.
    return StatTimes(
        ppid=int(fields[1]),
        utime=int(fields[11]),
        stime=int(fields[12]),
        cutime=int(fields[13]),
        cstime=int(fields[14]),
        starttime=int(fields[19]) if len(fields) > 19 else 0,
    )


def snapshot(proc: Path = _PROC) -> dict[int, StatTimes]:
    """Every readable process's stat times, by pid (processes may vanish meanwhile)."""
    out: dict[int, StatTimes] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            out[int(entry.name)] = parse_stat((entry / "stat").read_text())
        except (OSError, IndexError, ValueError):
            continue
    return out


def subtree(root: int, stats: Mapping[int, StatTimes], exclude: Iterable[int] = ()) -> set[int]:
    """``root`` and its live descendants, leaving out ``exclude`` and their descendants."""
    children: dict[int, list[int]] = {}
    for pid, times in stats.items():
        children.setdefault(times.ppid, []).append(pid)
    skipped = set(exclude)
    found: set[int] = set()
    stack = [root] if root in stats and root not in skipped else []
    while stack:
        pid = stack.pop()
        if pid in found:
            continue
        found.add(pid)
        stack.extend(c for c in children.get(pid, ()) if c not in skipped)
    return found


def tree_cpu(
    root: int,
    exclude: Iterable[int] = (),
    stats: Mapping[int, StatTimes] | None = None,
    tick: float = _TICK,
) -> float:
    """CPU seconds of ``root``'s tree (reaped children included), less ``exclude``'s."""
    stats = snapshot() if stats is None else stats
    return sum(stats[pid].total(tick) for pid in subtree(root, stats, exclude))


def pid_cpu(pid: int | None, proc: Path = _PROC, tick: float = _TICK) -> float:
    """CPU seconds (user + system) one process has used; 0.0 when unknown or gone."""
    if pid is None:
        return 0.0
    try:
        return parse_stat((proc / str(pid) / "stat").read_text()).own(tick)
    except (OSError, IndexError, ValueError):
        return 0.0


def _read(proc: Path, pid: int) -> StatTimes | None:
    try:
        return parse_stat((proc / str(pid) / "stat").read_text())
    except (OSError, IndexError, ValueError):
        return None


class TreeCpuSampler:
    """Own CPU of ``root``'s process tree (less ``exclude``'s subtrees) over a span of time.

    ``start()`` takes a baseline of every process; a thread then lists ``/proc`` every
    ``interval`` seconds, reads the stat of new processes (to place them in the tree or
    not) and of the tree's members, and remembers each member's last own CPU. ``stop()``
    returns the CPU seconds the members used since ``start()``: the last value of each,
    less its baseline (zero for a process born meanwhile). Children's cutime is ignored, so
    a child reaped by a parent in the tree is not counted twice.
    """

    def __init__(
        self,
        root: int,
        exclude: Iterable[int] = (),
        *,
        interval: float = 0.05,
        proc: Path = _PROC,
        tick: float = _TICK,
    ) -> None:
        self.root = root
        self.exclude = set(exclude)
        self.interval = interval
        self.proc = proc
        self.tick = tick
        self._known: dict[int, tuple[int, bool]] = {}  # pid -> (starttime, member)
        self._first: dict[tuple[int, int], float] = {}
        self._last: dict[tuple[int, int], float] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _pids(self) -> set[int]:
        try:
            return {int(name) for name in os.listdir(self.proc) if name.isdigit()}
        except OSError:
            return set()

    def start(self) -> TreeCpuSampler:
        """Take the baseline and start sampling."""
        stats = snapshot(self.proc)
        members = subtree(self.root, stats, self.exclude)
        for pid, times in stats.items():
            self._known[pid] = (times.starttime, pid in members)
            if pid in members:
                key = (pid, times.starttime)
                self._first[key] = self._last[key] = times.own(self.tick)
        self._thread = threading.Thread(target=self._loop, name="cpu-sampler", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def sample(self) -> None:
        """One pass: place new processes, record the members' CPU, forget ended ones."""
        pids = self._pids()
        for pid in set(self._known) - pids:
            del self._known[pid]
        new: dict[int, StatTimes] = {}
        for pid in pids - set(self._known):
            times = _read(self.proc, pid)
            if times is not None:
                new[pid] = times
        # Parents first where both are new: repeat until nothing more joins the tree.
        pending = dict(new)
        changed = True
        while pending and changed:
            changed = False
            for pid, times in list(pending.items()):
                parent = self._known.get(times.ppid)
                if parent is None and times.ppid in pending:
                    continue  # its parent is new too: place that first
                member = (
                    pid not in self.exclude
                    and parent is not None
                    and parent[1]
                    and times.ppid not in self.exclude
                )
                self._known[pid] = (times.starttime, member)
                del pending[pid]
                changed = True
        for pid, times in pending.items():  # a cycle of unknown parents: not ours
            self._known[pid] = (times.starttime, False)
        for pid, (start, member) in list(self._known.items()):
            if not member:
                continue
            times = new.get(pid) or _read(self.proc, pid)
            if times is None or times.starttime != start:
                continue  # ended since the listing (its last sample stands)
            self._last[(pid, start)] = times.own(self.tick)

    def stop(self) -> float:
        """Stop sampling; the CPU seconds the tree used since :meth:`start`."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.sample()
        return sum(last - self._first.get(key, 0.0) for key, last in self._last.items())
