"""Packs whose rows have a clock each (``eo-clocks``): copies of a pack that end on
different rows (a task cut short, then retried) deliver every row once."""

from __future__ import annotations

import logging
from typing import cast

import pytest
from test_eo_publisher import StubClient, publisher

from liftbridge_client import Client, errors
from liftbridge_client.exactly_once import (
    CLOCKS_HEADER,
    UUID_HEADER,
    Checkpoint,
    Clock,
    ExactlyOncePublisher,
    Flags,
    PartitionRef,
    QueueOutcome,
    Sequencer,
    build_uuid,
    clock_of,
    delivered,
)
from liftbridge_client.exactly_once.reader import envelope_of
from liftbridge_client.models import Message
from liftbridge_client.packing import PACKED_HEADER, PackedRow, pack, packed_headers, unpack

P = bytes.fromhex("a1a2a3a4a5a6")
REF = PartitionRef("s", 0)


def packed(offset: int, rows: range, flags: Flags = Flags.CONTINUE_TXN) -> Message:
    """A pack of rows ``rows`` (row i has clock i), as the sink writes it."""
    n = len(rows)
    headers = {
        **packed_headers(n),
        UUID_HEADER: build_uuid(P, rows[-1], flags).bytes,
        CLOCKS_HEADER: str(n).encode(),
    }
    value = pack([PackedRow(f"r{i}".encode()) for i in rows])
    return Message("s", 0, offset, value, headers=headers)


def ack(offset: int, clock: int) -> Message:
    return Message(
        "s", 0, offset, b"", headers={UUID_HEADER: build_uuid(P, clock, Flags.ACK_TXN).bytes}
    )


def read(log: list[Message], buffer: int = 4096, restart: int = -1) -> list[str]:
    """Rows a read-committed reader yields (optionally restarted from a checkpoint taken
    after the ``restart``-th committed message)."""
    seq = Sequencer(buffer=buffer)
    out: list[str] = []
    i = 0
    while i < len(log):
        if seq.queue(envelope_of(log[i])) is QueueOutcome.ACK_COMMIT_REPLAY:
            _, begin, end = seq.replay_range()
            seq.start_replay(envelope_of(m) for m in log[begin:end])
        i += 1
        while (env := seq.step()) is not None:
            m = delivered(env)
            if PACKED_HEADER in m.headers:
                out += [r.value.decode() for r in unpack(m.value)]
            if len(out) and restart == 0:
                checkpoint = seq.checkpoint()
                seq = Sequencer(checkpoint, buffer=buffer)
                i = checkpoint.offsets[REF]
                restart = -1
                break
            restart -= 1
    return out


def rows(a: int, b: int) -> list[str]:
    return [f"r{i}" for i in range(a, b)]


# A failed attempt packed rows 1-4 and a cut-short pack of 5-6; its retry packed 1-4, 5-8.
RETRIED = [
    packed(0, range(1, 5)),
    packed(1, range(5, 7)),  # the cut-short pack: clock 6
    packed(2, range(1, 5)),  # the retry's copies
    packed(3, range(5, 9)),  # clock 8: rows 5 and 6 came in the cut-short pack
    ack(4, 9),
]


@pytest.mark.parametrize("buffer", [1, 2, 4096])
def test_a_longer_copy_of_a_cut_short_pack_delivers_only_the_rows_after_it(buffer: int) -> None:
    assert read(RETRIED, buffer) == rows(1, 9)


def test_a_shorter_copy_after_the_full_pack_is_a_duplicate() -> None:
    log = [packed(0, range(1, 5)), packed(1, range(5, 9)), packed(2, range(5, 7)), ack(3, 9)]
    assert read(log) == rows(1, 9)


def test_a_checkpoint_after_the_trimmed_pack_resumes_without_it() -> None:
    whole = read(RETRIED)
    for restart in range(3):
        assert read(RETRIED, restart=restart) == whole


def test_the_first_pack_of_a_producer_is_delivered_whole() -> None:
    # The reader starts in the middle: nothing of the producer was seen before.
    assert read([packed(0, range(100, 164)), ack(1, 164)]) == rows(100, 164)


def test_packs_without_the_clocks_header_take_one_clock_as_before() -> None:
    # Old writers: a clock per pack; the same cut-short log then loses rows 7 and 8 (the
    # defect eo-clocks removes), and nothing is trimmed by mistake.
    old = []
    for m in RETRIED:
        headers = {k: v for k, v in m.headers.items() if k != CLOCKS_HEADER}
        if PACKED_HEADER in headers:
            first = int(unpack(m.value)[0].value[1:])
            headers[UUID_HEADER] = build_uuid(P, 1 if first == 1 else 2, Flags.CONTINUE_TXN).bytes
        else:
            headers[UUID_HEADER] = build_uuid(P, 3, Flags.ACK_TXN).bytes
        old.append(Message("s", 0, m.offset, m.value, headers=headers))
    assert read(old) == rows(1, 7)


def test_delivered_keeps_other_headers_and_updates_the_counts() -> None:
    seq = Sequencer()
    out = []
    for m in RETRIED:
        seq.queue(envelope_of(m))
        while (env := seq.step()) is not None:
            out.append((env, delivered(env)))
    trimmed = [(env, m) for env, m in out if env.skip]
    assert len(trimmed) == 1
    env, m = trimmed[0]
    assert (env.ticks, env.skip) == (4, 2)
    assert m.headers[PACKED_HEADER] == b"2"
    assert m.headers[CLOCKS_HEADER] == b"2"
    assert m.headers[UUID_HEADER] == RETRIED[3].headers[UUID_HEADER]
    assert [r.value for r in unpack(m.value)] == [b"r7", b"r8"]


def test_a_message_that_is_not_the_pack_it_claims_is_delivered_whole(
    caplog: pytest.LogCaptureFixture,
) -> None:
    liar = Message(
        "s",
        0,
        1,
        b"plain",
        headers={UUID_HEADER: build_uuid(P, 8, Flags.CONTINUE_TXN).bytes, CLOCKS_HEADER: b"4"},
    )
    seq = Sequencer()
    seq.queue(envelope_of(packed(0, range(1, 7))))
    seq.queue(envelope_of(liar))
    seq.queue(envelope_of(ack(2, 9)))
    got = []
    with caplog.at_level(logging.WARNING):
        while (env := seq.step()) is not None:
            got.append(delivered(env))
    assert got[1] is liar
    assert "not a pack of 4 rows" in caplog.text


@pytest.mark.parametrize("raw", [b"", b"0", b"-3", b"x", b"1" * 12])
def test_a_bad_clocks_header_reads_as_one_clock(
    raw: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    m = Message(
        "s", 0, 0, b"v", headers={UUID_HEADER: build_uuid(P, 5, 0).bytes, CLOCKS_HEADER: raw}
    )
    with caplog.at_level(logging.WARNING):
        assert envelope_of(m).ticks == 1
    assert "not a count" in caplog.text


def test_a_message_without_uuid_takes_no_clocks() -> None:
    m = Message("s", 0, 0, b"v", headers={CLOCKS_HEADER: b"5"})
    assert envelope_of(m).ticks == 1


async def test_the_publisher_ticks_once_per_clock_and_says_so() -> None:
    stub = StubClient()
    pub = ExactlyOncePublisher(cast(Client, stub), clock=Clock(100), producer=P)
    await pub.publish_uncommitted("s", b"a", partition=0, clocks=5)
    await pub.publish_uncommitted("s", b"b", partition=0)
    first, second = stub.calls
    assert clock_of(first["headers"][UUID_HEADER]) == 105
    assert first["headers"][CLOCKS_HEADER] == b"5"
    assert clock_of(second["headers"][UUID_HEADER]) == 106
    assert CLOCKS_HEADER not in second["headers"]
    [intent] = pub.build_ack_intents()
    assert clock_of(intent.uuid) == 107


async def test_clocks_must_be_a_positive_int_and_the_header_is_reserved() -> None:
    pub = publisher(StubClient())
    for bad in (0, -1, 1.5, True):
        with pytest.raises(errors.InvalidInputError, match="clocks"):
            await pub.publish_uncommitted("s", b"v", partition=0, clocks=bad)  # type: ignore[arg-type]
    with pytest.raises(errors.InvalidInputError, match="reserved"):
        await pub.publish_committed("s", b"v", partition=0, headers={CLOCKS_HEADER: b"2"})


def test_clock_tick_by_n() -> None:
    clock = Clock(10)
    assert clock.tick(3) == 13
    assert clock.tick() == 14
    with pytest.raises(errors.InvalidInputError):
        clock.tick(0)


def test_checkpoints_carry_no_clocks_state() -> None:
    # The trimming needs only the last delivered clock, which checkpoints already keep.
    seq = Sequencer()
    for m in RETRIED:
        seq.queue(envelope_of(m))
        while seq.step() is not None:
            pass
    state = Checkpoint.from_json(seq.checkpoint().to_json()).states[0]
    assert state.last_ack == 9
