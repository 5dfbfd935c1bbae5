"""``liftbridge subscribe``: read a partition, to a stop position or following it."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

import click

from liftbridge_client import errors
from liftbridge_client.cli._app import CommandError, cli, fail, run, settings_of
from liftbridge_client.cli._empty import Request, why_empty
from liftbridge_client.cli._exit import ExitStatus, status_for
from liftbridge_client.cli._output import err_console, message_dict
from liftbridge_client.cli._params import DURATION, TIME
from liftbridge_client.client import Client
from liftbridge_client.models import Message, StartPosition, StopPosition
from liftbridge_client.subscription import SubscribeArgs

__all__ = ["format_message", "subscribe"]


def format_message(msg: Message, output: str, template: str | None) -> bytes:
    """One output line (without its newline) for ``--output``."""
    if output == "raw":
        return msg.value
    fields = message_dict(msg)
    if output == "json":
        return json.dumps(fields).encode()
    assert template is not None
    fields["key"] = msg.key.decode(errors="replace")
    fields["value"] = msg.value.decode(errors="replace")
    fields["headers"] = {k: v.decode(errors="replace") for k, v in msg.headers.items()}
    return template.format_map(fields).encode()


def _start_args(
    earliest: bool,
    latest: bool,
    new_only: bool,
    offset: int | None,
    at: int | None,
    since: float | None,
) -> SubscribeArgs:
    chosen = [
        name
        for name, on in (
            ("--earliest", earliest),
            ("--latest", latest),
            ("--new-only", new_only),
            ("--offset", offset is not None),
            ("--time", at is not None),
            ("--since", since is not None),
        )
        if on
    ]
    if len(chosen) > 1:
        raise click.UsageError(f"choose one start position, not {' and '.join(chosen)}")
    if offset is not None:
        return {"start_offset": offset}
    if at is not None:
        return {"start_timestamp_ns": at}
    if since is not None:
        return {"start_time_delta": since}
    if latest:
        return {"start": StartPosition.LATEST}
    if new_only:
        return {"start": StartPosition.NEW_ONLY}
    return {"start": StartPosition.EARLIEST}


def _stop_args(
    follow: bool,
    stop_offset: int | None,
    stop_at: int | None,
    *,
    new_only: bool = False,
    offset: int | None = None,
) -> SubscribeArgs:
    if follow and (stop_offset is not None or stop_at is not None):
        raise click.UsageError("--follow reads forever: no --stop-offset or --stop-time with it")
    if stop_offset is not None and stop_at is not None:
        raise click.UsageError("choose one of --stop-offset and --stop-time")
    if new_only and not follow and stop_offset is None and stop_at is None:
        # It would stop at the newest message, before the first new one.
        raise click.UsageError(
            "--new-only prints only messages published after it starts: add -f (--follow), "
            "or --stop-offset / --stop-time to wait until then"
        )
    if offset is not None and stop_offset is not None and stop_offset < offset:
        raise click.UsageError(f"--stop-offset {stop_offset} is before --offset {offset}")
    if follow:
        return {"stop": StopPosition.ON_CANCEL}
    if stop_offset is not None:
        return {"stop_offset": stop_offset}
    if stop_at is not None:
        return {"stop_timestamp_ns": stop_at}
    return {"stop": StopPosition.LATEST}


@cli.command()
@click.argument("stream")
@click.option("-p", "--partition", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--earliest", is_flag=True, help="Start at the oldest message (the default).")
@click.option("--latest", is_flag=True, help="Start at the newest message.")
@click.option(
    "--new-only", is_flag=True, help="Start after the newest message (needs -f or a stop)."
)
@click.option("--offset", type=click.IntRange(min=0), help="Start at this offset.")
@click.option("--time", "at", type=TIME, help="Start at this time (ISO 8601, UTC by default).")
@click.option(
    "--since", type=DURATION, help="Start this long ago (10m, 2h, 1d; units ms, s, m, h, d, w)."
)
@click.option(
    "-f", "--follow", is_flag=True, help="Keep reading new messages until Ctrl-C, like tail -f."
)
@click.option("--stop-offset", type=click.IntRange(min=0), help="Stop after this offset.")
@click.option("--stop-time", "stop_at", type=TIME, help="Stop at this time.")
@click.option("-n", "--count", type=click.IntRange(min=1), help="Stop after COUNT messages.")
@click.option(
    "-o",
    "--output",
    type=click.Choice(["raw", "json", "template"]),
    default="raw",
    show_default=True,
    help="Values as they are, JSON lines, or --template.",
)
@click.option("--json", "as_json", is_flag=True, help="Same as --output json.")
@click.option(
    "-t",
    "--template",
    help="Python format string, e.g. '{offset} {key}={value}' (fields: stream, partition, "
    "offset, key, value, headers, timestamp, timestamp_ns, subject). Implies --output template.",
)
@click.option("--resume", is_flag=True, help="Resume the partition if it is paused.")
@click.option("--read-isr-replica", is_flag=True, help="Read from any in-sync replica.")
@click.pass_context
def subscribe(
    ctx: click.Context,
    stream: str,
    partition: int,
    earliest: bool,
    latest: bool,
    new_only: bool,
    offset: int | None,
    at: int | None,
    since: float | None,
    follow: bool,
    stop_offset: int | None,
    stop_at: int | None,
    count: int | None,
    output: str,
    as_json: bool,
    template: str | None,
    resume: bool,
    read_isr_replica: bool,
) -> None:
    """Print messages of a STREAM partition: from the oldest to the newest by default.

    Without --follow, reading stops at the newest message when it starts (or at
    --stop-offset / --stop-time). When nothing is printed, a line on stderr says why;
    the exit status is then 9 if the start or stop position asked for has no message
    (e.g. --offset past the end), 0 for an empty partition read from its start.
    """
    if as_json:
        output = "json"
    if template is not None:
        output = "template"
    elif output == "template":
        raise click.UsageError("--output template needs --template")
    args: SubscribeArgs = {
        **_start_args(earliest, latest, new_only, offset, at, since),
        **_stop_args(follow, stop_offset, stop_at, new_only=new_only, offset=offset),
    }
    if resume:
        args["resume"] = True
    if read_isr_replica:
        args["read_isr_replica"] = True
    out = sys.stdout.buffer
    # Each line reaches a terminal or a follower at once; a pipe gets whole buffers.
    flush_each = follow or sys.stdout.isatty()

    def render(msg: Message) -> bytes:
        try:
            return format_message(msg, output, template)
        except (KeyError, IndexError, ValueError) as exc:
            fail(f"--template: {exc!r}", ExitStatus.USAGE)
            raise AssertionError("unreachable") from None

    request = Request(stream, partition, offset, at, since, stop_offset, stop_at)

    async def main(client: Client) -> tuple[str, ExitStatus] | None:
        seen = 0
        write: Callable[[bytes], Any] = out.write
        try:
            async with client.subscribe(stream, partition, **args) as sub:
                async for msg in sub:
                    write(render(msg) + b"\n")
                    if flush_each:
                        out.flush()
                    seen += 1
                    if count is not None and seen >= count:
                        break
        except errors.PartitionPausedEnd as exc:
            raise _paused(request, exc) from exc
        except errors.NotLeaderError as exc:
            if resume or not await _is_paused(client, stream, partition):
                raise
            raise _paused(request) from exc
        out.flush()
        if seen or follow:
            return None
        if not resume and await _is_paused(client, stream, partition):
            # A paused partition that is empty, or read past its end, ends the read at once
            # instead of saying it is paused (v1.9.0), and refuses FetchPartitionMetadata.
            raise _paused(request)
        info = await client.fetch_partition_metadata(stream, partition)
        newest_ns = await _newest_time(client, stream, partition, info.newest_offset)
        return why_empty(request, info.newest_offset, newest_ns)

    empty = run(settings_of(ctx), main)
    if empty is not None:
        message, status = empty
        err_console.print(message, soft_wrap=True)
        raise SystemExit(int(status))


def _paused(request: Request, exc: errors.LiftbridgeError | None = None) -> CommandError:
    name = type(exc).__name__ if exc is not None else errors.PartitionPausedEnd.__name__
    return CommandError(
        f"{name}: {request.where} is paused: add --resume to resume it and read",
        status_for(exc) if exc is not None else ExitStatus.ERROR,
    )


async def _is_paused(client: Client, stream: str, partition: int) -> bool:
    """Paused, as the cluster's metadata says (the leader itself refuses to answer then)."""
    found = (await client.fetch_metadata(stream)).streams.get(stream)
    part = found.partitions.get(partition) if found is not None else None
    return part is not None and part.paused


async def _newest_time(client: Client, stream: str, partition: int, newest: int) -> int | None:
    """The timestamp of the partition's newest message (None if it has none)."""
    if newest < 0:
        return None
    async with client.subscribe(
        stream, partition, start=StartPosition.LATEST, stop=StopPosition.LATEST
    ) as sub:
        async for msg in sub:
            return msg.timestamp_ns
    return None
