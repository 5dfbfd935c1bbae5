"""The ``liftbridge`` command line (install the ``[cli]`` extra).

One module per command or command group; `_app` holds the root command, its
connection options (flags or ``LIFTBRIDGE_*`` variables) and error reporting.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> None:
    """Run the command line (the ``liftbridge`` console script)."""
    try:
        from liftbridge_client.cli._commands import cli
    except ImportError as exc:
        if exc.name not in {"click", "rich"}:
            raise
        sys.exit(f"liftbridge: the command line needs the [cli] extra: {exc}")
    cli.main(args=list(argv) if argv is not None else None, prog_name="liftbridge")
