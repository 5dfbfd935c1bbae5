"""liftbridge-client: an asyncio client for Liftbridge."""

from __future__ import annotations

from liftbridge_client._version import __version__

__all__ = ["__version__"]
