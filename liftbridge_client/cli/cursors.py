"""``liftbridge cursors``: get and set a consumer's stored position."""

from __future__ import annotations

import click

from liftbridge_client.cli._app import cli, run, settings_of
from liftbridge_client.cli._output import print_json
from liftbridge_client.client import Client

__all__ = ["cursors"]

_PARTITION = click.option(
    "-p", "--partition", type=click.IntRange(min=0), default=0, show_default=True
)


@cli.group()
def cursors() -> None:
    """Stored consumer positions (the server needs cursors.stream.partitions >= 1)."""


@cursors.command("get")
@click.argument("cursor_id")
@click.argument("stream")
@_PARTITION
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def get_cursor(
    ctx: click.Context, cursor_id: str, stream: str, partition: int, as_json: bool
) -> None:
    """Print the offset CURSOR_ID stored for a STREAM partition (-1: none)."""

    async def main(client: Client) -> int:
        return await client.fetch_cursor(cursor_id, stream, partition=partition)

    offset = run(settings_of(ctx), main)
    if as_json:
        print_json(
            {"cursor": cursor_id, "stream": stream, "partition": partition, "offset": offset}
        )
    else:
        click.echo(offset)


@cursors.command("set")
@click.argument("cursor_id")
@click.argument("stream")
@click.argument("offset", type=click.IntRange(min=-1))
@_PARTITION
@click.pass_context
def set_cursor(
    ctx: click.Context, cursor_id: str, stream: str, offset: int, partition: int
) -> None:
    """Store OFFSET as CURSOR_ID's position in a STREAM partition."""

    async def main(client: Client) -> None:
        await client.set_cursor(cursor_id, stream, offset, partition=partition)

    run(settings_of(ctx), main)
    click.echo(f"cursor {cursor_id} on {stream}/{partition} = {offset}", err=True)
