"""The package's import graph: imports point down the layers README.md draws, never in a cycle.

Every internal import counts, wherever it is (module level, inside a function, under
``if TYPE_CHECKING:``): a cycle through type-only imports is still two modules that cannot
be read apart.
"""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

import liftbridge_client
import liftbridge_client._publish

PKG = "liftbridge_client"
ROOT = Path(liftbridge_client.__file__).parent

# Layers, bottom up (README.md, "Where the code is"). A module may import its own layer
# (acyclically) and any layer below.
LAYERS: tuple[tuple[str, ...], ...] = (
    (
        "_proto",
        "_version",
        "_validate",
        "_publish_args",
        "_tasks",
        "errors",
        "models",
        "options",
        "envelope",
        "packing",
        "partitioning",
        "features",
        "_speedups",  # compiled (_speedups.c); its stub _speedups.pyi stands in for it here
        "_native",
    ),
    ("_transport",),
    ("_cluster",),
    ("_publish", "_subscribe"),
    ("", "client", "subscription", "groups", "activity", "tracing"),
    ("exactly_once", "spark", "cli", "testing"),
)
LEVEL = {room: n for n, rooms in enumerate(LAYERS) for room in rooms}
# The modules of _publish, top down: each imports only modules after it.
PUBLISH_ORDER = (
    "publisher",
    "timeouts",
    "strand",
    "nats",
    "leaders",
    "h2",
    "grpc",
    "outages",
    "route",
    "acks",
    "wire",
)


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    # A stub without a .py beside it is a compiled module's: its imports count as well.
    paths = [
        p for p in ROOT.rglob("*.py*") if p.suffix == ".py" or not p.with_suffix(".py").exists()
    ]
    paths = sorted(p for p in paths if p.suffix in (".py", ".pyi"))
    return {_module(p): p for p in paths if "_proto" not in p.relative_to(ROOT).parts}


def _resolve(name: str, known: set[str]) -> str | None:
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in known or candidate.startswith(f"{PKG}._proto"):
            return candidate
        parts.pop()
    return None


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*up, *([base] if base else [])])
            targets = [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        for target in targets:
            resolved = _resolve(target, known)
            if resolved is not None and resolved != name:
                found.add(resolved)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {name: _imports(name, path, known) for name, path in modules.items()}


def _room(module: str) -> str:
    rest = module[len(PKG) + 1 :] if module != PKG else ""
    return rest.split(".")[0]


def test_every_room_has_a_layer() -> None:
    rooms = {_room(m) for m in _graph()}
    assert rooms - set(LEVEL) == set(), "a new top-level module or package: give it a layer"


def test_imports_point_down_or_across_never_up() -> None:
    upward = [
        f"{a} -> {b}"
        for a, targets in _graph().items()
        for b in targets
        if LEVEL[_room(b)] > LEVEL[_room(a)]
    ]
    assert upward == []


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_no_import_cycles_even_through_type_only_imports() -> None:
    assert _cycle(_graph()) is None


def test_the_cycle_check_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycle(graph) == ["a", "b", "c", "a"]


def test_the_publish_modules_import_down_their_order() -> None:
    """Inside ``_publish`` too imports point down: the publisher over the routes, the
    routes over the streams they use, and everything over the route types and acks."""
    modules = {f"{PKG}._publish.{name}": n for n, name in enumerate(PUBLISH_ORDER)}
    found = {m.rpartition(".")[2] for m in _graph() if m.startswith(f"{PKG}._publish.")}
    assert found == set(PUBLISH_ORDER), "a new _publish module: give it a place in the order"
    upward = [
        f"{a} -> {b}"
        for a, targets in _graph().items()
        if a in modules
        for b in targets
        if b in modules and modules[b] < modules[a]
    ]
    assert upward == []


# Where each part of a publish lives (README.md, "Where the code is").
PUBLISH_PARTS = [
    ("_publish_args.py", "def stream_publish("),  # its arguments checked, once
    ("_publish/publisher.py", "class Publisher"),  # the queue and its sender
    ("_publish/timeouts.py", "class TimeoutCheck"),  # why no ack came
    ("_publish/route.py", "class Route(Protocol)"),  # the ways out, one interface
    ("_publish/nats.py", "class NatsRoute"),  # one module per transport
    ("_publish/leaders.py", "class LeaderRoute"),
    ("_publish/grpc.py", "class PublishStream"),
    ("_publish/h2.py", "class H2PublishStream(PublishStream)"),
    ("_publish/acks.py", "class Correlator"),  # where it is acked
]


@pytest.mark.parametrize(("where", "what"), PUBLISH_PARTS)
def test_a_publish_is_checked_queued_routed_and_acked_where_readme_says(
    where: str, what: str
) -> None:
    assert what in (ROOT / where).read_text()
    folder, _, name = where.rpartition("/")
    assert name in _readme_entry(folder), f"README's map does not name {where}"


def _readme_entry(folder: str) -> str:
    """What README's map ("Where the code is") says of ``folder`` ('': all of it)."""
    # The checkout's README (beside tests/): the package may be installed elsewhere (the
    # release check runs these tests against the installed sdist).
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    tree = readme.split("## Where the code is", 1)[1].split("\n## ", 1)[0]
    if not folder:
        return tree
    lines = tree.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"  {folder}/ "))
    entry = [lines[start]]
    for line in lines[start + 1 :]:
        if not line.startswith(" " * 20):  # the next entry
            break
        entry.append(line)
    return "\n".join(entry)


def test_the_publish_package_docstring_names_each_of_its_modules() -> None:
    doc = liftbridge_client._publish.__doc__ or ""
    names = sorted(p.stem for p in (ROOT / "_publish").glob("*.py") if p.stem != "__init__")
    assert [n for n in names if f"`{n}`" not in doc] == []
    assert f"{len(names)} modules" in doc.replace("\n", " ")


# The Client facade composes everything below it; every other hand-written module
# stays readable in one sitting.
MAX_LINES = 900


def test_no_hand_written_module_is_over_the_limit_but_the_facade() -> None:
    long = {
        name: n
        for name, path in _modules().items()
        if name != f"{PKG}.client" and (n := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}


def test_nats_py_and_crc32c_are_imported_only_when_used() -> None:
    """nats-py costs about a tenth of a second to import (a third of this package's
    import), in every CLI call and every Spark Python process: the modules over it load
    when a client connects to NATS. crc32c (with importlib.metadata and argparse) loads at
    the first envelope CRC. A fresh interpreter imports the package, its CLI and its
    exactly-once layer (and its Spark data source where pyspark is installed)."""
    modules = ["liftbridge_client", "liftbridge_client.cli", "liftbridge_client.exactly_once"]
    if importlib.util.find_spec("pyspark") is not None:
        modules.append("liftbridge_client.spark")
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}: importlib.import_module(name)\n"
        "print(sorted(m for m in sys.modules if m in ('nats', 'crc32c') or m.startswith(("
        "'nats.', 'liftbridge_client._transport.nats', 'liftbridge_client._publish.nats'))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout.strip() == "[]"
