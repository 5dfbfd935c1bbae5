"""Where this client's CPU per pipelined publish goes, sampled by py-spy.

    python -m bench.spy [--transport nats|h2] [-n 300000] [--rate 200] [--top 25]

One fresh single node; the publish runs in a process of its own (`bench.proc`, the same
code as the ratios' ``ours-nats`` / ``ours-grpc-h2`` phases) under ``py-spy record
--nonblocking`` (the process is never paused, so it runs at full speed) and only the
samples of busy threads count. Printed: the functions with the most samples of their own
(the leaf frame) and the most samples in all (anywhere on the stack), each as a share of
the samples and as microseconds per message (share x the process's measured CPU per
message), then the shares by package. py-spy comes with the bench extra.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from bench.external import ROOT
from liftbridge_client import Client
from liftbridge_client.options import ClientOptions
from liftbridge_client.testing import SingleNode

__all__ = ["aggregate", "main", "package_of"]

_FRAME = re.compile(r"^(?P<func>.*) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")


def _short(path: str) -> str:
    for marker in ("site-packages/", "/lib/python3.", "liftbridge_client/", "bench/"):
        if marker in path:
            # The last "bench/": the harness sits in a checkout that may be called bench.
            _head, _, tail = (
                path.rpartition(marker) if marker == "bench/" else path.partition(marker)
            )
            if marker == "/lib/python3.":
                return "stdlib/" + tail.split("/", 1)[-1]
            return (marker if marker in ("liftbridge_client/", "bench/") else "") + tail
    return path


def _frame_name(frame: str) -> str:
    match = _FRAME.match(frame)
    if not match:
        return frame
    line = f":{match['line']}" if match["line"] else ""
    return f"{_short(match['file'])}{line}({match['func']})"


def package_of(name: str) -> str:
    """A frame's package: liftbridge_client, nats, asyncio, the bench harness, or other."""
    if name.startswith("liftbridge_client/"):
        return "liftbridge_client"
    if name.startswith("nats/"):
        return "nats-py"
    if name.startswith("stdlib/asyncio/") or name.startswith("stdlib/selectors"):
        return "asyncio (event loop)"
    if name.startswith("bench/"):
        return "bench harness"
    if name.startswith("google/") or name.startswith("h2/") or name.startswith("hpack/"):
        return name.split("/", 1)[0]
    return "other"


def aggregate(lines: Iterable[str]) -> tuple[int, Counter[str], Counter[str]]:
    """Collapsed stacks (``frame;frame;... count``) to (samples, own, inclusive), without
    the stacks of imports (start-up, not publishing)."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in lines:
        text = line.strip()
        if not text:
            continue
        stack, _, count_text = text.rpartition(" ")
        count = int(count_text)
        if "<frozen importlib" in stack:
            continue
        frames = [_frame_name(f) for f in stack.split(";") if f]
        if not frames:
            continue
        total += count
        own[frames[-1]] += count
        for name in set(frames):
            inclusive[name] += count
    return total, own, inclusive


def _stream(address: str) -> str:
    async def create() -> None:
        async with Client([address], options=ClientOptions(keepalive_time=None)) as c:
            await c.create_stream("spy", "spy")

    asyncio.run(create())
    return "spy"


def run(transport: str, n: int, rate: int) -> tuple[dict[str, Any], list[str]]:
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    with SingleNode() as node, tempfile.TemporaryDirectory() as tmp:
        task: dict[str, Any] = {"op": "pub", "address": node.address, "nats_url": node.nats_url}
        if transport == "nats":
            task["transport"] = "nats"
        else:
            task.update(transport="grpc", stream_transport="h2")
        task.update(stream=_stream(node.address), n=n, size=256)
        out = Path(tmp) / "stacks.txt"
        done = subprocess.run(
            [spy, "record", "--format", "raw", "--function", "--nonblocking", "--full-filenames",
             "--rate", str(rate), "--output", str(out), "--",
             sys.executable, "-m", "bench.proc", json.dumps(task)],
            capture_output=True, text=True, check=False, cwd=ROOT, timeout=900,
        )  # fmt: skip
        if done.returncode != 0 or not out.exists():
            raise SystemExit(f"py-spy failed:\n{done.stderr[-3000:]}")
        # py-spy's own messages share stdout; bench.proc's result is its one JSON line.
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        if not lines:
            raise SystemExit(f"no result from bench.proc:\n{done.stdout[-2000:]}")
        result: dict[str, Any] = json.loads(lines[-1])
        return result, out.read_text().splitlines()


def report(result: dict[str, Any], stacks: list[str], n: int, top: int) -> str:
    total, own, inclusive = aggregate(stacks)
    cpu_us = float(result["cpu_s"]) / n * 1e6
    lines = [
        f"{n} publishes in {result['seconds']:.2f} s ({n / result['seconds']:,.0f} msgs/s), "
        f"client CPU {cpu_us:.2f} us/msg over the publish loop; {total} samples (imports "
        "left out; connecting and closing are in, a few percent)",
        "",
        "  own samples (leaf frame)                                        share  us/msg",
    ]
    lines += [
        f"  {name[:62]:<62} {count / total:6.1%} {count / total * cpu_us:6.2f}"
        for name, count in own.most_common(top)
    ]
    lines += ["", "  by package (own samples)"]
    packages: Counter[str] = Counter()
    for name, count in own.items():
        packages[package_of(name)] += count
    lines += [
        f"  {pkg:<62} {count / total:6.1%} {count / total * cpu_us:6.2f}"
        for pkg, count in packages.most_common()
    ]
    lines += ["", "  inclusive samples (anywhere on the stack), this client's and nats-py's"]
    lines += [
        f"  {name[:62]:<62} {count / total:6.1%} {count / total * cpu_us:6.2f}"
        for name, count in inclusive.most_common()
        if package_of(name) in ("liftbridge_client", "nats-py")
    ][:top]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.spy", description=__doc__)
    parser.add_argument("--transport", choices=["nats", "h2"], default="nats")
    parser.add_argument("-n", type=int, default=300_000, help="messages to publish")
    parser.add_argument("--rate", type=int, default=200, help="py-spy samples per second")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--save", type=Path, help="also keep the collapsed stacks here")
    args = parser.parse_args(argv)
    result, stacks = run(args.transport, args.n, args.rate)
    if args.save:
        args.save.write_text("\n".join(stacks) + "\n")
    print(report(result, stacks, args.n, args.top))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
