"""``liftbridge streams``: list, create, delete, pause, readonly."""

from __future__ import annotations

from typing import Any

import click

from liftbridge_client.cli._app import cli, run, settings_of
from liftbridge_client.cli._output import iso, print_json, print_table, stream_dict
from liftbridge_client.cli._params import DURATION
from liftbridge_client.cli._partitions import leader_views
from liftbridge_client.client import Client
from liftbridge_client.options import StreamConfig

__all__ = ["streams"]

_JSON = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")


@cli.group()
def streams() -> None:
    """Create, list and administer streams."""


@streams.command("list")
@_JSON
@click.pass_context
def list_streams(ctx: click.Context, as_json: bool) -> None:
    """List the streams and their partitions."""

    async def main(client: Client) -> None:
        metadata = await client.fetch_metadata()
        views = await leader_views(client, metadata)
        ordered = sorted(metadata.streams.values(), key=lambda s: s.name)
        if as_json:
            print_json([stream_dict(s, views[s.name]) for s in ordered])
            return
        print_table(
            None,
            ["stream", "subject", "partitions", "newest offsets", "created"],
            (
                (
                    s.name,
                    s.subject,
                    len(s.partitions),
                    ",".join(str(p.newest_offset) for _, p in sorted(views[s.name].items())),
                    iso(s.creation_timestamp_ns),
                )
                for s in ordered
            ),
        )

    run(settings_of(ctx), main)


@streams.command()
@click.argument("name")
@click.option("-s", "--subject", help="NATS subject (default: the stream's name).")
@click.option("-p", "--partitions", type=click.IntRange(min=1), help="Number of partitions.")
@click.option(
    "-r",
    "--replication-factor",
    type=click.IntRange(min=-1),
    help="Replicas per partition; -1: every server.",
)
@click.option("--group", help="NATS queue group the partition leaders subscribe with.")
@click.option(
    "--retention-max-bytes",
    type=click.IntRange(min=0),
    help="Delete the oldest messages beyond this many bytes per partition.",
)
@click.option(
    "--retention-max-messages",
    type=click.IntRange(min=0),
    help="Delete the oldest messages beyond this many per partition.",
)
@click.option("--retention-max-age", type=DURATION, help="Delete messages older than this (7d).")
@click.option("--cleaner-interval", type=DURATION, help="How often retention is applied (5m).")
@click.option(
    "--segment-max-bytes", type=click.IntRange(min=0), help="Roll a new segment at this size."
)
@click.option("--segment-max-age", type=DURATION, help="Roll a new segment after this (1d).")
@click.option(
    "--compact/--no-compact", "compact_enabled", default=None, help="Keep the newest per key."
)
@click.option(
    "--compact-max-goroutines", type=click.IntRange(min=1), help="Compaction's parallelism."
)
@click.option("--auto-pause-time", type=DURATION, help="Pause partitions idle this long (1h).")
@click.option(
    "--auto-pause-disable-if-subscribers/--no-auto-pause-disable-if-subscribers", default=None
)
@click.option("--min-isr", type=click.IntRange(min=1), help="Minimum in-sync replicas.")
@click.option(
    "--optimistic-concurrency/--no-optimistic-concurrency",
    "optimistic_concurrency_control",
    default=None,
)
@click.option("--encryption/--no-encryption", default=None, help="Encrypt at rest.")
@click.option("--exist-ok", is_flag=True, help="Succeed if the same stream already exists.")
@click.pass_context
def create(
    ctx: click.Context, /, name: str, subject: str | None, exist_ok: bool, **settings: Any
) -> None:
    """Create stream NAME. Unset options take the server's defaults.

    Durations need a unit: ms, s, m, h, d or w (7d, 1h30m); a bare number other than 0
    is refused.
    """
    config = StreamConfig(**{k: v for k, v in settings.items() if v is not None})

    async def main(client: Client) -> None:
        await client.create_stream(subject or name, name, config=config, exist_ok=exist_ok)

    run(settings_of(ctx), main)
    click.echo(f"created stream {name}", err=True)


@streams.command()
@click.argument("name")
@click.pass_context
def delete(ctx: click.Context, name: str) -> None:
    """Delete stream NAME and its data."""

    async def main(client: Client) -> None:
        await client.delete_stream(name)

    run(settings_of(ctx), main)
    click.echo(f"deleted stream {name}", err=True)


def _which(stream: str, partitions: tuple[int, ...]) -> str:
    """``stream s``, ``partition 1 of stream s``, ``partitions 0, 2 of stream s``."""
    if not partitions:
        return f"stream {stream}"
    ids = ", ".join(str(p) for p in sorted(set(partitions)))
    return f"{'partition' if len(set(partitions)) == 1 else 'partitions'} {ids} of stream {stream}"


_PARTITIONS = click.option(
    "-p",
    "--partition",
    "partitions",
    type=click.IntRange(min=0),
    multiple=True,
    help="A partition (repeat; default: all).",
)


@streams.command()
@click.argument("name")
@_PARTITIONS
@click.option(
    "--resume-all",
    is_flag=True,
    help="When a publish resumes one partition, resume them all.",
)
@click.pass_context
def pause(ctx: click.Context, name: str, partitions: tuple[int, ...], resume_all: bool) -> None:
    """Pause partitions of NAME; publishing to a partition resumes it."""

    async def main(client: Client) -> None:
        await client.pause_stream(name, partitions=partitions, resume_all=resume_all)

    run(settings_of(ctx), main)
    click.echo(f"paused {_which(name, partitions)}", err=True)


@streams.command()
@click.argument("name")
@_PARTITIONS
@click.option("--off", is_flag=True, help="Make the partitions writable again.")
@click.pass_context
def readonly(ctx: click.Context, name: str, partitions: tuple[int, ...], off: bool) -> None:
    """Make partitions of NAME read-only (or writable again with --off)."""

    async def main(client: Client) -> None:
        await client.set_stream_readonly(name, partitions=partitions, readonly=not off)

    run(settings_of(ctx), main)
    state = "writable" if off else "read-only"
    verb = "are" if len(set(partitions)) > 1 else "is"
    click.echo(f"{_which(name, partitions)} {verb} {state}", err=True)
