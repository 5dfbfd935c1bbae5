"""``liftbridge metadata``: brokers, streams, partitions, leaders, ISR, high watermarks."""

from __future__ import annotations

import click

from liftbridge_client import errors
from liftbridge_client.cli._app import cli, run, settings_of
from liftbridge_client.cli._output import (
    broker_dict,
    print_json,
    print_table,
    stream_dict,
)
from liftbridge_client.cli._partitions import leader_views
from liftbridge_client.client import Client

__all__ = ["metadata"]


@cli.command()
@click.argument("streams", nargs=-1)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
@click.pass_context
def metadata(ctx: click.Context, streams: tuple[str, ...], as_json: bool) -> None:
    """The cluster: brokers, and the partitions of STREAMS (default: all)."""

    async def main(client: Client) -> None:
        md = await client.fetch_metadata(*streams)
        missing = [name for name in streams if name not in md.streams]
        if missing:
            raise errors.NotFoundError(f"no stream {', '.join(missing)}")
        views = await leader_views(client, md)
        ordered = sorted(md.streams.values(), key=lambda s: s.name)
        if as_json:
            print_json(
                {
                    "brokers": [broker_dict(b) for b in md.brokers],
                    "streams": [stream_dict(s, views[s.name]) for s in ordered],
                }
            )
            return
        print_table(
            "Brokers",
            ["id", "address", "partitions", "leaders"],
            ((b.id, b.address, b.partition_count, b.leader_count) for b in md.brokers),
        )
        print_table(
            "Partitions",
            [
                "stream",
                "subject",
                "partition",
                "leader",
                "replicas",
                "isr",
                "hw",
                "newest",
                "state",
            ],
            (
                (
                    s.name,
                    s.partition_subject(p.id),
                    p.id,
                    p.leader,
                    ",".join(p.replicas),
                    ",".join(p.isr),
                    p.high_watermark,
                    p.newest_offset,
                    " ".join(w for w, on in (("paused", p.paused), ("readonly", p.readonly)) if on),
                )
                for s in ordered
                for _, p in sorted(views[s.name].items())
            ),
        )

    run(settings_of(ctx), main)
