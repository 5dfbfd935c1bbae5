"""`make demo` (and `make spark-demo`): start a throwaway Liftbridge node on 127.0.0.1 and run
an example on it: `python scripts/demo.py [EXAMPLE]`, examples/EXAMPLE.py (quickstart by default).

The node (with embedded NATS) gets free ports and a fresh temporary data directory, and is
stopped and removed afterwards, whatever happens.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from liftbridge_client.testing import LIFTBRIDGE_VERSION, SingleNode

ROOT = Path(__file__).resolve().parent.parent


def main(example: str = "quickstart") -> int:
    """Run examples/<example>.py against a fresh local node; its exit status."""
    if (
        example.startswith("spark")
        and shutil.which("java") is None
        and not os.environ.get("JAVA_HOME")
    ):
        print("==> the Spark demo needs Java 17+ (PySpark starts a JVM): install a JDK")
        return 1
    print(f"==> starting Liftbridge {LIFTBRIDGE_VERSION} with embedded NATS on 127.0.0.1")
    started = time.monotonic()
    with SingleNode() as node:
        ready = time.monotonic() - started
        print(f"    gRPC {node.address}, NATS {node.nats_url} (ready in {ready:.1f}s)")
        env = dict(os.environ, LIFTBRIDGE_ADDRS=node.address, LIFTBRIDGE_NATS_URL=node.nats_url)
        print(f"==> running examples/{example}.py")
        result = subprocess.run(
            [sys.executable, str(ROOT / "examples" / f"{example}.py")], env=env, check=False
        )
        if result.returncode != 0:
            print(f"==> {example} failed (exit {result.returncode}); server log tail:")
            print(node.log_tails(40))
        print("==> stopping the server and removing its data directory")
    print("==> done" if result.returncode == 0 else f"==> {example} demo FAILED")
    return result.returncode


if __name__ == "__main__":
    raise SystemExit(main(*sys.argv[1:2]))
