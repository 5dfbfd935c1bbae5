"""Duration fields of the frozen option dataclasses: numbers or timedeltas in, float out.

A `Seconds` field is a data descriptor: the dataclass ``__init__`` (and `dataclasses.replace`)
goes through `Seconds.__set__`, which validates the value (`_util.validate.seconds`) and stores
float seconds; reading the attribute gives that float. Type checkers take the ``__set__``
parameter type for the constructor (``float | timedelta``) and the ``__get__`` result type
for the attribute (``float``), so code reading options never sees a timedelta.

Classes using it cannot have ``slots=True`` (the descriptor is a class attribute); the values
live in the instance ``__dict__`` under a private key.
"""

from __future__ import annotations

import datetime
from typing import Any, overload

from liftbridge_client._util import validate as _validate

__all__ = ["OptionalSeconds", "Seconds"]


class Seconds:
    """A required duration field (> 0, or >= 0 with ``allow_zero``)."""

    def __init__(self, default: float, *, allow_zero: bool = False) -> None:
        self._default = default
        self._allow_zero = allow_zero
        self._name = ""
        self._key = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name
        self._key = f"_seconds_{name}"

    @overload
    def __get__(self, obj: None, objtype: type | None = None) -> float: ...
    @overload
    def __get__(self, obj: object, objtype: type | None = None) -> float: ...
    def __get__(self, obj: object, objtype: type | None = None) -> Any:
        if obj is None:
            return self._default  # the dataclass reads the default from the class
        return obj.__dict__[self._key]

    def __set__(self, obj: object, value: float | datetime.timedelta) -> None:
        obj.__dict__[self._key] = _validate.seconds(self._name, value, allow_zero=self._allow_zero)


class OptionalSeconds:
    """A duration field where None means "not set" (or "disabled", as the field says)."""

    def __init__(self, default: float | None, *, allow_zero: bool = False) -> None:
        self._default = default
        self._allow_zero = allow_zero
        self._name = ""
        self._key = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name
        self._key = f"_seconds_{name}"

    @overload
    def __get__(self, obj: None, objtype: type | None = None) -> float | None: ...
    @overload
    def __get__(self, obj: object, objtype: type | None = None) -> float | None: ...
    def __get__(self, obj: object, objtype: type | None = None) -> Any:
        if obj is None:
            return self._default
        return obj.__dict__[self._key]

    def __set__(self, obj: object, value: float | datetime.timedelta | None) -> None:
        obj.__dict__[self._key] = (
            None
            if value is None
            else _validate.seconds(self._name, value, allow_zero=self._allow_zero)
        )
