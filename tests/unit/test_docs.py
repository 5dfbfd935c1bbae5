"""Docs that could drift from the code are checked against it."""

from __future__ import annotations

import inspect
from pathlib import Path

from liftbridge_client import errors

ROOT = Path(__file__).resolve().parents[2]


def test_every_error_class_is_in_the_error_reference() -> None:
    text = (ROOT / "docs" / "errors.md").read_text()
    classes = [
        name
        for name, obj in vars(errors).items()
        if inspect.isclass(obj)
        and issubclass(obj, errors.LiftbridgeError)
        and obj.__module__ == errors.__name__
    ]
    assert len(classes) > 30
    missing = [name for name in classes if f"`{name}`" not in text]
    assert not missing, f"docs/errors.md lacks {missing}"


def test_readme_gives_the_two_setup_commands() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "make demo" in readme
    assert "make test" in readme
    assert "make test" in (ROOT / ".ci" / "run").read_text()
