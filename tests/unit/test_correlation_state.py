"""A hypothesis state machine for the correlation registry and its in-flight window.

Whatever order acks, errors, timeouts, cancellations, connection losses and close come in,
every future leaves the registry exactly once, is settled exactly once (never left
pending once it left), and the window's held slots always equal the registered entries
plus the slots acquired and not registered yet.
"""

from __future__ import annotations

import asyncio

import hypothesis.strategies as st
from budget import examples
from hypothesis import settings
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    invariant,
    precondition,
    rule,
)

from liftbridge_client import errors
from liftbridge_client._publish.acks import AckFuture, Correlator

CAPACITY = 4
_TICK = 0.002  # timeouts are multiples of this; the loop is run this long to expire them


class CorrelatorMachine(RuleBasedStateMachine):
    ids = Bundle("ids")

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.correlator = Correlator(CAPACITY, loop=self.loop)
        self.acquired = 0  # slots taken and not registered yet
        self.pending: dict[str, AckFuture] = {}  # the model of the registry
        self.left: dict[str, AckFuture] = {}  # every future that left, by id
        self.settled_once: dict[str, int] = {}
        self.owners = [object(), object()]
        self.counter = 0
        self.unknown = 0
        self.closed = False

    def teardown(self) -> None:
        if not self.closed:
            self.correlator.close(errors.ConnectionClosedError("teardown"))
        self.loop.run_until_complete(asyncio.sleep(0))
        self.loop.close()

    def _spin(self, seconds: float = 0.0) -> None:
        self.loop.run_until_complete(asyncio.sleep(seconds))

    def _sync_model(self) -> None:
        """Move futures the registry let go (by timeout or close) to ``left``."""
        for cid, fut in list(self.pending.items()):
            if cid not in self.correlator:
                assert fut.done(), cid
                self.left[cid] = self.pending.pop(cid)

    # ------------------------------------------------------------ rules

    @precondition(lambda self: not self.closed)
    @rule()
    def acquire(self) -> None:
        before = self.correlator.held
        try:
            self.correlator.try_acquire()
        except errors.InflightLimitError:
            assert before >= CAPACITY
            return
        self.acquired += 1

    @precondition(lambda self: not self.closed and self.acquired > 0)
    @rule(target=ids, ticks=st.integers(min_value=1, max_value=5), owned=st.integers(0, 2))
    def register(self, ticks: int, owned: int) -> str:
        self.counter += 1
        cid = f"c{self.counter}"
        fut = self.correlator.register(cid, ticks * _TICK)
        fut.owner = self.owners[owned] if owned < 2 else None
        self.acquired -= 1
        self.pending[cid] = fut
        return cid

    @precondition(lambda self: not self.closed and self.acquired > 0)
    @rule()
    def release_unregistered(self) -> None:
        self.correlator.release()
        self.acquired -= 1

    @rule(cid=ids, ok=st.booleans())
    def answer(self, cid: str, ok: bool) -> None:
        self._sync_model()
        was_pending = cid in self.pending
        if ok:
            accepted = self.correlator.resolve(cid, None)
        else:
            accepted = self.correlator.fail(cid, errors.PublishError("refused"))
        assert accepted == was_pending
        if was_pending:
            fut = self.left[cid] = self.pending.pop(cid)
            assert fut.done()
            assert (fut.exception() is None) == ok
        else:
            self.unknown += 1

    @rule(cid=ids)
    def answer_found(self, cid: str) -> None:
        """An ack the C scan matched: looked up in `entries`, then `settle`d."""
        self._sync_model()
        fut = self.correlator.entries.get(cid)
        assert (fut is not None) == (cid in self.pending)
        if fut is None:
            return  # the scan finds nothing: protobuf's path answers (`answer`)
        self.correlator.settle(fut, None)
        assert cid not in self.correlator.entries
        self.left[cid] = self.pending.pop(cid)
        assert fut.done()
        assert fut.exception() is None

    @rule(cid=consumes(ids))
    def cancel(self, cid: str) -> None:
        self._sync_model()
        fut = self.pending.get(cid) or self.left.get(cid)
        assert fut is not None
        cancelled = fut.cancel()
        assert cancelled == (cid in self.pending)
        if cancelled:
            self.left[cid] = self.pending.pop(cid)
            assert cid not in self.correlator

    @rule()
    def time_passes(self) -> None:
        self._spin(_TICK * 3)
        self._sync_model()
        for fut in self.left.values():
            assert fut.done()

    @rule(which=st.integers(0, 1))
    def connection_lost(self, which: int) -> None:
        owner = self.owners[which]
        expected = {c for c, f in self.pending.items() if f.owner is owner and c in self.correlator}
        failed = self.correlator.fail_owned(owner, errors.UnavailableError("gone"))
        assert failed == len(expected)
        for cid in expected:
            fut = self.left[cid] = self.pending.pop(cid)
            assert isinstance(fut.exception(), errors.UnavailableError)

    @precondition(lambda self: not self.closed)
    @rule()
    def close(self) -> None:
        self._sync_model()
        count = self.correlator.close(errors.ConnectionClosedError("closed"))
        assert count == len(self.pending)
        for cid in list(self.pending):
            fut = self.left[cid] = self.pending.pop(cid)
            assert isinstance(fut.exception(), errors.ConnectionClosedError)
        self.acquired = 0
        self.closed = True

    # ------------------------------------------------------------ invariants

    @invariant()
    def registry_matches_the_model(self) -> None:
        self._sync_model()
        assert {f.correlation_id for f in self.correlator.pending()} == set(self.pending)
        assert len(self.correlator) == len(self.pending)
        for fut in self.pending.values():
            assert not fut.done()

    @invariant()
    def slots_are_entries_plus_acquired(self) -> None:
        if self.closed:
            assert self.correlator.held == 0
        else:
            assert self.correlator.held == len(self.pending) + self.acquired
            assert self.correlator.held <= CAPACITY

    @invariant()
    def every_future_left_settled_exactly_once(self) -> None:
        for cid, fut in self.left.items():
            assert fut.done(), cid
            assert cid not in self.correlator
            assert fut._correlator is None  # it left through the one exit

    @invariant()
    def unknown_answers_are_counted(self) -> None:
        assert self.correlator.unknown_acks == self.unknown


CorrelatorMachine.TestCase.settings = settings(
    max_examples=examples(100), stateful_step_count=40, deadline=None
)
TestCorrelatorMachine = CorrelatorMachine.TestCase
