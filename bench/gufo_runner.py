"""Measure gufo-liftbridge 0.2.0; run with the python of its own venv (.servers/venv-gufo).

It must not import liftbridge_client or anything else of this project: gufo's pins live in
a separate venv. Usage::

    python bench/gufo_runner.py ADDRESS < tasks.json

``tasks.json`` is a JSON list of tasks; one JSON object per task is printed on stdout:

- ``{"op": "publish", "stream", "n", "size", "partitions", "ack"}``: ``publish()`` one
  message at a time (a unary Publish without a deadline, so the server sends no ack back).
- ``{"op": "publish_bulk", ...same}``: ``publish_bulk()`` over one PublishAsync stream,
  waiting for every ack.
- ``{"op": "rate", "stream", "n", "size", "rate"}``: PublishAsync at a fixed offered rate on
  partition 0; acks are matched to sends in order (one partition keeps them ordered).
- ``{"op": "sub", "stream", "counts": [per partition]}``: subscribe from EARLIEST to the end.

Errors are reported in the task's ``error`` field; the runner goes on with the next task.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
import traceback
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

from gufo.liftbridge.client import LiftbridgeClient  # type: ignore[import-not-found]
from gufo.liftbridge.types import AckPolicy, StartPosition  # type: ignore[import-not-found]


def _value(size: int) -> bytes:
    return bytes(97 + i % 26 for i in range(size))


def _policy(name: str) -> Any:
    return AckPolicy.ALL if name == "ALL" else AckPolicy.LEADER


async def _publish(client: Any, task: dict[str, Any]) -> dict[str, Any]:
    value = _value(task["size"])
    parts = task["partitions"]
    policy = _policy(task["ack"])
    latencies: list[float] = []
    start = time.perf_counter()
    for i in range(task["n"]):
        t0 = time.perf_counter()
        await client.publish(value, stream=task["stream"], partition=i % parts, ack_policy=policy)
        latencies.append((time.perf_counter() - t0) * 1e6)
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "acked": None, "latencies_us": latencies}


async def _publish_bulk(client: Any, task: dict[str, Any]) -> dict[str, Any]:
    value = _value(task["size"])
    parts = task["partitions"]
    policy = _policy(task["ack"])
    stream = task["stream"]
    requests = (
        client.get_publish_request(value, stream=stream, partition=i % parts, ack_policy=policy)
        for i in range(task["n"])
    )
    acked = 0
    async_errors = 0
    start = time.perf_counter()
    async for resp in client.publish_bulk(requests, wait=True):
        if resp.HasField("asyncError"):
            async_errors += 1
        else:
            acked += 1
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "acked": acked, "async_errors": async_errors}


async def _rate(client: Any, task: dict[str, Any]) -> dict[str, Any]:
    value = _value(task["size"])
    stream = task["stream"]
    policy = _policy(task.get("ack", "LEADER"))
    n = task["n"]
    rate = float(task["rate"])
    sent: deque[float] = deque()
    latencies: list[float] = []

    async def paced() -> AsyncIterator[Any]:
        start = time.perf_counter()
        for i in range(n):
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            sent.append(time.perf_counter())
            yield client.get_publish_request(value, stream=stream, partition=0, ack_policy=policy)

    start = time.perf_counter()
    acked = 0
    # publish_bulk hands an async iterable straight to grpc when wait=False.
    async for resp in client.publish_bulk(paced(), wait=False):
        t0 = sent.popleft()
        if not resp.HasField("asyncError"):
            acked += 1
            latencies.append((time.perf_counter() - t0) * 1e6)
        if acked == n:
            break
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "acked": acked, "latencies_us": latencies}


async def _sub(client: Any, task: dict[str, Any]) -> dict[str, Any]:
    stream = task["stream"]

    async def one(partition: int, count: int) -> tuple[int, int, int]:
        got = 0
        nbytes = 0
        disorder = 0
        if count == 0:
            return 0, 0, 0
        async for msg in client.subscribe(
            stream, partition=partition, start_position=StartPosition.EARLIEST
        ):
            if msg.offset != got:
                disorder += 1
            got = msg.offset + 1
            nbytes += len(msg.value)
            if got >= count:
                break
        return got, nbytes, disorder

    start = time.perf_counter()
    results = await asyncio.gather(*(one(p, c) for p, c in enumerate(task["counts"])))
    seconds = time.perf_counter() - start
    return {
        "seconds": seconds,
        "messages": sum(r[0] for r in results),
        "bytes": sum(r[1] for r in results),
        "out_of_order": sum(r[2] for r in results),
    }


_OPS = {"publish": _publish, "publish_bulk": _publish_bulk, "rate": _rate, "sub": _sub}


async def _main(address: str, tasks: list[dict[str, Any]]) -> None:
    for task in tasks:
        out: dict[str, Any] = {"task": task}
        try:
            async with LiftbridgeClient([address]) as client:
                out.update(
                    await asyncio.wait_for(_OPS[task["op"]](client, task), task.get("timeout", 300))
                )
        except BaseException as exc:  # report and go on with the next task
            if isinstance(exc, KeyboardInterrupt):
                raise
            out["error"] = f"{type(exc).__name__}: {exc}"
            out["traceback"] = traceback.format_exc(limit=5)
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    asyncio.run(_main(sys.argv[1], json.load(sys.stdin)))
