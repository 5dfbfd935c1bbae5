"""A griffe extension for the docs site: what a reference page shows of a class.

Reference pages render whole modules with ``filters: public`` and
``show_if_no_docstring: true``, so that a module's ``__all__`` decides what is shown (a
name added to it shows up by itself, documented or not). Two kinds of class members
would then fill the pages and their tables of contents with empty entries:

- dunder methods (``__repr__``, ``__enter__``), which griffe counts as public though a
  reader uses them through syntax, not by name (``merge_init_into_class`` still reads
  ``__init__``: it does not filter);
- the fields of a dataclass, which this project documents in the class docstring's list
  rather than one by one (a field with a docstring of its own stays).

A class whose objects only the client makes (``client.consumer(...)`` makes a `Consumer`)
is shown without its constructor: its parameters are the client's internals (metadata
cache, connection pool), which a reader cannot and should not pass.

Only objects defined in a module are marked: a class re-exported from a private module
is reached through an alias, whose members griffe recreates without the mark (the
testing harness page uses the name filter instead).
"""

from __future__ import annotations

from typing import Any

import griffe

__all__ = ["ReferenceVisibility"]


# Made by a Client method, never by the user: the reference shows no constructor.
MADE_BY_THE_CLIENT = frozenset(
    {
        "liftbridge_client.groups.Consumer",
        "liftbridge_client.subscription.Subscription",
        "liftbridge_client.activity.ActivityStream",
    }
)


class ReferenceVisibility(griffe.Extension):
    """Marks dunder methods and undocumented dataclass fields as not public, and drops
    the constructor of classes only the client makes."""

    def on_class_members(self, *, cls: griffe.Class, **kwargs: Any) -> None:
        if cls.path in MADE_BY_THE_CLIENT and "__init__" in cls.members:
            del cls.members["__init__"]

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        parent = obj.parent
        if parent is None or not parent.is_class:
            return
        if obj.is_special or (
            obj.is_attribute and "dataclass" in parent.labels and not obj.docstring
        ):
            obj.public = False
