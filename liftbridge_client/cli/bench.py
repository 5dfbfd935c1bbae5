"""``liftbridge bench``: a quick publish-then-subscribe benchmark on a temporary stream."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import click

from liftbridge_client.cli._app import cli, run, settings_of
from liftbridge_client.cli._connect import check_transport
from liftbridge_client.cli._output import counted, err_console, print_json, print_table
from liftbridge_client.cli._percentiles import summarize
from liftbridge_client.client import Client
from liftbridge_client.models import AckPolicy, StartPosition, StopPosition
from liftbridge_client.options import Transport

__all__ = ["bench"]


async def _publish(
    client: Client, stream: str, count: int, size: int, options: dict[str, Any]
) -> tuple[float, list[float]]:
    """Seconds to publish ``count`` messages, and each one's publish-to-ack latency."""
    payload = b"x" * size
    latencies: list[float] = []
    loop = asyncio.get_running_loop()
    started = loop.time()
    futures = []
    for _ in range(count):
        sent = loop.time()
        future = await client.send(stream, payload, **options)
        future.add_done_callback(lambda _f, t=sent: latencies.append(loop.time() - t))
        futures.append(future)
    await asyncio.gather(*futures)
    return loop.time() - started, latencies


async def _consume(client: Client, stream: str, count: int) -> float:
    """Seconds to read ``count`` messages from the start of partition 0."""
    started = time.monotonic()
    seen = 0
    async with client.subscribe(
        stream, start=StartPosition.EARLIEST, stop=StopPosition.LATEST
    ) as sub:
        async for _ in sub:
            seen += 1
    if seen != count:
        raise click.ClickException(f"read {counted(seen, 'message')} back, published {count}")
    return time.monotonic() - started


@cli.command()
@click.option(
    "-n",
    "--messages",
    type=click.IntRange(min=1),
    default=10_000,
    show_default=True,
    help="How many messages to publish.",
)
@click.option(
    "-s",
    "--size",
    type=click.IntRange(min=0),
    default=256,
    show_default=True,
    help="Bytes per message value.",
)
@click.option(
    "-a",
    "--ack",
    type=click.Choice(["leader", "all"]),
    default="leader",
    show_default=True,
)
@click.option("-t", "--transport", type=click.Choice([t.value for t in Transport]))
@click.option(
    "-w",
    "--window",
    type=click.IntRange(min=1),
    default=1024,
    show_default=True,
    help="Publishes awaiting their acks at once (1: one at a time).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def bench(
    ctx: click.Context,
    messages: int,
    size: int,
    ack: str,
    transport: str | None,
    window: int,
    as_json: bool,
) -> None:
    """Publish MESSAGES to a new one-partition stream, read them back, delete it.

    Prints msgs/s both ways and publish-to-ack latency percentiles (ms).
    """
    check_transport(transport, settings_of(ctx))
    options: dict[str, Any] = {
        "ack_policy": AckPolicy[ack.upper()],
        "transport": Transport(transport) if transport else None,
    }
    stream = f"liftbridge-bench-{uuid.uuid4().hex[:12]}"

    async def main(client: Client) -> dict[str, Any]:
        await client.create_stream(stream, stream)
        try:
            pub_s, latencies = await _publish(client, stream, messages, size, options)
            sub_s = await _consume(client, stream, messages)
        finally:
            await client.delete_stream(stream)
        return {
            "messages": messages,
            "size": size,
            "ack": ack,
            "window": window,
            "publish_msgs_per_s": round(messages / pub_s, 1),
            "publish_mb_per_s": round(messages * size / pub_s / 1e6, 3),
            "subscribe_msgs_per_s": round(messages / sub_s, 1),
            "latency_ms": {k: round(v * 1000, 3) for k, v in summarize(latencies).items()},
        }

    if not as_json:
        err_console.print(f"publishing {counted(messages, 'message')} of {size} B to {stream}...")
    result = run(settings_of(ctx), main, max_inflight=window)
    if as_json:
        print_json(result)
        return
    print_table(
        None,
        ["", "msgs/s", "MB/s"],
        [
            ("publish", f"{result['publish_msgs_per_s']:,.0f}", result["publish_mb_per_s"]),
            ("subscribe", f"{result['subscribe_msgs_per_s']:,.0f}", ""),
        ],
    )
    lat = result["latency_ms"]
    print_table("publish -> ack latency (ms)", list(lat), [[f"{v:.3f}" for v in lat.values()]])
