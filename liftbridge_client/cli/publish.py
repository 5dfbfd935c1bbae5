"""``liftbridge publish``: messages from arguments, files or stdin lines."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import click
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
)
from rich.text import Text

from liftbridge_client import errors
from liftbridge_client._publish.acks import PublishFuture
from liftbridge_client.cli._app import cli, run, settings_of
from liftbridge_client.cli._inputs import messages, split_key
from liftbridge_client.cli._output import err_console, print_json
from liftbridge_client.cli._params import HEADER
from liftbridge_client.client import Client
from liftbridge_client.models import Ack, AckPolicy
from liftbridge_client.options import Transport
from liftbridge_client.partitioning import KeyPartitioner, Partitioner, RoundRobinPartitioner

__all__ = ["publish"]

_PARTITIONERS: dict[str, Partitioner | None] = {
    "key": KeyPartitioner(),
    "round-robin": RoundRobinPartitioner(),
    "zero": None,
}


class _RateColumn(ProgressColumn):
    """Messages per second: rich's recent estimate, else the average (setting the total
    at the end resets rich's samples)."""

    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        if speed is None and task.elapsed:
            speed = task.completed / task.elapsed
        return Text("" if speed is None else f"{speed:,.0f} msg/s", style="progress.data.speed")


def _progress(enabled: bool) -> Progress:
    return Progress(
        TextColumn("publishing"),
        BarColumn(),
        MofNCompleteColumn(),
        _RateColumn(),
        TimeElapsedColumn(),
        console=err_console,
        disable=not enabled,
        transient=False,
    )


def _release(futures: list[PublishFuture[Any]]) -> None:
    """On the way out with an error: withdraw what is pending, consume what failed."""
    for future in futures:
        if not future.done():
            future.cancel()
        elif not future.cancelled():
            future.exception()


@cli.command()
@click.argument("stream")
@click.argument("values", nargs=-1)
@click.option(
    "-f",
    "--file",
    "files",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False, allow_dash=True),
    help="Read messages from FILE, one per line ('-' is stdin; repeat).",
)
@click.option("--whole", is_flag=True, help="Each file (or stdin) is one message, not lines.")
@click.option("-k", "--key", help="Key of every message.")
@click.option(
    "-K",
    "--key-separator",
    help="Lines are KEY<SEP>VALUE: split each at the first SEP.",
)
@click.option("-H", "--header", "headers", type=HEADER, multiple=True, help="name=value (repeat).")
@click.option("-p", "--partition", type=click.IntRange(min=0), help="Publish to this partition.")
@click.option(
    "--partitioner",
    type=click.Choice(sorted(_PARTITIONERS)),
    default="key",
    show_default=True,
    help="Partition choice without --partition: key hash, round-robin, or always 0.",
)
@click.option(
    "-a",
    "--ack",
    type=click.Choice([p.name.lower() for p in AckPolicy]),
    default="leader",
    show_default=True,
    help="Wait for the leader, all in-sync replicas, or nothing.",
)
@click.option(
    "-t",
    "--transport",
    type=click.Choice([t.value for t in Transport]),
    help="Default: nats with --nats, else grpc.",
)
@click.option("--ack-wait", type=click.FloatRange(min=0, min_open=True), default=5.0)
@click.option(
    "--progress/--no-progress",
    default=None,
    help="Progress bar with rate on stderr (default: when stderr is a terminal).",
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary on stdout.")
@click.pass_context
def publish(
    ctx: click.Context,
    stream: str,
    values: tuple[str, ...],
    files: tuple[str, ...],
    whole: bool,
    key: str | None,
    key_separator: str | None,
    headers: tuple[tuple[str, bytes], ...],
    partition: int | None,
    partitioner: str,
    ack: str,
    transport: str | None,
    ack_wait: float,
    progress: bool | None,
    as_json: bool,
) -> None:
    """Publish VALUES (or lines of --file, or of stdin) to STREAM.

    Messages are pipelined: up to 1024 await their acks at once.
    """
    options: dict[str, Any] = {
        "headers": dict(headers) or None,
        "partition": partition,
        "partitioner": _PARTITIONERS[partitioner],
        "ack_policy": AckPolicy[ack.upper()],
        "transport": Transport(transport) if transport else None,
        "ack_wait": ack_wait,
    }
    fixed_key = key.encode() if key is not None else None
    separator = key_separator.encode() if key_separator else None
    show = err_console.is_terminal if progress is None else progress
    total = len(values) if values and not files else None

    async def main(client: Client) -> dict[str, Any]:
        futures: list[PublishFuture[Any]] = []
        started = time.monotonic()
        with _progress(show) as bar:
            task = bar.add_task("publish", total=total)
            try:
                async for line in messages(values, files, whole=whole):
                    msg_key, value = fixed_key, line
                    if separator is not None:
                        msg_key, value = split_key(line, separator)
                        msg_key = msg_key if msg_key is not None else fixed_key
                    futures.append(await client.send(stream, value, key=msg_key, **options))
                    bar.advance(task)
            except BaseException:
                _release(futures)
                raise
            results = await asyncio.gather(*futures, return_exceptions=True)
            bar.update(task, total=len(futures))
        seconds = time.monotonic() - started
        failures = [r for r in results if isinstance(r, BaseException)]
        if failures:
            first = failures[0]
            if len(failures) > 1 and isinstance(first, errors.LiftbridgeError):
                first.add_note(f"{len(failures)} of {len(results)} publishes failed")
            raise first
        offsets: dict[int, list[int]] = {}
        for ack_ in results:
            if isinstance(ack_, Ack):
                offsets.setdefault(ack_.partition, []).append(ack_.offset)
        return {
            "stream": stream,
            "published": len(results),
            "seconds": round(seconds, 6),
            "msgs_per_s": round(len(results) / seconds, 1) if seconds > 0 else None,
            "partitions": {
                str(p): {"first_offset": min(o), "last_offset": max(o)}
                for p, o in sorted(offsets.items())
            },
        }

    summary = run(settings_of(ctx), main)
    if as_json:
        print_json(summary)
    else:
        rate = summary["msgs_per_s"]
        err_console.print(
            f"published {summary['published']} messages to {stream} in "
            f"{summary['seconds']:.2f} s" + (f" ({rate:,.0f} msgs/s)" if rate else "")
        )
