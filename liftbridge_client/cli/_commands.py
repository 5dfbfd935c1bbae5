"""The root command with every command registered (importing a module registers it)."""

from __future__ import annotations

from liftbridge_client.cli import bench, cursors, metadata, publish, server, streams, subscribe
from liftbridge_client.cli._app import cli

__all__ = ["bench", "cli", "cursors", "metadata", "publish", "server", "streams", "subscribe"]
