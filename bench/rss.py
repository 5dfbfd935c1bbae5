"""RSS of this client with ``n`` publishes in flight; run as a fresh process.

``python -m bench.rss ADDRESS NATS_URL STREAM N SIZE`` prints one JSON object: RSS after
connecting (baseline), RSS right after queueing the n publishes (none acked yet: they are
all in flight), the process's peak RSS, and CPU time per message for the whole burst.
"""

from __future__ import annotations

import asyncio
import json
import resource
import sys
import time
from typing import Any

from bench.ours import Target, client_for, value_of
from liftbridge_client.options import Transport


def _maxrss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


def _rss_mib() -> float:
    """The current resident set size (Linux /proc; 0.0 elsewhere)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return 0.0


async def _main(target: Target, n: int, size: int) -> dict[str, Any]:
    value = value_of(size)
    async with client_for(target, Transport.NATS, window=n) as client:
        await client.fetch_metadata(target.stream)
        await client.publish(target.stream, value)  # warm up every code path
        baseline = _rss_mib()
        cpu0 = time.process_time()
        start = time.perf_counter()
        futures = [client.publish_nowait(target.stream, value) for _ in range(n)]
        queued = _rss_mib()  # all n queued and unacked
        results = await asyncio.gather(*futures, return_exceptions=True)
        seconds = time.perf_counter() - start
        cpu = time.process_time() - cpu0
    errors = [r for r in results if isinstance(r, BaseException)]
    return {
        "in_flight": n,
        "size": size,
        "rss_baseline_mib": baseline,
        "rss_in_flight_mib": queued,
        "rss_peak_mib": _maxrss_mib(),
        "cpu_us_per_msg": cpu / n * 1e6,
        "seconds": seconds,
        "acked": n - len(errors),
        "errors": len(errors),
        "first_error": repr(errors[0]) if errors else None,
    }


if __name__ == "__main__":
    address, nats_url, stream, n, size = sys.argv[1:6]
    result = asyncio.run(_main(Target(address, nats_url, stream), int(n), int(size)))
    print(json.dumps(result))
