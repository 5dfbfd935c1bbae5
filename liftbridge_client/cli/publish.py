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
from liftbridge_client.cli._app import CommandError, cli, run, settings_of
from liftbridge_client.cli._connect import check_transport
from liftbridge_client.cli._exit import status_for
from liftbridge_client.cli._inputs import messages, split_key
from liftbridge_client.cli._output import counted, err_console, print_json
from liftbridge_client.cli._params import (
    DURATION_UNITS,
    HEADER,
    POSITIVE_DURATION,
    format_duration,
)
from liftbridge_client.cli._partitions import check_partition
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
@click.option(
    "--ack-wait",
    type=POSITIVE_DURATION,
    default="5s",
    show_default=True,
    help=f"How long to wait for each ack ({DURATION_UNITS}).",
)
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
    settings = settings_of(ctx)
    options: dict[str, Any] = {
        "headers": dict(headers) or None,
        # "zero": partition 0 whatever the key (a None partitioner is the client's own).
        "partition": 0 if partition is None and partitioner == "zero" else partition,
        "partitioner": _PARTITIONERS[partitioner],
        "ack_policy": AckPolicy[ack.upper()],
        "transport": Transport(transport) if transport else None,
        "ack_wait": ack_wait,
    }
    over_nats = transport == "nats" or (transport is None and bool(settings.nats_servers))
    check_transport(transport, settings)
    fixed_key = key.encode() if key is not None else None
    separator = key_separator.encode() if key_separator else None
    show = err_console.is_terminal if progress is None else progress
    total = len(values) if values and not files else None

    async def main(client: Client) -> dict[str, Any]:
        if partition is not None:
            await check_partition(client, stream, partition)
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
                first.add_note(
                    f"{len(failures)} of {counted(len(results), 'publish', 'publishes')} failed"
                )
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

    async def main_in_cli_terms(client: Client) -> dict[str, Any]:
        try:
            return await main(client)
        except errors.PartitionPausedError as exc:
            # Without -p the partition is the partitioner's choice; `metadata` shows which.
            part, flag = f"a partition of stream {stream}", "-p N"
            if partition is not None:
                part, flag = f"partition {partition} of stream {stream}", f"-p {partition}"
            raise CommandError(
                f"PartitionPausedError: {part} is paused: it drops what NATS brings it. "
                "Publish with -t grpc (that resumes it), or resume it with "
                f"`liftbridge subscribe {stream} {flag} --resume`",
                status_for(exc),
            ) from exc
        except errors.AckTimeoutError as exc:
            # The library's text names a correlation id; the user needs the flag and the
            # fact that the message may be stored all the same (a resend can duplicate it).
            notes = "".join(f"; {note}" for note in getattr(exc, "__notes__", ()))
            raise CommandError(
                f"AckTimeoutError: no ack within --ack-wait {format_duration(ack_wait)} "
                f"(--ack {ack}){notes}. The server may still have stored the message, so "
                "publishing again can duplicate it. Give it longer with --ack-wait (e.g. "
                f"--ack-wait 30s), or check the partition's leader with `liftbridge metadata "
                f"{stream}`",
                status_for(exc),
            ) from exc
        except errors.ConnectionClosedError as exc:
            if not over_nats:
                raise
            raise CommandError(
                f"ConnectionClosedError: the NATS connection was lost ({exc.__cause__ or exc}); "
                "publish again, or with -t grpc",
                status_for(exc),
            ) from exc

    summary = run(settings, main_in_cli_terms)
    if as_json:
        print_json(summary)
    else:
        rate = summary["msgs_per_s"]
        err_console.print(
            f"published {counted(summary['published'], 'message')} to {stream} in "
            f"{summary['seconds']:.2f} s" + (f" ({rate:,.0f} msgs/s)" if rate else "")
        )
