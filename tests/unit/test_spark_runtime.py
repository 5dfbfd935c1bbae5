"""Read tasks of one worker process share a connection (`_runtime.borrow` / `give_back`):
only after a clean task, and only while it has not been idle too long."""

from __future__ import annotations

import pytest

from liftbridge_client.options import ClientOptions
from liftbridge_client.spark import _runtime

KEY = ("read", ("127.0.0.1:1",), (), 1.0)


def borrow() -> _runtime.TaskRuntime:
    return _runtime.borrow(KEY, ["127.0.0.1:1"], [], ClientOptions())


@pytest.fixture(autouse=True)
def _empty_pool() -> None:
    _runtime._idle.clear()


def test_a_clean_task_hands_its_runtime_to_the_next() -> None:
    first = borrow()
    _runtime.give_back(KEY, first, ok=True)
    assert borrow() is first
    assert borrow() is not first  # taken: a second borrower gets its own


def test_a_failed_task_closes_its_runtime() -> None:
    first = borrow()
    _runtime.give_back(KEY, first, ok=False)
    assert borrow() is not first


def test_an_idle_runtime_is_not_reused(monkeypatch: pytest.MonkeyPatch) -> None:
    first = borrow()
    _runtime.give_back(KEY, first, ok=True)
    monkeypatch.setattr(_runtime, "REUSE_IDLE", -1.0)
    assert borrow() is not first


def test_other_connection_settings_get_other_runtimes() -> None:
    first = borrow()
    _runtime.give_back(KEY, first, ok=True)
    other = _runtime.borrow(
        ("read", ("127.0.0.1:2",), (), 1.0), ["127.0.0.1:2"], [], ClientOptions()
    )
    assert other is not first
    assert borrow() is first


def test_a_write_connects_within_the_delivery_timeout_and_says_which_bound() -> None:
    """A frozen server accepts connections and answers nothing: a write's connect ends
    within deliveryTimeoutMs when that is the smaller bound, and the error names both."""
    import socket
    import time

    from liftbridge_client import errors
    from liftbridge_client.spark._options import SinkOptions
    from liftbridge_client.spark._write import client_options, sink_runtime

    frozen = socket.socket()
    frozen.bind(("127.0.0.1", 0))
    frozen.listen(16)  # never accepted, never answered
    try:
        address = f"127.0.0.1:{frozen.getsockname()[1]}"
        options = SinkOptions.parse(
            {"brokers": address, "deliveryTimeoutMs": "800", "connectTimeoutMs": "60000"}
        )
        assert client_options(options).connect_timeout == pytest.approx(0.8)
        runtime = sink_runtime(options)
        started = time.monotonic()
        with pytest.raises(errors.NoBrokerAvailableError) as raised:
            runtime.client  # noqa: B018 - connects
        assert time.monotonic() - started < 10
        assert "deliveryTimeoutMs=800" in str(raised.value)
        assert "connectTimeoutMs=60000" in str(raised.value)
        longer = SinkOptions.parse({"brokers": address, "connectTimeoutMs": "3000"})
        assert client_options(longer).connect_timeout == pytest.approx(3.0)
    finally:
        frozen.close()


def test_a_write_task_freezes_the_heap_it_found_and_gives_it_back() -> None:
    import gc

    assert gc.get_freeze_count() == 0
    before: object = type("Before", (), {})()  # a tracked object made before the task
    with _runtime.frozen_heap():
        frozen = gc.get_freeze_count()
        assert frozen > 0
        assert not any(o is before for o in gc.get_objects())  # out of every collection
        during: list[object] = [type("During", (), {})()]
        assert any(o is during for o in gc.get_objects())  # what the task makes is not
    assert gc.get_freeze_count() == 0
    assert any(o is before for o in gc.get_objects())


def test_a_heap_frozen_by_someone_else_stays_as_it_was() -> None:
    import gc

    theirs: object = type("Theirs", (), {})()  # frozen by someone else
    gc.freeze()
    try:
        after: object = type("After", (), {})()  # made after their freeze, not frozen
        with _runtime.frozen_heap():
            # The task froze nothing more (the freeze count is no witness: frozen objects
            # freed meanwhile leave it).
            assert any(o is after for o in gc.get_objects())
            assert not any(o is theirs for o in gc.get_objects())
        assert not any(o is theirs for o in gc.get_objects())  # their freeze holds
        assert any(o is after for o in gc.get_objects())
    finally:
        gc.unfreeze()


def test_the_heap_is_given_back_when_the_task_fails() -> None:
    import gc

    seen: list[int] = []

    def task() -> None:
        with _runtime.frozen_heap():
            seen.append(gc.get_freeze_count())
            raise RuntimeError("the task failed")

    with pytest.raises(RuntimeError):
        task()
    assert seen[0] > 0
    assert gc.get_freeze_count() == 0


def test_a_read_task_freezes_the_heap_while_it_makes_its_batches() -> None:
    import gc
    from collections.abc import Iterator

    from liftbridge_client.spark import _batch

    seen: list[int] = []

    def batches(fail: bool = False) -> Iterator[int]:
        for n in (1, 2):
            seen.append(gc.get_freeze_count())
            if fail and n == 2:
                raise RuntimeError("the read failed")
            yield n

    assert gc.get_freeze_count() == 0
    assert list(_batch._frozen(batches())) == [1, 2]
    assert len(seen) == 2
    assert min(seen) > 0
    assert gc.get_freeze_count() == 0
    # Abandoned after its first batch (a limit): given back when it is closed.
    abandoned = _batch._frozen(batches())
    assert next(abandoned) == 1
    assert gc.get_freeze_count() > 0
    abandoned.close()
    assert gc.get_freeze_count() == 0
    # A read that fails midway gives it back too.
    with pytest.raises(RuntimeError, match="the read failed"):
        list(_batch._frozen(batches(fail=True)))
    assert gc.get_freeze_count() == 0
