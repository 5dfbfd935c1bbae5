"""The error tree drawn in errors.py's docstring is the real class hierarchy.

The docstring is parsed, so neither can change without the other: every class, its place in
the tree, the builtin exceptions it also is ("also X"), and which classes are "retriable" or
need a "metadata refresh" first (both inherited down the tree).
"""

from __future__ import annotations

import builtins
import re
from dataclasses import dataclass

import grpc
import pytest

from liftbridge_client import errors
from liftbridge_client.errors import LiftbridgeError

# A tree line: "│   " or "    " per level above, then "├── " or "└── ", then the name and a note.
TREE_LINE = re.compile(
    r"^(?P<levels>(?:\u2502   |    )*)(?P<branch>[\u251c\u2514]\u2500\u2500 )?"
    r"(?P<name>[A-Za-z]\w*)(?P<note>.*)$"
)
ALSO = re.compile(r"\balso (?:builtins\.)?(?P<name>[A-Za-z]\w*)")


@dataclass(frozen=True)
class Node:
    name: str
    parent: str | None
    note: str


def parse_tree(doc: str) -> dict[str, Node]:
    lines = doc.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "The tree::") + 1
    while not lines[start].strip():
        start += 1
    indent = len(lines[start]) - len(lines[start].lstrip())
    nodes: dict[str, Node] = {}
    path: list[str] = []  # the names on the way down to the current line
    for line in lines[start:]:
        if not line.strip():
            break
        match = TREE_LINE.match(line[indent:])
        assert match, f"unparsable tree line: {line!r}"
        depth = len(match["levels"]) // 4 + (1 if match["branch"] else 0)
        assert depth <= len(path), f"tree line skips a level: {line!r}"
        del path[depth:]
        name = match["name"]
        assert name not in nodes, f"{name} drawn twice"
        nodes[name] = Node(name, path[-1] if path else None, match["note"].strip())
        path.append(name)
    return nodes


TREE = parse_tree(errors.__doc__ or "")


def error_classes() -> dict[str, type[LiftbridgeError]]:
    return {
        name: obj
        for name, obj in vars(errors).items()
        if isinstance(obj, type)
        and issubclass(obj, LiftbridgeError)
        and obj.__module__ == errors.__name__
    }


CLASSES = error_classes()


def doc_lineage(name: str) -> list[Node]:
    """The node and its documented ancestors, nearest first."""
    lineage = []
    node: Node | None = TREE[name]
    while node is not None:
        lineage.append(node)
        node = TREE[node.parent] if node.parent else None
    return lineage


def test_parser_reads_a_sensible_tree() -> None:
    # Guards the parser itself: a broken regex must not yield an empty, vacuous tree.
    assert len(TREE) >= 40
    assert TREE["LiftbridgeError"].parent is None
    assert TREE["EnvelopeError"].parent == "ProtocolError"
    assert TREE["NotLeaderError"].parent == "FailedPreconditionError"
    assert TREE["UnknownServerError"].parent == "ServerError"
    assert [n.name for n in TREE.values() if n.parent is None] == ["LiftbridgeError"]


def test_documented_classes_are_exactly_the_defined_ones() -> None:
    assert sorted(TREE) == sorted(CLASSES)


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_documented_parent_is_the_real_base(name: str) -> None:
    cls = CLASSES[name]
    bases = [base.__name__ for base in cls.__bases__ if issubclass(base, LiftbridgeError)]
    parent = TREE[name].parent
    assert bases == ([] if parent is None else [parent])
    assert issubclass(cls, LiftbridgeError)


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_documented_children_are_the_real_subclasses(name: str) -> None:
    real = {sub.__name__ for sub in CLASSES[name].__subclasses__() if sub in CLASSES.values()}
    documented = {node.name for node in TREE.values() if node.parent == name}
    assert real == documented


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_documented_builtin_bases_are_the_real_ones(name: str) -> None:
    """ "also X" names every builtin exception a class is besides Exception (and X's own bases)."""
    cls = CLASSES[name]
    also = [
        getattr(builtins, m["name"]) for node in doc_lineage(name) for m in ALSO.finditer(node.note)
    ]
    expected = set(Exception.__mro__).union(*(set(b.__mro__) for b in also))
    real = {c for c in cls.__mro__ if not issubclass(c, LiftbridgeError)}
    assert real == expected


def test_catchable_as_builtins_where_documented() -> None:
    with pytest.raises(ValueError, match="bad"):
        raise errors.InvalidInputError("bad")
    for cls in (
        errors.LiftbridgeTimeoutError,
        errors.AckTimeoutError,
        errors.DeadlineExceededError,
    ):
        with pytest.raises(builtins.TimeoutError):
            raise cls("late")
    assert errors.LiftbridgeTimeoutError is not builtins.TimeoutError
    assert not issubclass(errors.UnavailableError, builtins.TimeoutError)
    assert not issubclass(errors.ProtocolError, ValueError)


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_retriable_and_invalid_metadata_as_documented(name: str) -> None:
    """A note saying "retriable" (or "metadata refresh") holds for the class and its subtree."""
    notes = " ".join(node.note for node in doc_lineage(name))
    cls = CLASSES[name]
    assert cls.retriable is ("retriable" in notes)
    assert cls.invalid_metadata is ("metadata refresh" in notes)
    assert not cls.invalid_metadata or cls.retriable  # a refresh is only worth it to retry
    instance = cls("x") if not issubclass(cls, errors.ServerError) else cls("x", details="")
    assert instance.retriable is cls.retriable


def test_documented_retry_classes() -> None:
    # The flags that retry logic depends on, spelled out once by hand.
    assert errors.NotLeaderError.retriable
    assert errors.NotLeaderError.invalid_metadata
    assert errors.UnavailableError.retriable
    assert not errors.FailedPreconditionError.retriable
    assert not errors.ServerError.retriable
    assert not errors.LiftbridgeError.retriable
    assert not errors.ProtocolError.retriable
    assert not errors.InvalidInputError.retriable


def grpc_code_for(cls: type[errors.ServerError]) -> str:
    """The status code a ServerError subclass stands for, from its name: FooBarError -> FOO_BAR."""
    special = {
        "InternalServerError": "INTERNAL",
        "UnknownServerError": "UNKNOWN",
        "RequestCancelledError": "CANCELLED",
    }
    if cls.__name__ in special:
        return special[cls.__name__]
    if cls.__name__ == "ServerError" or "code_name" not in vars(cls):
        return "UNKNOWN" if cls is errors.ServerError else grpc_code_for(cls.__bases__[0])
    stem = cls.__name__.removesuffix("Error")
    return re.sub(r"(?<!^)(?=[A-Z])", "_", stem).upper()


@pytest.mark.parametrize(
    "name", sorted(n for n, c in CLASSES.items() if issubclass(c, errors.ServerError))
)
def test_server_error_code_names(name: str) -> None:
    cls = CLASSES[name]
    assert issubclass(cls, errors.ServerError)
    assert cls.code_name in grpc.StatusCode.__members__
    assert cls.code_name == grpc_code_for(cls)


def test_not_leader_is_a_failed_precondition() -> None:
    assert errors.NotLeaderError.code_name == "FAILED_PRECONDITION"


def test_server_error_keeps_message_and_details() -> None:
    err = errors.NotFoundError("no such stream", details="stream foo")
    assert str(err) == "no such stream"
    assert err.details == "stream foo"
    assert errors.UnavailableError("down").details == ""


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_control_characters_in_a_message_show_escaped(name: str) -> None:
    # A stream name with a NUL, or a server's text with an escape sequence, must not
    # reach a log or a terminal raw; tab and newline stay as they are.
    cls = CLASSES[name]
    raw = "stream a\x00b: \x1b[31mred\x7f\x85 \u202egnp.exe\u2028and\tso\non"
    shown = str(cls(raw))
    expected = "stream a\\x00b: \\x1b[31mred\\x7f\\x85 \\u202egnp.exe\\u2028and\tso\non"
    assert shown == expected
    assert not any(ch in shown for ch in "\x00\x1b\x7f\x85\u202e\u2028")
    assert str(cls("plain text")) == "plain text"  # the common case untouched
