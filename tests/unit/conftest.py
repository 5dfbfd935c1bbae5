"""The generated tests' default example count follows ``LIFTBRIDGE_TEST_EXAMPLES`` too
(see budget.py); tests that set their own count scale it with `budget.examples`."""

from __future__ import annotations

from budget import examples, scale
from hypothesis import settings

if scale() < 1:
    settings.register_profile("liftbridge-scaled", max_examples=examples(100))
    settings.load_profile("liftbridge-scaled")
