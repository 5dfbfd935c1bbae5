"""The checkers detect each anomaly in a synthetic history (and none in a clean one)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from faults import fault_check
from faults.fault_checkers import PROBE, STRANDED_BOUND, VIA, acked_since, check, unexpected
from faults.fault_history import Event, Recorder, load, parse
from faults.fault_runner import hold_split
from faults.fault_workloads import Streams

S, E = "plain", "eo"
VIA1, VIA2 = f"{VIA}n1", f"{VIA}n2"


def ev(t: float, type_: str, **fields: Any) -> Event:
    return Event(t=t, type=type_, **fields)


def clean_history() -> list[Event]:
    """Two acked plain publishes, one acked exactly-once publish, a fault and its heal,
    a subscriber that saw both plain messages, and agreeing final reads."""
    return [
        ev(0.0, "note", process="sub-0", f="subscribe", stream=S, partition=0, data={"start": 0}),
        ev(0.1, "invoke", process="p-0", f="publish", stream=S, value="a"),
        ev(0.2, "ok", process="p-0", f="publish", stream=S, partition=0, offset=0, value="a"),
        ev(0.3, "sub", process="sub-0", stream=S, partition=0, offset=0, value="a"),
        ev(1.0, "nemesis", f="start", value="isolate-leader", data={"targets": ["n1"]}),
        ev(1.5, "invoke", process="p-0", f="publish", stream=S, value="b"),
        ev(
            2.0, "info", process="p-0", f="publish", stream=S, value="b", error="AckTimeoutError: x"
        ),
        ev(3.0, "nemesis", f="stop", value="isolate-leader"),
        ev(3.1, "invoke", process="p-0", f="publish", stream=S, value="b"),
        ev(3.5, "ok", process="p-0", f="publish", stream=S, partition=0, offset=1, value="b"),
        ev(3.6, "sub", process="sub-0", stream=S, partition=0, offset=1, value="b"),
        ev(3.7, "invoke", process="e-0", f="publish_eo", stream=E, value="x"),
        ev(3.8, "ok", process="e-0", f="publish_eo", stream=E, partition=0, offset=0, value="x"),
        ev(5.0, "read", f="leader", stream=S, data={"entries": [[0, 0, "a"], [0, 1, "b"]]}),
        ev(5.1, "read", f="replica", stream=S, data={"node": "n2", "entries": [[0, 0, "a"]]}),
        ev(5.2, "read", f="committed", stream=E, data={"entries": [[0, 0, "x"]]}),
    ]


def test_a_clean_history_has_no_anomaly() -> None:
    verdict = check(clean_history())
    assert verdict.anomalies == []
    assert (verdict.acked, verdict.eo_acked, verdict.sub_messages) == (2, 1, 2)
    assert verdict.recover_s == 0.8  # heal at 3.0; p-0 acked at 3.5, e-0 at 3.8
    assert verdict.unavailable_s == 3.3  # p-0: acked at 0.2, then only at 3.5
    assert verdict.errors == {"publish:AckTimeoutError": 1}


def test_a_lost_ack_is_detected() -> None:
    history = clean_history()
    history[13] = ev(5.0, "read", f="leader", stream=S, data={"entries": [[0, 0, "a"]]})
    history.pop(10)  # the subscriber did not see b either
    verdict = check(history)
    assert verdict.kinds() == {"acked-lost"}
    assert verdict.acked_lost == 1
    assert verdict.anomalies[0].values == ["b"]
    assert unexpected(verdict, strict=False) == []  # a known server defect
    assert unexpected(verdict, strict=True) == verdict.anomalies


def test_an_acked_value_moved_to_another_offset_is_displaced() -> None:
    history = clean_history()
    history[13] = ev(
        5.0, "read", f="leader", stream=S, data={"entries": [[0, 0, "b"], [0, 1, "a"]]}
    )
    history = [e for e in history if e.type != "sub"]
    history.pop(4)
    verdict = check([e for e in history if e.f != "replica"])
    assert verdict.kinds() == {"acked-displaced"}
    assert verdict.displaced == 2


def test_an_exactly_once_duplicate_and_loss_are_detected() -> None:
    history = clean_history()
    history.append(ev(6.0, "ok", process="e-0", f="publish_eo", stream=E, value="y"))
    history[15] = ev(
        5.2, "read", f="committed", stream=E, data={"entries": [[0, 0, "x"], [0, 1, "x"]]}
    )
    verdict = check(history)
    assert verdict.kinds() == {"eo-duplicate", "eo-acked-lost"}
    assert (verdict.eo_duplicates, verdict.eo_lost) == (1, 1)
    assert [a.kind for a in unexpected(verdict, strict=False)] == ["eo-duplicate"]


def test_a_divergent_replica_is_detected() -> None:
    history = clean_history()
    history[14] = ev(
        5.1,
        "read",
        f="replica",
        stream=S,
        data={"node": "n2", "entries": [[0, 0, "a"], [0, 1, "z"]]},
    )
    verdict = check(history)
    assert verdict.kinds() == {"divergent-replica"}
    assert verdict.divergent == 1
    assert "1: leader=b, n2=z" in verdict.anomalies[0].detail


def test_a_short_replica_is_lagging_not_divergent() -> None:
    history = clean_history()
    history[14].data["complete"] = False
    verdict = check(history)
    assert verdict.anomalies == []
    assert verdict.lagging_replicas == 1


def test_a_subscriber_gap_and_rewind_are_detected() -> None:
    history = clean_history()
    history.insert(4, ev(0.4, "sub", process="sub-0", stream=S, partition=0, offset=0, value="a"))
    verdict = check(history)
    assert verdict.kinds() == {"subscriber-rewind"}
    history = clean_history()
    history[3] = ev(0.3, "note", process="sub-0", f="resubscribe", stream=S, partition=0)
    verdict = check(history)  # offset 1 arrived without offset 0
    assert verdict.kinds() == {"subscriber-gap"}
    assert unexpected(verdict, strict=False) == verdict.anomalies


def test_a_read_that_was_later_lost_is_detected() -> None:
    history = clean_history()
    history[10] = ev(3.6, "sub", process="sub-0", stream=S, partition=0, offset=1, value="c")
    verdict = check(history)
    assert verdict.kinds() == {"read-lost"}


def test_no_ack_after_a_heal_means_no_recovery() -> None:
    history = [e for e in clean_history() if not (e.type == "ok" and e.t > 3.0)]
    history = [e for e in history if e.type not in ("sub", "read")]
    verdict = check(history)
    assert verdict.recover_s == float("inf")
    assert verdict.anomalies == []  # nothing was read back: unchecked, not lost
    assert (verdict.unchecked, verdict.acked) == (1, 1)
    history.append(ev(9.0, "note", f="not-recovered", error="ISR of plain/0 not full"))
    assert check(history).kinds() == {"not-recovered"}


def test_histories_round_trip_through_their_file(tmp_path: Path) -> None:
    recorder = Recorder(tmp_path / "history.jsonl")
    for e in clean_history():
        recorder.emit(
            e.type,
            process=e.process,
            f=e.f,
            stream=e.stream,
            partition=e.partition,
            offset=e.offset,
            value=e.value,
            error=e.error,
            data=e.data,
        )
    recorder.close()
    loaded = load(tmp_path / "history.jsonl")
    assert loaded[0].f == "start"
    for original, back in zip(clean_history(), loaded[1:], strict=True):
        back.t = original.t  # the recorder stamps its own times
        assert back == original
    assert [Event.from_json(e.to_json()) for e in clean_history()] == clean_history()
    assert list(parse(["", loaded[1].to_json(), "  "])) == [loaded[1]]


def test_fault_check_explains_an_anomaly_from_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    history = clean_history()
    history[13] = ev(5.0, "read", f="leader", stream=S, data={"entries": [[0, 0, "a"]]})
    history.pop(10)
    path = tmp_path / "history.jsonl"
    path.write_text("".join(e.to_json() + "\n" for e in history))
    assert fault_check.main([str(path)]) == 1
    out = capsys.readouterr().out
    assert "== acked-lost plain/0: 1 acked, not stored" in out
    assert "nemesis start isolate-leader ['n1']" in out
    assert "p-0 ok publish b plain/0@1" in out
    assert "read leader  plain: none of them" in out
    path.write_text("".join(e.to_json() + "\n" for e in clean_history()))
    assert fault_check.main([str(path), "--json"]) == 0


def test_the_live_read_committed_reader_is_checked() -> None:
    history = clean_history()
    live = ev(
        4.0,
        "sub",
        process="committed-live",
        f="committed",
        stream=E,
        partition=0,
        offset=0,
        value="x",
    )
    history.insert(13, live)
    verdict = check(history)
    assert verdict.anomalies == []  # offsets of committed reads may skip: no gap check
    assert verdict.live_committed == 1
    history.insert(
        14,
        ev(
            4.1,
            "sub",
            process="committed-live",
            f="committed",
            stream=E,
            partition=0,
            offset=2,
            value="x",
        ),
    )
    history.insert(
        15,
        ev(
            4.2,
            "sub",
            process="committed-live",
            f="committed",
            stream=E,
            partition=0,
            offset=3,
            value="q",
        ),
    )
    verdict = check(history)
    assert verdict.kinds() == {"eo-duplicate", "read-lost"}
    assert [a.kind for a in unexpected(verdict, strict=False)] == ["eo-duplicate"]


def test_a_publisher_stalled_from_its_start_counts() -> None:
    history = [e for e in clean_history() if not (e.type == "ok" and e.t < 1.0)]
    assert check(history).unavailable_s == 3.4  # first attempt at 0.1, first ack at 3.5


def group_history() -> list[Event]:
    """The clean history with two group members: g-0 is handed a, rebalances, g-1 is
    handed b; the group's cursor ends at offset 1."""
    history = clean_history()
    history[13:13] = [
        ev(0.05, "note", process="g-0", f="group-join", stream=S, data={"partitions": [0]}),
        ev(0.4, "sub", process="g-0", f="group", stream=S, partition=0, offset=0, value="a"),
        ev(1.1, "note", process="g-0", f="group-assign", stream=S, data={"partitions": []}),
        ev(1.2, "note", process="g-1", f="group-join", stream=S, data={"partitions": [0]}),
        ev(3.9, "sub", process="g-1", f="group", stream=S, partition=0, offset=1, value="b"),
        ev(4.5, "note", f="group-committed", stream=S, data={"committed": {"0": 1}}),
    ]
    return sorted(history, key=lambda e: e.t)


def test_a_clean_group_history_has_no_anomaly() -> None:
    verdict = check(group_history())
    assert verdict.anomalies == []
    assert (verdict.group_delivered, verdict.group_duplicates) == (2, 0)
    assert verdict.group_recover_s == 0.9  # heal at 3.0, partition 0 handed out at 3.9


def test_an_acked_message_the_group_skipped_is_lost() -> None:
    history = [e for e in group_history() if not (e.f == "group" and e.value == "b")]
    verdict = check(history)
    assert verdict.kinds() == {"group-lost"}  # b is behind the cursor (1), never handed out
    assert (verdict.group_lost, verdict.anomalies[0].values) == (1, ["b"])
    assert unexpected(verdict, strict=False) == verdict.anomalies
    # Beyond the cursor it was merely not handed out yet: still reported, not lost.
    history = [
        ev(e.t, "note", f="group-committed", stream=S, data={"committed": {"0": 0}})
        if e.f == "group-committed"
        else e
        for e in history
    ]
    verdict = check(history)
    assert verdict.kinds() == {"group-undelivered"}
    assert (verdict.group_lost, verdict.group_pending) == (0, 1)


def test_a_skip_after_the_log_lost_entries_is_the_servers() -> None:
    history = [e for e in group_history() if not (e.f == "group" and e.value == "b")]
    history.append(
        ev(5.3, "read", f="replica", stream=S, data={"node": "n2", "entries": [[0, 1, "z"]]})
    )
    verdict = check(history)
    assert verdict.kinds() == {"divergent-replica", "group-lost-truncated"}
    assert unexpected(verdict, strict=False) == []


def test_a_gap_inside_a_tenure_is_detected_and_a_rebalance_ends_one() -> None:
    leader = [[0, 0, "a"], [0, 1, "b"], [0, 2, "c"]]
    history = [
        ev(e.t, "sub", process="g-0", f="group", stream=S, partition=0, offset=2, value="c")
        if e.f == "group" and e.value == "b"
        else ev(e.t, "read", f="leader", stream=S, data={"entries": leader})
        if e.f == "leader"
        else e
        for e in group_history()
        if not (e.f == "group-assign" or (e.f == "group-join" and e.process == "g-1"))
    ]
    verdict = check(history)  # g-0: offset 0 then 2, no rebalance between; b never handed out
    assert verdict.kinds() == {"group-gap", "group-lost"}
    assert verdict.group_gaps == 1
    assert "g-0: offset 0 then 2" in verdict.anomalies[-2].detail
    rebalanced = sorted(
        [*history, ev(2.0, "note", process="g-0", f="group-assign", stream=S, data={})],
        key=lambda e: e.t,
    )
    assert check(rebalanced).kinds() == {"group-lost"}  # a rebalance may resume elsewhere


def test_group_duplicates_are_counted_not_failed() -> None:
    history = group_history()
    history.append(
        ev(4.0, "sub", process="g-1", f="group", stream=S, partition=0, offset=1, value="b")
    )
    verdict = check(sorted(history, key=lambda e: e.t))
    assert verdict.group_duplicates == 1
    assert verdict.anomalies == []  # at-least-once: a second copy is allowed


def test_a_partition_never_handed_out_after_a_heal_has_not_recovered() -> None:
    history = [e for e in group_history() if not (e.f == "group" and e.t > 3.0)]
    history = [e for e in history if e.f != "group-committed"]
    verdict = check(history)
    assert verdict.group_recover_s == float("inf")
    assert verdict.kinds() == {"group-undelivered"}  # no cursor known: b counts as pending


def split_history() -> list[Event]:
    """A split of n1 from 2.0 to 6.0: p-0 publishes to partition 0 and gets an ack from the
    majority at 4.0; the probe on n1 gets one ack at 2.5 (kept in the final log)."""
    setup = ev(0.0, "note", f="setup", data={"streams": [S, E]})
    return [
        setup,
        ev(0.1, "invoke", process="p-0", f="publish", stream=S, partition=0, value="a"),
        ev(0.2, "ok", process="p-0", f="publish", stream=S, partition=0, offset=0, value="a"),
        ev(2.0, "nemesis", f="start", value="split-leader", data={"targets": ["n1"]}),
        ev(2.1, "invoke", process=PROBE, f="publish", stream=S, partition=0, value="m-0"),
        ev(2.5, "ok", process=PROBE, f="publish", stream=S, partition=0, offset=1, value="m-0"),
        ev(2.6, "invoke", process="p-0", f="publish", stream=S, partition=0, value="b"),
        ev(4.0, "ok", process="p-0", f="publish", stream=S, partition=0, offset=2, value="b"),
        ev(6.0, "nemesis", f="stop", value="split-leader"),
        ev(
            7.0,
            "read",
            f="leader",
            stream=S,
            data={"entries": [[0, 0, "a"], [0, 1, "m-0"], [0, 2, "b"]]},
        ),
    ]


def test_a_split_whose_majority_acks_is_clean() -> None:
    verdict = check(split_history())
    assert verdict.anomalies == []
    assert (verdict.majority_s, verdict.minority_acked) == (2.0, 1)


def test_a_majority_without_acks_during_a_split_fails() -> None:
    history = split_history()
    # b was invoked before the split: its ack does not show the majority working.
    history[6] = ev(1.9, "invoke", process="p-0", f="publish", stream=S, partition=0, value="b")
    verdict = check(sorted(history, key=lambda e: e.t))
    assert verdict.kinds() == {"majority-unavailable"}
    assert "partitions [0]" in verdict.anomalies[0].detail
    assert unexpected(verdict, strict=False) == verdict.anomalies
    # Nor do the minority probe's acks.
    history = [e for e in split_history() if e.value != "b"]
    history[-1] = ev(
        7.0, "read", f="leader", stream=S, data={"entries": [[0, 0, "a"], [0, 1, "m-0"]]}
    )
    assert check(history).kinds() == {"majority-unavailable"}


def test_a_majority_missing_a_crashed_node_is_the_servers_anomaly() -> None:
    """A node that exited by itself (the server's CRC panic) leaves the split's majority one
    node short: counted as the server's, not failing the round; without the exit it fails."""
    history = split_history()
    history[6] = ev(1.9, "invoke", process="p-0", f="publish", stream=S, partition=0, value="b")
    history.append(ev(8.0, "note", f="server-exits", data={"n2": 2}))
    verdict = check(sorted(history, key=lambda e: e.t))
    assert verdict.kinds() == {"majority-unavailable-crashed"}
    assert "{'n2': 2}" in verdict.anomalies[0].detail
    assert unexpected(verdict, strict=False) == []
    assert unexpected(verdict, strict=True) == verdict.anomalies
    # A note without exits changes nothing.
    history[-1] = ev(8.0, "note", f="server-exits", data={})
    assert check(sorted(history, key=lambda e: e.t)).kinds() == {"majority-unavailable"}


def test_a_minority_ack_lost_after_the_heal_is_an_acked_loss() -> None:
    history = split_history()
    history[-1] = ev(
        7.0, "read", f="leader", stream=S, data={"entries": [[0, 0, "a"], [0, 2, "b"]]}
    )
    verdict = check(history)
    assert verdict.kinds() == {"acked-lost"}
    assert verdict.anomalies[0].values == ["m-0"]


def test_acked_since_counts_only_publishes_invoked_after_the_split() -> None:
    history = split_history()
    assert acked_since(history, S, 2.0) == {0: 4.0}  # not the probe's 2.5
    history[6] = ev(1.9, "invoke", process="p-0", f="publish", stream=S, partition=0, value="b")
    assert acked_since(sorted(history, key=lambda e: e.t), S, 2.0) == {}


async def test_the_runner_holds_a_split_by_the_checkers_count(tmp_path: Path) -> None:
    """The runner keeps a split until the majority acked every partition, counted from the
    nemesis start event as the checker counts. Counted from before the rules went in, an ack
    for a publish invoked meanwhile (from the old leader) ended the hold, and the checker,
    rightly not counting it, failed the round: CI's `majority-unavailable` of 2026-11-26."""
    recorder = Recorder(tmp_path / "history.jsonl")
    streams = Streams(S, 1, E, 1)
    recorder.events += [
        ev(1.9, "invoke", process="p-0", f="publish", stream=S, partition=0, value="a"),
        ev(2.0, "nemesis", f="start", value="split-leader"),
        ev(2.1, "ok", process="p-0", f="publish", stream=S, partition=0, offset=0, value="a"),
    ]
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(hold_split(recorder, streams, started=2.0, via=VIA1), 1.2)
    recorder.events += [
        ev(2.2, "invoke", process="p-0", f="publish", stream=S, partition=0, value="b"),
        ev(4.0, "ok", process="p-0", f="publish", stream=S, partition=0, offset=1, value="b"),
        # The NATS publisher on the minority's server, moved on.
        ev(2.3, "invoke", process=VIA1, f="publish", stream=S, partition=0, value="v"),
        ev(9.0, "ok", process=VIA1, f="publish", stream=S, partition=0, offset=2, value="v"),
    ]
    await asyncio.wait_for(hold_split(recorder, streams, started=2.0, via=VIA1), 1.2)
    recorder.close()


async def test_the_runner_holds_a_split_for_the_stranded_publisher_up_to_its_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("faults.fault_runner.STRANDED_BOUND", 0.5)
    recorder = Recorder(tmp_path / "history.jsonl")
    streams = Streams(S, 1, E, 1)
    recorder.events += [
        ev(2.0, "nemesis", f="start", value="split-leader"),
        ev(2.2, "invoke", process="p-0", f="publish", stream=S, partition=0, value="b"),
        ev(4.0, "ok", process="p-0", f="publish", stream=S, partition=0, offset=1, value="b"),
    ]
    loop = asyncio.get_running_loop()
    began = loop.time()
    await asyncio.wait_for(hold_split(recorder, streams, started=2.0, via=VIA1), 4.0)
    assert loop.time() - began >= 1.5  # the bound and its second of margin
    recorder.close()


def stranded_history(via_ack: float | None) -> list[Event]:
    """split_history, the split held until 25.0, with NATS publishers on n1's (the
    minority's) and n2's servers; n2's is acked at 2.4 (the majority's first ack of
    partition 0), n1's first ack after the split comes at ``via_ack`` (None: never)."""
    history = [e for e in split_history() if e.type not in ("read", "nemesis") or e.f != "stop"]
    history = [e for e in history if e.type != "read"]
    history += [
        ev(2.2, "invoke", process=VIA2, f="publish", stream=S, partition=0, value="v2"),
        ev(2.4, "ok", process=VIA2, f="publish", stream=S, partition=0, offset=3, value="v2"),
        ev(2.3, "invoke", process=VIA1, f="publish", stream=S, partition=0, value="v1"),
        ev(25.0, "nemesis", f="stop", value="split-leader"),
    ]
    entries = [[0, 0, "a"], [0, 1, "m-0"], [0, 2, "b"], [0, 3, "v2"]]
    if via_ack is not None:
        fields: dict[str, Any] = {"process": VIA1, "f": "publish", "stream": S, "partition": 0}
        history.append(ev(via_ack, "ok", offset=4, value="v1", **fields))
        entries.append([0, 4, "v1"])
    history.append(ev(30.0, "read", f="leader", stream=S, data={"entries": entries}))
    return sorted(history, key=lambda e: e.t)


@pytest.mark.parametrize(
    ("via_ack", "kinds"),
    [
        (2.4 + STRANDED_BOUND - 0.5, set()),  # moved on in time
        (2.4 + STRANDED_BOUND + 1.0, {"nats-stranded"}),  # too late
        (None, {"nats-stranded"}),  # never, until the heal
    ],
    ids=["moved-on", "late", "stuck"],
)
def test_a_nats_publisher_on_the_minoritys_server_must_move_on(
    via_ack: float | None, kinds: set[str]
) -> None:
    verdict = check(stranded_history(via_ack))
    assert verdict.kinds() == kinds
    if via_ack is None:
        assert verdict.stranded_s is None
    else:
        assert verdict.stranded_s == pytest.approx(via_ack - 2.4)
    assert unexpected(verdict, strict=False) == verdict.anomalies


def test_a_run_without_pinned_nats_publishers_has_no_stranded_figure() -> None:
    verdict = check(split_history())
    assert verdict.stranded_s is None
    assert "nats-stranded" not in verdict.kinds()


def crash_history(read_back: list[list[Any]], seconds: float | None) -> list[Event]:
    """Two values acked to a still partition, a crash-all, its restart, then one read."""
    return [
        ev(0.1, "ok", process="still", f="publish_still", stream="solo", partition=1, value="a"),
        ev(0.2, "ok", process="still", f="publish_still", stream="solo", partition=1, value="b"),
        ev(0.3, "nemesis", f="start", value="crash-all", data={"targets": ["n1", "n2", "n3"]}),
        ev(8.3, "nemesis", f="stop", value="crash-all"),
        ev(
            12.0,
            "read",
            f="restart",
            stream="solo",
            partition=1,
            data={
                "complete": seconds is not None,
                "seconds": seconds,
                "bound": 20.0,
                "entries": read_back,
            },
        ),
    ]


def test_a_still_partition_read_back_whole_after_a_crash_is_clean() -> None:
    verdict = check(crash_history([[1, 0, "a"], [1, 1, "b"]], 3.7))
    assert verdict.anomalies == []
    assert (verdict.still_acked, verdict.hidden, verdict.restart_read_s) == (2, 0, 3.7)


def test_acked_values_unreadable_after_a_crash_are_hidden() -> None:
    verdict = check(crash_history([[1, 0, "a"]], None))
    assert verdict.kinds() == {"acked-hidden"}
    assert verdict.hidden == 1
    assert verdict.anomalies[0].values == ["b"]
    assert "not readable 20.0 s after the restart" in verdict.anomalies[0].detail
    assert verdict.restart_read_s is None
    assert unexpected(verdict, strict=False) == []  # v1.9.0's known defect
    assert unexpected(verdict, strict=True) == verdict.anomalies


def test_values_acked_after_the_crash_are_not_expected_from_its_read() -> None:
    history = crash_history([[1, 0, "a"], [1, 1, "b"]], 2.0)
    # Acked after the crash started (and so not before it): not owed to this read.
    history.insert(
        3, ev(5.0, "ok", process="still", f="publish_still", stream="solo", partition=1, value="c")
    )
    verdict = check(history)
    assert verdict.anomalies == []
    assert verdict.still_acked == 3
