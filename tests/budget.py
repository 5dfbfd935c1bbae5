"""How many examples each generated (Hypothesis) unit test draws, and why it can change.

`make test` draws every test's full count. The other runs of tests/unit in .ci/run (the
sdist installed in a fresh venv, `make release-check`; the floor of each dependency range,
`make test-deps`) are there to prove the package installs and works with those versions,
not to search inputs again: they set ``LIFTBRIDGE_TEST_EXAMPLES`` to a fraction, and each
count is scaled by it (at least 10 examples). A hunt for rare failing inputs sets it above
1 (up to 100), by hand.
"""

from __future__ import annotations

import os

ENV = "LIFTBRIDGE_TEST_EXAMPLES"
MAX_SCALE = 100


def scale() -> float:
    text = os.environ.get(ENV, "1")
    try:
        value = float(text)
    except ValueError:
        raise RuntimeError(f"{ENV}={text!r}: a number in (0, {MAX_SCALE}] is needed") from None
    if not 0 < value <= MAX_SCALE:
        raise RuntimeError(f"{ENV}={text!r}: a number in (0, {MAX_SCALE}] is needed")
    return value


def examples(count: int) -> int:
    """``count`` examples, scaled by ``LIFTBRIDGE_TEST_EXAMPLES`` (at least 10)."""
    factor = scale()
    return count if factor == 1 else max(10, round(count * factor))
