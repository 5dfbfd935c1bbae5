"""OutageLog: one WARNING per broker outage, and the pace of new streams during one."""

from __future__ import annotations

import logging

import pytest

from liftbridge_client._publish.outages import MIN_RETRY_DELAY, OutageLog
from liftbridge_client.options import RetryPolicy

A, B = "127.0.0.1:1", "127.0.0.1:2"
REFUSED = ConnectionRefusedError("refused")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def make(policy: RetryPolicy | None = None) -> tuple[OutageLog, Clock]:
    clock = Clock()
    return OutageLog(policy or RetryPolicy(initial_backoff=0.1, max_backoff=0.5), clock), clock


def test_unanswered_breaks_in_a_row_back_off_up_to_the_cap() -> None:
    outages, clock = make()
    assert outages.retry_at(A) is None
    assert not outages.down(A)
    waits = []
    for _ in range(5):
        outages.broke(A, REFUSED, 0, answered=False)
        at = outages.retry_at(A)
        assert at is not None
        waits.append(round(at - clock.now, 6))
        clock.now = at  # tried again when due
        assert outages.retry_at(A) is None
    assert waits == [0.1, 0.2, 0.4, 0.5, 0.5]
    assert outages.down(A)
    assert outages.retry_at(B) is None
    assert not outages.down(B)


def test_an_answer_ends_the_outage_and_the_next_break_starts_from_the_beginning() -> None:
    outages, clock = make()
    for _ in range(3):
        outages.broke(A, REFUSED, 0, answered=False)
    outages.answered(A)
    assert not outages.down(A)
    assert outages.retry_at(A) is None
    outages.broke(A, REFUSED, 0, answered=False)
    assert outages.retry_at(A) == pytest.approx(clock.now + 0.1)


def test_a_stream_that_had_answered_may_be_replaced_at_once() -> None:
    outages, _ = make()
    outages.broke(A, REFUSED, 0, answered=False)
    outages.broke(A, REFUSED, 3, answered=True)  # a working stream broke: try again now
    assert outages.down(A)  # still an outage (metadata is refreshed before the next try)
    assert outages.retry_at(A) is None
    outages.broke(A, REFUSED, 0, answered=False)
    assert outages.retry_at(A) is not None


def test_a_policy_without_backoff_still_never_retries_in_a_busy_loop() -> None:
    outages, clock = make(RetryPolicy(initial_backoff=0.0, max_backoff=0.0))
    outages.broke(A, REFUSED, 0, answered=False)
    assert outages.retry_at(A) == pytest.approx(clock.now + MIN_RETRY_DELAY)


def test_without_a_clock_nothing_is_paced() -> None:
    outages = OutageLog()
    outages.broke(A, REFUSED, 0, answered=False)
    assert outages.down(A)
    assert outages.retry_at(A) is None


def test_one_warning_per_outage_and_one_info_when_it_ends(
    caplog: pytest.LogCaptureFixture,
) -> None:
    outages, _ = make()
    with caplog.at_level(logging.DEBUG, logger="liftbridge_client"):
        outages.broke(A, REFUSED, 2, answered=True)
        outages.broke(A, REFUSED, 0, answered=False)
        outages.broke(A, REFUSED, 0, answered=False)
        outages.answered(A)
        outages.answered(A)  # no outage: nothing to say
    levels = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert levels == [
        ("WARNING", f"PublishAsync stream to {A} broke (refused); 2 pending publishes failed"),
        ("DEBUG", f"PublishAsync stream to {A} broke again (refused)"),
        ("DEBUG", f"PublishAsync stream to {A} broke again (refused)"),
        ("INFO", f"PublishAsync to {A} works again (3 broken streams meanwhile)"),
    ]
