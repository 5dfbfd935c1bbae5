"""The optional C accelerator (``_speedups``, built from _speedups.c), or None.

Each of its functions has a pure-Python twin that the package uses when the module was
not built (no C compiler at install time) or when ``LIFTBRIDGE_CLIENT_PURE`` is set to
anything but ``0`` (read once, at import): results are the same, only the CPU differs.
`ACTIVE` says which one runs; ``liftbridge --version`` names it.
"""

from __future__ import annotations

import os

__all__ = ["ACTIVE", "PURE_ENV", "speedups"]

PURE_ENV = "LIFTBRIDGE_CLIENT_PURE"

if os.environ.get(PURE_ENV, "") in ("", "0"):
    try:
        from liftbridge_client import _speedups as speedups
    except ImportError:  # built without a C compiler: the pure-Python twins serve
        speedups = None  # type: ignore[assignment]
else:
    speedups = None  # type: ignore[assignment]

ACTIVE = speedups is not None
