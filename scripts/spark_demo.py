"""`make spark-demo`: start a throwaway Liftbridge node on 127.0.0.1 and run the Spark
pipeline example (examples/spark_pipeline.py) on it.

The node (with embedded NATS and cursors enabled) gets free ports and a fresh temporary data
directory, and is stopped and removed afterwards, whatever happens.
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


def main() -> int:
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        print("==> the Spark demo needs Java 17+ (PySpark starts a JVM): install a JDK")
        return 1
    print(f"==> starting Liftbridge {LIFTBRIDGE_VERSION} with embedded NATS on 127.0.0.1")
    started = time.monotonic()
    with SingleNode() as node:
        ready = time.monotonic() - started
        print(f"    gRPC {node.address}, NATS {node.nats_url} (ready in {ready:.1f}s)")
        env = dict(os.environ, LIFTBRIDGE_ADDRS=node.address, LIFTBRIDGE_NATS_URL=node.nats_url)
        print("==> running examples/spark_pipeline.py")
        result = subprocess.run(
            [sys.executable, str(ROOT / "examples" / "spark_pipeline.py")], env=env, check=False
        )
        if result.returncode != 0:
            print(f"==> the pipeline failed (exit {result.returncode}); server log tail:")
            print(node.log_tails(40))
        print("==> stopping the server and removing its data directory")
    print("==> done" if result.returncode == 0 else "==> spark demo FAILED")
    return result.returncode


if __name__ == "__main__":
    raise SystemExit(main())
