"""Differential tests: liftbridge_client.exactly_once against Gazette's message package.

The Go program in gazette/ (its own module, requiring go.gazette.dev/core v0.100.0 from the
Go module proxy) answers JSON requests one line at a time; these tests send the same inputs
to it and to the Python code and require identical bytes, choices and committed sequences:
UUID layout (BuildUUID, GetClock, GetFlags, GetProducerID), Clock.Tick/Update, fixed-frame,
JSON-lines and CSV framing bytes, fixed-frame desync detection, ModuloMapping and
RendezvousMapping choices, and the Sequencer over generated interleavings of several
producers (duplicates, rollbacks, replays from a small ring, restarts from checkpoints).

The program is built once per session (about 2-3 minutes cold; the binary is cached beside
its sources, git-ignored, and rebuilt when a source is newer). A missing Go toolchain or a
failed build fails these tests.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from liftbridge_client import errors
from liftbridge_client.exactly_once import framing, mapping, uuids

HERE = Path(__file__).resolve().parent / "gazette"
BINARY = HERE / "gazette-interop-bin"
SOURCES = ("main.go", "go.mod", "go.sum")
BUILD_TIMEOUT = 900.0

# The first test builds the program (the session fixture): from empty Go caches on a
# loaded machine that took longer than the suite's 120 s test timeout, and every test of
# the module errored (a fresh clone with empty GOMODCACHE and GOCACHE, load 11-13).
pytestmark = [pytest.mark.interop, pytest.mark.timeout(BUILD_TIMEOUT + 60)]

# The generated logs and the Python driver are shared with tests/unit/test_eo_sequencer.py.
_spec = importlib.util.spec_from_file_location(
    "eo_logs", Path(__file__).resolve().parents[1] / "unit" / "eo_logs.py"
)
assert _spec is not None
assert _spec.loader is not None
eo_logs = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("eo_logs", eo_logs)
_spec.loader.exec_module(eo_logs)


def _stale(binary: Path) -> bool:
    if not binary.exists():
        return True
    built = binary.stat().st_mtime
    return any((HERE / name).stat().st_mtime > built for name in SOURCES)


def _build() -> Path:
    if not _stale(BINARY):
        return BINARY
    go = shutil.which("go")
    if go is None:
        pytest.fail("the Go toolchain is not on PATH: the Gazette interop tests need it")
    env = dict(os.environ)
    env["GOFLAGS"] = (env.get("GOFLAGS", "") + " -mod=readonly").strip()
    started = time.monotonic()
    try:
        proc = subprocess.run(
            [go, "build", "-o", str(BINARY), "."],
            cwd=HERE,
            env=env,
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"`go build` in {HERE} took longer than {BUILD_TIMEOUT:.0f} s")
    if proc.returncode != 0:
        pytest.fail(f"`go build` in {HERE} failed:\n{proc.stderr}{proc.stdout}")
    print(f"built {BINARY.name} in {time.monotonic() - started:.1f} s")
    return BINARY


class Gazette:
    """One running Go program: a request line in, an answer line out."""

    def __init__(self, binary: Path) -> None:
        # stderr goes to a file: an unread pipe would fill up and block the program.
        self._stderr = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - closed in close()
        self._proc = subprocess.Popen(
            [str(binary)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
        )

    def ask(self, **request: Any) -> Any:
        assert self._proc.stdin is not None
        assert self._proc.stdout is not None
        self._proc.stdin.write(json.dumps(request) + "\n")
        self._proc.stdin.flush()
        line = self._proc.stdout.readline()
        if not line:
            self._stderr.seek(0)
            pytest.fail(f"the Gazette program died on {request['op']}:\n{self._stderr.read()}")
        return json.loads(line)

    def close(self) -> None:
        assert self._proc.stdin is not None
        self._proc.stdin.close()
        self._proc.wait(timeout=10)
        if self._proc.stdout is not None:
            self._proc.stdout.close()
        self._stderr.close()


@pytest.fixture(scope="session")
def gazette() -> Iterator[Gazette]:
    program = Gazette(_build())
    yield program
    program.close()


# Hypothesis reuses the session fixture across examples on purpose: one Go process.
SETTINGS = settings(
    deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=150
)
U64 = st.integers(0, 2**64 - 1)


# ---------------------------------------------------------------- UUIDs and clocks


@SETTINGS
@given(producer=st.binary(min_size=6, max_size=6), clock=U64, flags=st.integers(0, 0x3FF))
def test_uuid_layout_matches(gazette: Gazette, producer: bytes, clock: int, flags: int) -> None:
    ours = uuids.build_uuid(producer, clock, flags)
    theirs = gazette.ask(op="uuid", producer=producer.hex(), clock=clock, flags=flags)
    assert theirs["uuid"] == ours.bytes.hex()
    assert theirs["clock"] == uuids.clock_of(ours)
    assert theirs["flags"] == uuids.flags_of(ours)
    assert theirs["producer"] == uuids.producer_of(ours).hex()


@SETTINGS
@given(raw=st.binary(min_size=16, max_size=16))
def test_parsing_any_16_bytes_matches(gazette: Gazette, raw: bytes) -> None:
    theirs = gazette.ask(op="parse", uuid=raw.hex())
    assert (theirs["clock"], theirs["flags"], theirs["producer"]) == (
        uuids.clock_of(raw),
        uuids.flags_of(raw),
        uuids.producer_of(raw).hex(),
    )


CLOCK_STEPS = st.lists(
    st.one_of(
        st.just({"tick": True}),
        st.builds(lambda ns: {"update": ns}, st.integers(-(2**63), 2**63 - 1)),
        st.builds(
            lambda ns: {"update": ns}, st.integers(1_600_000_000 * 10**9, 1_800_000_000 * 10**9)
        ),
    ),
    max_size=30,
)


@SETTINGS
@given(start=st.one_of(U64, st.integers(0, 2**62)), steps=CLOCK_STEPS)
def test_clock_tick_and_update_match(
    gazette: Gazette, start: int, steps: list[dict[str, Any]]
) -> None:
    clock = uuids.Clock(start)
    ours = []
    for step in steps:
        if "update" in step:
            clock.update(step["update"])
            ours.append(clock.value)
        else:
            ours.append(clock.tick())
    assert gazette.ask(op="clock", clock=start, steps=steps) == (ours or None)


# ---------------------------------------------------------------- framings


@SETTINGS
@given(payload=st.binary(max_size=300))
def test_fixed_frame_bytes_match(gazette: Gazette, payload: bytes) -> None:
    assert (
        gazette.ask(op="fixed", payload=payload.hex()) == framing.encode_fixed_frame(payload).hex()
    )


FRAMES = st.lists(
    st.one_of(
        st.binary(max_size=40).map(framing.encode_fixed_frame),
        st.binary(max_size=12),  # garbage: desync
        st.just(framing.FIXED_FRAME_WORD),
        st.just(b"\n"),
    ),
    max_size=12,
).map(b"".join)


def _python_unpack(data: bytes) -> list[dict[str, str]]:
    reader = framing.FixedFrameReader(data)
    out: list[dict[str, str]] = []
    while True:
        try:
            frame = reader.next_frame()
        except errors.FrameDesyncError as exc:
            out.append({"kind": "desync", "bytes": exc.skipped.hex()})
            continue
        except errors.TruncatedFrameError:
            return [*out, {"kind": "truncated"}]
        if frame is None:
            return [*out, {"kind": "eof"}]
        out.append({"kind": "frame", "bytes": frame.hex()})


@settings(SETTINGS, max_examples=60)  # generating these is the slow part
@given(data=FRAMES)
def test_fixed_frame_desync_detection_matches(gazette: Gazette, data: bytes) -> None:
    assert gazette.ask(op="unpack_fixed", data=data.hex()) == _python_unpack(data)


JSON_TEXT = st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=12)
JSON_DOCS = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**53), 2**53), JSON_TEXT),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(JSON_TEXT, inner, max_size=4)
    ),
    max_leaves=12,
)


@SETTINGS
@given(doc=st.dictionaries(JSON_TEXT, JSON_DOCS, max_size=5))
def test_json_line_bytes_match(gazette: Gazette, doc: dict[str, Any]) -> None:
    ours = framing.encode_json_line(doc)
    assert gazette.ask(op="json", doc=doc) == ours.hex()


CSV_TEXT = st.text(alphabet=st.sampled_from(list('ab ,"\r\n\t\\.é\u00a0\u2003x')), max_size=8)


@SETTINGS
@given(fields=st.lists(CSV_TEXT, min_size=2, max_size=5))
def test_csv_record_bytes_match(gazette: Gazette, fields: list[str]) -> None:
    assert gazette.ask(op="csv", fields=fields) == framing.encode_csv_record(fields).hex()


# ---------------------------------------------------------------- mappings


@SETTINGS
@given(
    names=st.lists(st.text(min_size=1, max_size=10), min_size=1, max_size=8, unique=True),
    keys=st.lists(st.binary(max_size=16), min_size=1, max_size=40),
)
def test_modulo_and_rendezvous_choices_match(
    gazette: Gazette, names: list[str], keys: list[bytes]
) -> None:
    theirs = gazette.ask(op="map", names=names, keys=[k.hex() for k in keys])
    hashes = [mapping.fnv1a_32(n.encode()) for n in names]
    assert theirs["modulo"] == [mapping.modulo_index(k, len(names)) for k in keys]
    assert theirs["rendezvous"] == [mapping.rendezvous_index(k, hashes) for k in keys]


def test_rendezvous_mapping_of_stream_partitions_matches(gazette: Gazette) -> None:
    rendezvous = mapping.RendezvousMapping()
    keys = [b"key-%d" % i for i in range(500)]
    for count in (1, 2, 3, 7, 16):
        names = [mapping.partition_name("orders", p) for p in range(count)]
        theirs = gazette.ask(op="map", names=names, keys=[k.hex() for k in keys])
        ours = [rendezvous.choose("orders", k, range(count)) for k in keys]
        assert theirs["rendezvous"] == ours
        assert len(set(ours)) == count or count > len(keys)


# ---------------------------------------------------------------- the Sequencer


CLOCK_BASE = 1 << 40


def _normalise(events: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    events = events or []  # Go encodes an empty slice as null
    for event in events:
        event.setdefault("replay", None)
        if event.get("checkpoint"):
            event["checkpoint"]["states"].sort()
        event.pop("error", None)
    return events


@settings(
    deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=1000
)
@given(
    log=eo_logs.logs(max_size=40, clock_base=CLOCK_BASE),
    buffer=st.integers(1, 8),
    data=st.data(),
)
def test_sequencer_commits_the_same_sequences(
    gazette: Gazette, log: list[dict[str, Any]], buffer: int, data: st.DataObject
) -> None:
    """Clocks start at CLOCK_BASE, as real ones are far above any horizon: Gazette's
    newest-minus-horizon is a uint64 difference that wraps (and prunes every producer) when
    a clock is younger than the horizon, where this project's is clamped at 0 (prunes
    nothing; tests/unit/test_eo_sequencer.py pins that case). Horizons of 100-300 ns (16-48
    clock counts) prune within the drawn clocks."""
    restart_at = data.draw(st.integers(-1, len(log)), label="restart_at")
    horizon_ns = data.draw(
        st.sampled_from([0, 0, 100, 200, 300, 1_000_000_000]), label="horizon_ns"
    )
    theirs = gazette.ask(
        op="sequence", log=log, buffer=buffer, restart_at=restart_at, horizon_ns=horizon_ns
    )
    ours = eo_logs.run(log, buffer, restart_at, horizon_ns)
    assert _normalise(theirs) == _normalise(json.loads(json.dumps(ours)))
