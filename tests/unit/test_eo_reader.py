"""CommittedReader and value_uuid against a stub Client (no IO): values that do not
decode, and `uuid_of` functions that fail, count as messages without a UUID."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from types import SimpleNamespace, TracebackType
from typing import Any, cast

import pytest

from liftbridge_client import Client, errors
from liftbridge_client.exactly_once import UUID_HEADER, CommittedReader, Flags, value_uuid
from liftbridge_client.exactly_once.framing import (
    CsvFraming,
    FixedProtoFraming,
    JsonLinesFraming,
    JsonMessage,
)
from liftbridge_client.exactly_once.reader import UuidOf, envelope_of
from liftbridge_client.exactly_once.uuids import build_uuid
from liftbridge_client.models import Message

PRODUCER = bytes.fromhex("a1a2a3a4a5a6")
DEEP = b"[" * 100_000  # json.loads recurses once per bracket: RecursionError, not ValueError


class StubSubscription:
    def __init__(self, messages: Sequence[Message]) -> None:
        self._messages = list(messages)

    async def __aenter__(self) -> StubSubscription:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        pass

    async def close(self) -> None:
        pass

    async def __aiter__(self) -> AsyncIterator[Message]:
        for message in self._messages:
            yield message


class StubClient:
    """Serves one stored partition log per (stream, partition)."""

    def __init__(self, logs: dict[tuple[str, int], list[Message]]) -> None:
        self.logs = logs

    def subscribe(self, stream: str, partition: int = 0, **kw: Any) -> StubSubscription:
        log = self.logs[(stream, partition)]
        start, stop = kw.get("start_offset", 0), kw.get("stop_offset", len(log) - 1)
        return StubSubscription([m for m in log if start <= m.offset <= stop])

    async def fetch_partition_metadata(self, stream: str, partition: int = 0) -> Any:
        return SimpleNamespace(newest_offset=len(self.logs[(stream, partition)]) - 1)


def partition_log(values: Sequence[bytes], stream: str = "s") -> list[Message]:
    return [Message(stream, 0, offset, value) for offset, value in enumerate(values)]


def json_value(n: int, clock: int) -> bytes:
    u = build_uuid(PRODUCER, clock, Flags.OUTSIDE_TXN)
    return JsonLinesFraming().marshal(JsonMessage({"n": n}, u))


async def read_all(stub: StubClient, uuid_of: UuidOf) -> list[Message]:
    reader = CommittedReader(cast(Client, stub), [("s", 0)], stop_at_latest=True, uuid_of=uuid_of)
    async with reader:
        return [m async for m in reader]


# ---------------------------------------------------------------- value_uuid


def test_a_deeply_nested_json_value_is_a_framing_error_and_has_no_uuid() -> None:
    jl = JsonLinesFraming()
    with pytest.raises(errors.FramingError, match="not a JSON line"):
        jl.unmarshal(DEEP)
    assert value_uuid(jl)(Message("s", 0, 0, DEEP)) is None


@pytest.mark.parametrize(
    "value",
    [
        DEEP,
        b"{" * 100_000,
        b'{"a":' * 100_000,
        b'{"uuid": "' + b"1" * 5000 + b'"}\n',
        b'{"uuid": ' + b"1" * 5000 + b"}\n",  # an int too long to convert to str
        b'{"uuid": {"x": 1}}\n',
        b'{"uuid": null}\n',
        b"\xff\xfe\x00",
        b"",
        b"[]\n",
    ],
    ids=[
        "brackets",
        "braces",
        "nested-keys",
        "long-uuid",
        "huge-int",
        "object",
        "null",
        "bytes",
        "empty",
        "list",
    ],
)
def test_json_values_that_do_not_decode_have_no_uuid(value: bytes) -> None:
    assert value_uuid(JsonLinesFraming())(Message("s", 0, 0, value)) is None


@pytest.mark.parametrize("framing", [CsvFraming(), FixedProtoFraming()], ids=["csv", "fixed"])
def test_other_framings_bad_values_have_no_uuid(framing: Any) -> None:
    for value in (DEEP, b"\x00" * 10, b'"' * 100_000, b"", b"a,b\nc,d\n"):
        assert value_uuid(framing)(Message("s", 0, 0, value)) is None


class RaisingFraming:
    """A user framing whose decoder raises whatever it is told to."""

    content_type = "application/x-test"

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    def marshal(self, message: Any) -> bytes:
        return b""

    def unmarshal(self, data: bytes) -> Any:
        raise self.exc

    def acknowledgement(self, uuid: uuid.UUID, template: Any) -> bytes:
        return b""


@pytest.mark.parametrize(
    "exc",
    [
        RecursionError(),
        TypeError(),
        KeyError("k"),
        IndexError(),
        MemoryError(),
        ZeroDivisionError(),
    ],
    ids=lambda e: type(e).__name__,
)
def test_whatever_exception_a_decoder_raises_means_no_uuid(exc: Exception) -> None:
    assert value_uuid(RaisingFraming(exc))(Message("s", 0, 0, b"v")) is None


@pytest.mark.parametrize(
    "exc",
    [KeyboardInterrupt(), asyncio.CancelledError(), SystemExit(1)],
    ids=lambda e: type(e).__name__,
)
def test_base_exceptions_from_a_decoder_are_not_swallowed(exc: BaseException) -> None:
    with pytest.raises(type(exc)):
        value_uuid(RaisingFraming(exc))(Message("s", 0, 0, b"v"))


def test_a_decoded_message_whose_uuid_attribute_raises_has_no_uuid() -> None:
    class Decoded:
        @property
        def uuid(self) -> uuid.UUID:
            raise ValueError("not a uuid")

    class Framing(RaisingFraming):
        def unmarshal(self, data: bytes) -> Any:
            return Decoded()

    assert value_uuid(Framing(ValueError()))(Message("s", 0, 0, b"v")) is None


# ---------------------------------------------------------------- the reader


async def test_a_poison_value_is_read_committed_as_a_message_without_uuid() -> None:
    jl = JsonLinesFraming()
    first, second = json_value(0, 10), json_value(1, 11)
    stub = StubClient({("s", 0): partition_log([first, DEEP, second, second])})
    got = await read_all(stub, value_uuid(jl))
    assert [m.offset for m in got] == [0, 1, 2]  # the poison value once, the copy dropped


async def test_resuming_from_a_checkpoint_before_a_poison_value_reads_on() -> None:
    jl = JsonLinesFraming()
    stub = StubClient({("s", 0): partition_log([json_value(0, 10), DEEP, json_value(1, 11)])})
    reader = CommittedReader(
        cast(Client, stub), [("s", 0)], stop_at_latest=True, uuid_of=value_uuid(jl)
    )
    async with reader:
        await anext(reader)
        saved = reader.checkpoint()
    resumed = CommittedReader(
        cast(Client, stub),
        [("s", 0)],
        checkpoint=saved,
        stop_at_latest=True,
        uuid_of=value_uuid(jl),
    )
    async with resumed:
        assert [m.offset async for m in resumed] == [1, 2]


def failing(exc: BaseException) -> Callable[[Message], bytes | None]:
    def uuid_of(message: Message) -> bytes | None:
        if message.value == b"bad":
            raise exc
        return message.headers.get(UUID_HEADER)

    return uuid_of


def with_uuid(offset: int, clock: int) -> Message:
    raw = build_uuid(PRODUCER, clock, Flags.OUTSIDE_TXN).bytes
    return Message("s", 0, offset, b"v%d" % clock, headers={UUID_HEADER: raw})


async def test_a_uuid_of_that_raises_counts_the_message_as_without_uuid(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log = [with_uuid(0, 5), Message("s", 0, 1, b"bad"), with_uuid(2, 5), with_uuid(3, 6)]
    with caplog.at_level(logging.WARNING, logger="liftbridge_client.exactly_once.reader"):
        got = await read_all(StubClient({("s", 0): log}), failing(RecursionError()))
    assert [m.offset for m in got] == [0, 1, 3]
    assert "s/0 offset 1" in caplog.text
    assert "RecursionError" in caplog.text


@pytest.mark.parametrize("result", [b"short", "0123456789abcdef", 16, bytearray(16)])
def test_a_uuid_of_returning_other_than_16_bytes_counts_as_without_uuid(result: Any) -> None:
    env = envelope_of(Message("s", 0, 7, b"v"), lambda m: result)
    assert env.uuid == bytes(16)


def test_a_uuid_of_interrupted_is_not_swallowed() -> None:
    with pytest.raises(KeyboardInterrupt):
        envelope_of(Message("s", 0, 0, b"bad"), failing(KeyboardInterrupt()))


# ---------------------------------------------------------------- feeders


class BrokenSubscription(StubSubscription):
    async def __aiter__(self) -> AsyncIterator[Message]:
        yield Message("s", 1, 0, b"first")
        raise RuntimeError("a bug below the reader")


class HalfBrokenClient(StubClient):
    def subscribe(self, stream: str, partition: int = 0, **kw: Any) -> StubSubscription:
        if partition == 1:
            return BrokenSubscription([])
        return super().subscribe(stream, partition, **kw)


async def test_a_feeder_failing_with_any_exception_ends_the_read_with_it() -> None:
    """Two partitions are read by supervised feeders: an error that is not a LiftbridgeError
    must reach the reader (before: the feeder died and the reader waited forever)."""
    logs = {("s", 0): partition_log([b"a", b"b"]), ("s", 1): partition_log([b"x", b"y"])}
    stub = HalfBrokenClient(logs)
    reader = CommittedReader(cast(Client, stub), [("s", 0), ("s", 1)], stop_at_latest=True)
    async with asyncio.timeout(10), reader:
        with pytest.raises(RuntimeError, match="a bug below the reader"):
            async for _ in reader:
                pass
    assert reader._supervisor.running == 0  # close() stopped every feeder
