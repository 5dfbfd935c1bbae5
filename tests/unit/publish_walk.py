"""The walk of one publish through the package's files (issue 32's measure of the house).

`walk` drives one `Client` publish on the publisher fakes (publish_fakes.py) with a
profile hook on, from the call until the publish first waits (for its ack: its bytes are
then in the NATS connection's outgoing buffer, or written to the h2 call), and records
each step between two of the package's files:

- *down*: a call into a file of a lower layer (or a file beside the caller's, in the
  same layer);
- *climb*: a call into a file of a higher layer: code below calling back up;
- *return*: back to the calling file.

Layers are README's (`test_layout.LAYERS`); inside ``_publish``, `test_layout.PUBLISH_ORDER`
ranks the modules top down. Calls within one file are counted as *stays*. Frames outside
the package (the standard library, generated code) are looked through.

Shared by test_publish_walk.py and ``python -m bench.walk``.
"""

from __future__ import annotations

import asyncio
import dis
import sys
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType, MappingProxyType
from typing import Any

import pytest
from publish_fakes import BufferedNats, Rig, make_rig
from test_layout import LEVEL, PKG, PUBLISH_ORDER, ROOT

from liftbridge_client import Client
from liftbridge_client.models import AckPolicy
from liftbridge_client.options import StreamTransport, Transport

_YIELD = dis.opmap["YIELD_VALUE"]
_ROOT = str(ROOT) + "/"


def module_of(filename: str) -> str | None:
    """The package module a code object's file is, e.g. ``_publish.publisher``; None
    outside the package."""
    if not filename.startswith(_ROOT):
        return None
    parts = list(Path(filename[len(_ROOT) :]).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def rank(module: str, order: Sequence[str] = PUBLISH_ORDER) -> tuple[int, int]:
    """Where ``module`` sits, bottom up: its room's layer, then its place in ``order``."""
    room = module.split(".", maxsplit=1)[0]
    level = LEVEL[room]
    if room != "_publish" or module == "_publish":
        return level, len(order)
    name = module.split(".")[1]
    if name not in order:
        raise LookupError(f"{PKG}.{module} has no place in the _publish order {order}")
    return level, len(order) - 1 - order.index(name)


@dataclass
class Step:
    kind: str  # "down", "climb", "return", "stay"
    source: str  # module the step leaves
    target: str  # module it enters
    function: str  # the function called, or returned from


@dataclass
class Walk:
    steps: list[Step] = field(default_factory=list)
    files: list[str] = field(default_factory=list)  # in the order first entered
    suspended_in: str = ""  # the function whose await ended the walk
    coro: Coroutine[Any, Any, Any] | None = None  # the call, suspended there

    def count(self, kind: str) -> int:
        return sum(1 for s in self.steps if s.kind == kind)

    @property
    def climbs(self) -> list[Step]:
        return [s for s in self.steps if s.kind == "climb"]

    def summary(self) -> str:
        return (
            f"{len(self.files)} files, {self.count('down')} down, "
            f"{self.count('stay')} stays, {self.count('return')} returns, "
            f"{self.count('climb')} climbs"
        )

    def render(self) -> str:
        """One line per step between files (stays left out), indented by call depth."""
        lines, depth = [], 0
        for s in self.steps:
            if s.kind == "stay":
                continue
            if s.kind == "return":
                depth = max(depth - 1, 0)
                lines.append(f"{'  ' * depth}<- {s.target} (from {s.source}.{s.function})")
            else:
                arrow = "^^" if s.kind == "climb" else "->"
                lines.append(f"{'  ' * depth}{arrow} {s.target}.{s.function}")
                depth += 1
        return "\n".join(lines)


def classify(source: str, target: str, order: Sequence[str] = PUBLISH_ORDER) -> str:
    """A call from module ``source`` into module ``target``: stay, down or climb."""
    if source == target:
        return "stay"
    return "climb" if rank(target, order) > rank(source, order) else "down"


def _package_caller(frame: FrameType | None) -> str | None:
    while frame is not None:
        module = module_of(frame.f_code.co_filename)
        if module is not None:
            return module
        frame = frame.f_back
    return None


def trace(start: Callable[[], Coroutine[Any, Any, Any]], order: Sequence[str]) -> Walk:
    """Run ``start()``'s coroutine up to its first suspension, recording the walk.

    Returns the walk and leaves the coroutine suspended; the caller finishes it.
    """
    walk = Walk()
    done = False

    def profile(frame: FrameType, event: str, arg: object) -> None:
        nonlocal done
        if done or event not in ("call", "return"):
            return
        module = module_of(frame.f_code.co_filename)
        if module is None:
            return
        if event == "return" and frame.f_code.co_code[frame.f_lasti] == _YIELD:
            # A coroutine waits: the publish is on its way. The walk ends here.
            done = True
            walk.suspended_in = f"{module}.{frame.f_code.co_qualname}"
            return
        other = _package_caller(frame.f_back)
        if other is None:
            if event == "call":
                walk.files.append(module)
            return
        name = frame.f_code.co_qualname
        if event == "call":
            if module not in walk.files:
                walk.files.append(module)
            walk.steps.append(Step(classify(other, module, order), other, module, name))
        elif module != other:
            walk.steps.append(Step("return", module, other, name))

    coro = start()
    sys.setprofile(profile)
    try:
        coro.send(None)
    finally:
        sys.setprofile(None)
    walk.coro = coro
    return walk


# Publishes with a key, by the path they take.
WALKS: dict[str, dict[str, Any]] = {
    # The general path for an option the one-step path does not take (a correlation id).
    "general": {
        "key": b"customer-7",
        "headers": {"h": b"1"},
        "ack_policy": AckPolicy.ALL,
        "correlation_id": "walk-1",
    },
    # The general path after the one-step path looked and refused: headers it leaves to
    # the general path's checks (not a plain dict).
    "general, refused": {
        "key": b"customer-7",
        "headers": MappingProxyType({"h": b"1"}),
        "ack_policy": AckPolicy.ALL,
    },
    # The one-step path: a key and nothing it does not take.
    "one-step": {"key": b"customer-7"},
}


async def _rig(transport: Transport) -> Rig:
    if transport is Transport.NATS:
        return await make_rig(buffered_nats=True, transport=transport)
    return await make_rig(
        transport=transport, stream_transport=StreamTransport.H2, auto_ack=True, ack_wait=5.0
    )


async def _settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def walk(
    transport: Transport, options: dict[str, Any], order: Sequence[str] = PUBLISH_ORDER
) -> Walk:
    """The walk of ``Client.publish("s", b"v", **options)`` over ``transport`` (h2 for gRPC)
    on the fakes, after one publish with the same key found the way (NATS learned the
    subject, the leader's stream is open)."""
    rig = await _rig(transport)
    client = Client(["127.0.0.1:1"])
    client._publisher = rig.publisher
    try:
        first = rig.publisher.publish_nowait(
            "s", b"warm", key=options.get("key"), transport=transport
        )
        await _settle()
        if transport is Transport.NATS:
            rig.ack(first.correlation_id, 0)
        await asyncio.wait_for(first, 5)
        await _settle()
        nc = rig.nc
        buffered = len(nc._pending) if isinstance(nc, BufferedNats) else 0
        result = trace(lambda: client.publish("s", b"v", transport=transport, **options), order)
        coro = result.coro
        assert coro is not None
        [pending] = rig.publisher._correlator.pending()
        if transport is Transport.NATS:
            assert isinstance(nc, BufferedNats)
            assert len(nc._pending) == buffered + 1, "not in NATS's buffer within the call"
            rig.ack(pending.correlation_id, 1)
        else:
            assert pending.owner is not None, "not handed to a PublishAsync stream in the call"
        await asyncio.wait_for(asyncio.shield(pending), 5)
        with pytest.raises(StopIteration) as stop:
            coro.send(None)  # the publish returns its ack
        assert stop.value.value is not None
        assert stop.value.value.correlation_id == pending.correlation_id
        return result
    finally:
        client._publisher = None
        await rig.close()
