"""The optional C accelerator (``_speedups``, built from _speedups.c), or None.

Each of its functions has a pure-Python twin that the package uses when the module was
not built (no C compiler at install time) or when ``LIFTBRIDGE_CLIENT_PURE`` is set to
anything but ``0`` (read once, at import): results are the same, only the CPU differs.
`ACTIVE` says which one runs; ``liftbridge --version`` names it.
"""

from __future__ import annotations

import os
from typing import TypeVar

__all__ = ["ACTIVE", "PURE_ENV", "new_slotted", "new_slotted_twin", "speedups"]

_T = TypeVar("_T")

PURE_ENV = "LIFTBRIDGE_CLIENT_PURE"

if os.environ.get(PURE_ENV, "") in ("", "0"):
    try:
        from liftbridge_client import _speedups as speedups
    except ImportError:  # built without a C compiler: the pure-Python twins serve
        speedups = None  # type: ignore[assignment]
else:
    speedups = None  # type: ignore[assignment]

ACTIVE = speedups is not None


def new_slotted_twin(cls: type[_T], /, *values: object) -> _T:
    """``cls(*values)``: the twin of the accelerator's ``new_slotted``, which sets every
    slot of a slotted class (``__slots__`` order) without calling ``__init__``. Only for
    classes whose ``__init__`` stores its arguments and nothing else (a frozen dataclass's
    stores each with ``object.__setattr__``: ten times the C's cost)."""
    return cls(*values)


new_slotted = new_slotted_twin if speedups is None else speedups.new_slotted
