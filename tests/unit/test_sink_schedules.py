"""The exactly-once Spark sink against generated failure schedules (the fast profile).

Hypothesis draws schedules (`sink_model.Schedule`: data, sink options, where each attempt
fails and how, transient publish faults, the driver's fate) and shrinks a failing one; the
sink's real writer and committer run each one against the in-memory cluster and the oracle
reads the result as a read_committed reader would. A failure prints the schedule as JSON:
``SINK_SCHEDULE='<json>' pytest tests/unit/test_sink_schedules.py -k replay`` runs it
again (the interleaving is part of it). ``SINK_SCHEDULES=N`` sets how many are drawn
(default 300; the long profile by hand: 5000). The real profile, on Spark against a real
node, is tests/integration/test_spark_schedules.py.
"""

from __future__ import annotations

import os

import pytest
from budget import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sink_model import FATAL, TRANSIENT, Attempt, Batch, Fault, Run, Schedule, check, execute

from liftbridge_client.options import RetryPolicy
from liftbridge_client.spark import _transactional

EXAMPLES = int(os.environ.get("SINK_SCHEDULES", "300"))


@pytest.fixture(autouse=True)
def no_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    # The writer retries a lost publish after a backoff: none here, hundreds of schedules.
    monkeypatch.setattr(RetryPolicy, "backoff", lambda self, attempt: 0.0)


def _faults(
    draw: st.DrawFn, publishes: int, kinds: tuple[str, ...], most: int
) -> tuple[Fault, ...]:
    found = {}
    for _ in range(draw(st.integers(0, most))):
        at = draw(st.integers(0, publishes))
        found[at] = Fault(at, draw(st.sampled_from(kinds)), draw(st.booleans()))
    return tuple(found[at] for at in sorted(found))


@st.composite
def _attempts(draw: st.DrawFn, rows: int, publishes: int) -> tuple[Attempt, ...]:
    out = []
    for _ in range(draw(st.integers(0, 2))):  # failing attempts before the one that succeeds
        transient = _faults(draw, publishes, TRANSIENT, 1)
        if draw(st.booleans()):
            # Input cut at any row: 0 (nothing written), mid-pack, or every row (the task
            # failed after its writer had seen all its input).
            out.append(Attempt(cut=draw(st.integers(0, rows)), faults=transient))
        else:
            fatal = Fault(
                draw(st.integers(0, publishes)), draw(st.sampled_from(FATAL)), draw(st.booleans())
            )
            others = tuple(f for f in transient if f.at != fatal.at)
            out.append(Attempt(faults=tuple(sorted((*others, fatal), key=lambda f: f.at))))
    out.append(Attempt(faults=_faults(draw, publishes, TRANSIENT, 2)))
    return tuple(out)


@st.composite
def schedules(draw: st.DrawFn, max_rows: int = 60) -> Schedule:
    pack_rows = draw(st.sampled_from([1, 2, 3, 5, 8, 16]))
    lanes = draw(st.sampled_from([1, 1, 2, 3]))
    batches = []
    for _ in range(draw(st.integers(1, 2))):  # micro-batches (or one batch write)
        tasks = draw(st.integers(1, 3))
        rows = tuple(draw(st.integers(0, max_rows)) for _ in range(tasks))
        runs = []
        failed_runs = draw(st.integers(0, 1))
        for r in range(failed_runs + 1):
            attempts = tuple(
                draw(_attempts(rows[t], rows[t] // pack_rows + 2 * lanes + 2)) for t in range(tasks)
            )
            driver = (
                "commit"
                if r == failed_runs
                else draw(st.sampled_from(["before", "journaled", "mid", "after"]))
            )
            runs.append(
                Run(
                    attempts,
                    driver,
                    mid=draw(st.integers(0, 4)),
                    driver_faults=_faults(draw, 6, TRANSIENT, 1),
                )
            )
        batches.append(Batch(rows, tuple(runs)))
    return Schedule(
        seed=draw(st.integers(0, 2**32 - 1)),
        partitions=draw(st.integers(1, 3)),
        pack_rows=pack_rows,
        lanes=lanes,
        keys=draw(st.sampled_from(["none", "all", "mixed"])),
        key_space=draw(st.integers(1, 5)),
        chunk_rows=draw(st.sampled_from([3, 16, 1000])),
        ring=draw(st.sampled_from([2, 8, 4096])),
        batches=tuple(batches),
    )


def run_and_check(schedule: Schedule, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_transactional, "CHUNK_ROWS", schedule.chunk_rows)
    try:
        check(schedule, execute(schedule))
    except AssertionError as exc:
        raise AssertionError(
            f"{exc}\nreplay: SINK_SCHEDULE='{schedule.to_json()}' "
            "pytest tests/unit/test_sink_schedules.py -k replay"
        ) from None


@pytest.mark.timeout(60 + EXAMPLES // 10)  # 20-40 ms a schedule; the long profile runs longer
@settings(
    max_examples=examples(EXAMPLES),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(schedule=schedules())
def test_every_row_is_committed_once_whatever_fails(
    schedule: Schedule, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_and_check(schedule, monkeypatch)


def _one_task(rows: int, attempts: tuple[Attempt, ...], pack_rows: int, lanes: int = 1) -> Schedule:
    return Schedule(
        seed=7,
        partitions=1,
        pack_rows=pack_rows,
        lanes=lanes,
        keys="none",
        key_space=1,
        chunk_rows=1000,
        ring=4096,
        batches=(Batch((rows,), (Run((attempts,)),)),),
    )


# Found before: the case (a cut inside a pack), scaled down, and the schedules the
# generator found; SINK_SCHEDULE adds one to replay.
REGRESSIONS = [
    _one_task(200, (Attempt(cut=100), Attempt()), pack_rows=64),
    _one_task(200, (Attempt(cut=101), Attempt()), pack_rows=16, lanes=3),
    _one_task(50, (Attempt(cut=0), Attempt(cut=50), Attempt()), pack_rows=7),
]
# A message acked but stored after its successor, whose ack was lost: the lane's prefix
# must end before the first (pipelined: the successor was sent before its ack came).
REGRESSIONS.append(
    Schedule.from_json(
        '{"seed":0,"partitions":1,"pack_rows":1,"lanes":1,"keys":"none","key_space":1,'
        '"chunk_rows":3,"ring":2,"batches":[{"rows":[0],"runs":[{"attempts":[[{"cut":null,'
        '"faults":[]}]],"driver":"commit","mid":0,"driver_faults":[]}]},{"rows":[0,2],'
        '"runs":[{"attempts":[[{"cut":null,"faults":[]}],[{"cut":null,"faults":[{"at":0,'
        '"kind":"error","stored":false}]},{"cut":null,"faults":[{"at":0,"kind":"swapped",'
        '"stored":false},{"at":1,"kind":"acklost","stored":false}]}]],"driver":"commit",'
        '"mid":0,"driver_faults":[]}]}]}'
    )
)
if os.environ.get("SINK_SCHEDULE"):
    REGRESSIONS.append(Schedule.from_json(os.environ["SINK_SCHEDULE"]))


@pytest.mark.parametrize("schedule", REGRESSIONS, ids=lambda s: f"seed{s.seed}")
def test_replay_pinned_schedules(schedule: Schedule, monkeypatch: pytest.MonkeyPatch) -> None:
    run_and_check(schedule, monkeypatch)


def test_a_schedule_round_trips_through_json() -> None:
    schedule = REGRESSIONS[0]
    assert Schedule.from_json(schedule.to_json()) == schedule
