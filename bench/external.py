"""The other clients: the Go program (go-liftbridge v2.4.0) and gufo-liftbridge 0.2.0.

Both run as subprocesses. The Go program is built into ``.servers/bench-go`` and rebuilt only
when bench/go changes; gufo-liftbridge lives in its own venv (``.servers/venv-gufo``) so its
pins never touch the project's ``.venv``.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

__all__ = ["GUFO_VERSION", "ROOT", "GoBench", "Gufo"]

ROOT = Path(__file__).resolve().parent.parent
SERVERS = ROOT / ".servers"
GO_SRC = ROOT / "bench" / "go"
GUFO_VERSION = "0.2.0"


class BenchError(RuntimeError):
    """A benchmark tool could not be built, installed or run."""


def _sources_digest(directory: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(directory.iterdir()):
        if path.suffix == ".go" or path.name in {"go.mod", "go.sum"}:
            digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


class GoBench:
    """The Go benchmark program; ``ensure()`` builds it when its sources changed."""

    def __init__(self, binary: Path = SERVERS / "bench-go") -> None:
        self.binary = binary
        self.stamp = binary.with_suffix(".sha256")

    def ensure(self) -> None:
        digest = _sources_digest(GO_SRC)
        if self.binary.exists() and self.stamp.exists() and self.stamp.read_text() == digest:
            return
        self.binary.parent.mkdir(parents=True, exist_ok=True)
        print(f"==> building {self.binary.relative_to(ROOT)} (go-liftbridge v2.4.0)", flush=True)
        done = subprocess.run(
            ["go", "build", "-o", str(self.binary), "."],
            cwd=GO_SRC,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise BenchError(f"go build failed:\n{done.stderr}")
        self.stamp.write_text(digest)

    def version(self) -> str:
        done = subprocess.run(["go", "version"], capture_output=True, text=True, check=False)
        return done.stdout.strip()

    def run(self, *args: str, timeout: float = 600) -> dict[str, Any]:
        """Run one measurement; its JSON result, or ``{"error": ...}``."""
        try:
            done = subprocess.run(
                [str(self.binary), *args],
                capture_output=True,
                text=True,
                check=False,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            return {"error": f"timed out after {timeout} s"}
        if done.returncode != 0:
            return {"error": done.stderr.strip()[-2000:] or f"exit status {done.returncode}"}
        result: dict[str, Any] = json.loads(done.stdout)
        return result


class Gufo:
    """gufo-liftbridge in its own venv, driven by bench/gufo_runner.py."""

    def __init__(self, venv: Path = SERVERS / "venv-gufo") -> None:
        self.venv = venv
        self.python = venv / "bin" / "python"

    def ensure(self) -> None:
        stamp = self.venv / f".gufo-{GUFO_VERSION}"
        if stamp.exists():
            return
        print(f"==> installing gufo-liftbridge {GUFO_VERSION} into {self.venv}", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(self.venv)], check=True)
        subprocess.run(
            [str(self.python), "-m", "pip", "install", "-q", f"gufo-liftbridge=={GUFO_VERSION}"],
            check=True,
        )
        stamp.touch()

    def run(
        self, address: str, tasks: list[dict[str, Any]], timeout: float = 900
    ) -> list[dict[str, Any]]:
        """Run tasks in one process; one result per task (``error`` set on failure)."""
        try:
            done = subprocess.run(
                [str(self.python), str(ROOT / "bench" / "gufo_runner.py"), address],
                input=json.dumps(tasks),
                capture_output=True,
                text=True,
                check=False,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            return [{"task": t, "error": f"timed out after {timeout} s"} for t in tasks]
        results: list[dict[str, Any]] = [json.loads(line) for line in done.stdout.splitlines()]
        error = done.stderr.strip()[-2000:] or "no output"
        results.extend({"task": task, "error": error} for task in tasks[len(results) :])
        return results
