"""Details of the machine and tools a run measured on."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path

__all__ = ["machine_details"]


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _ram_gib() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 1024 / 1024
    except OSError:
        pass
    return 0.0


def _tool_version(*argv: str) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=10)
    except OSError:
        return "not found"
    return (done.stdout or done.stderr).strip().splitlines()[0] if done.returncode == 0 else "?"


def machine_details() -> dict[str, str | int | float]:
    """nproc, CPU model, RAM, OS, Python and Go versions."""
    return {
        "nproc": os.cpu_count() or 0,
        "cpu_model": _cpu_model(),
        "ram_gib": round(_ram_gib(), 1),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "python_impl": platform.python_implementation(),
        "go": _tool_version("go", "version"),
    }
