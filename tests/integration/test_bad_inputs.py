"""Inputs that crash or confuse the server are refused client-side; what is accepted works.

The v1.9.0 server panics (and crash-loops on every restart) on stream names that are not a
valid directory name or NATS subject token, and on stream subjects NATS refuses. Each such
input must be refused by the client (`InvalidInputError` naming the rule) without any
request leaving it, and the real server must still serve afterwards. Conversely, every
name and subject the validator accepts must round-trip on a real node (create, publish
over both transports, read, delete), leaving it alive.
"""

from __future__ import annotations

import asyncio
import datetime
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from liftbridge_client import Client, ClientOptions, StartPosition, StreamConfig, Transport, errors
from liftbridge_client._validate import stream_name, stream_subject
from liftbridge_client.testing import SingleNode

pytestmark = pytest.mark.integration


class CallSpy:
    """Counts the RPCs a real client starts (wraps its metadata cache's call helpers)."""

    def __init__(self, client: Client) -> None:
        self.calls: list[str] = []
        md = client._metadata
        for attr in ("call_any", "call_leader", "fetch", "refresh"):
            original = getattr(md, attr)
            setattr(md, attr, self._wrap(attr, original))

    def _wrap(self, attr: str, fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        async def wrapped(*args: Any, **kw: Any) -> Any:
            self.calls.append(attr)
            return await fn(*args, **kw)

        return wrapped


@pytest.fixture
async def client(liftbridge_server: SingleNode) -> AsyncIterator[Client]:
    async with Client(
        liftbridge_server.addresses,
        nats_servers=[liftbridge_server.nats_url],
        options=ClientOptions(ack_wait=10),
    ) as c:
        yield c


async def still_serves(client: Client, node: SingleNode) -> None:
    """The node did not crash: it still creates a stream, stores and serves a message."""
    assert not node.unexpected_exits()
    tag = uuid.uuid4().hex[:10]
    await client.create_stream(f"bad.alive.{tag}", f"alive-{tag}")
    ack = await client.publish(f"alive-{tag}", b"ok")
    assert ack.offset == 0
    await client.delete_stream(f"alive-{tag}")


# (subject, name, rule fragment): the measured crashers first, then the rules' other cases.
CRASHING_CREATES = [
    ("bad.space", "has space", "whitespace"),
    ("bad.dotdot", "..", "'..'"),
    ("bad.escape", "../x", "'/'"),
    ("bad.nul", "nul\x00name", "control"),
    ("bad.long", "x" * 300, "255 bytes"),
    ("bad.tab", "tab\tname", "whitespace"),
    ("bad.slash", "a/b", "'/'"),
    ("bad.lead", ".lead", "start or end"),
    ("bad.trail", "trail.", "start or end"),
    ("bad.gt", "a.>.b", "'*' or '>'"),
    ("bad.star", "*", "'*' or '>'"),
    ("has space", "subject-space", "whitespace"),
    ("bad..empty", "subject-empty-token", "'..'"),
    (".bad", "subject-leading-dot", "start or end"),
    ("bad.", "subject-trailing-dot", "start or end"),
    ("bad.>.x", "subject-misplaced-gt", "'>' may only be the last token"),
    ("bad\x00nul", "subject-nul", "control"),
    ("bad\nline", "subject-newline", "whitespace"),
    ("x" * 1100, "subject-long", "1024 bytes"),
    ("\ud800", "subject-surrogate", "UTF-8"),
    ("bad.surrogate", "\udfff", "UTF-8"),
]


async def test_crashing_stream_inputs_are_refused_without_reaching_the_server(
    client: Client, liftbridge_server: SingleNode
) -> None:
    spy = CallSpy(client)
    for subject, name, rule in CRASHING_CREATES:
        with pytest.raises(errors.InvalidInputError) as info:
            await client.create_stream(subject, name)
        assert rule in str(info.value), (subject, name, str(info.value))
    # A '>' subject cannot take more partitions (partition N listens on "<subject>.N").
    with pytest.raises(errors.InvalidInputError, match="single partition"):
        await client.create_stream("bad.multi.>", "gt-partitions", StreamConfig(partitions=2))
    with pytest.raises(errors.InvalidInputError, match="group"):
        await client.create_stream("bad.group", "group-space", StreamConfig(group="a b"))
    assert spy.calls == []  # nothing left the client
    await still_serves(client, liftbridge_server)


@pytest.mark.parametrize("transport", [Transport.NATS, Transport.GRPC])
async def test_bad_publish_values_are_refused_on_both_transports(
    client: Client, liftbridge_server: SingleNode, transport: Transport
) -> None:
    tag = uuid.uuid4().hex[:10]
    name = f"badpub-{tag}"
    await client.create_stream(f"bad.pub.{tag}", name)
    spy = CallSpy(client)
    bad: list[tuple[dict[str, Any], str]] = [
        ({"correlation_id": "\ud800"}, "correlation_id"),
        ({"headers": {"\ud800": b"v"}}, "header name"),
        ({"headers": {"h": "text"}}, "must be bytes"),
        ({"key": "text"}, "key must be bytes"),
        ({"partition": 2**40}, "partition"),
        ({"ack_wait": float("inf")}, "ack_wait"),
    ]
    for kw, fragment in bad:
        with pytest.raises(errors.InvalidInputError, match=fragment):
            await client.publish(name, b"v", transport=transport, **kw)
    with pytest.raises(errors.InvalidInputError, match="stream"):
        await client.publish("\ud800", b"v", transport=transport)
    assert spy.calls == []
    assert client.stats().pending == 0
    # A good publish still works, with a timedelta ack wait.
    ack = await client.publish(
        name, b"ok", transport=transport, ack_wait=datetime.timedelta(seconds=10)
    )
    assert ack.offset == 0
    await still_serves(client, liftbridge_server)


async def test_bad_subject_publishes_and_partitions_are_refused(
    client: Client, liftbridge_server: SingleNode
) -> None:
    spy = CallSpy(client)
    for subject in ("\ud800", "a b", "a.*", "a.>", "a..b", ""):
        with pytest.raises(errors.InvalidInputError, match="subject"):
            await client.publish_to_subject(subject, b"v")
    with pytest.raises(errors.InvalidInputError, match="partition"):
        await client.fetch_partition_metadata("s", 2**40)
    with pytest.raises(errors.InvalidInputError, match="partition"):
        await client.set_cursor("c", "s", 0, partition=2**40)
    with pytest.raises(errors.InvalidInputError, match="stream"):
        client.subscribe("\ud800")
    assert spy.calls == []
    await still_serves(client, liftbridge_server)


# ---------------------------------------------------------------- accepted inputs work

# Any character but lone surrogates, with the ones the rules are about made frequent.
_CHARS = st.characters(codec="utf-8") | st.sampled_from(".-_*>:$~/ ")
_NAMES = st.text(_CHARS, min_size=1, max_size=40)
# Subjects: dot-separated tokens, some of them '*'.
_SUBJECT_TOKENS = st.lists(
    st.text(_CHARS, min_size=1, max_size=12).filter(lambda t: "." not in t) | st.just("*"),
    min_size=1,
    max_size=3,
)


def _accepted_name(raw: str) -> str | None:
    try:
        return stream_name(raw)
    except errors.InvalidInputError:
        return None


async def round_trip(node: SingleNode, name: str, subject: str) -> None:
    async with Client(
        node.addresses, nats_servers=[node.nats_url], options=ClientOptions(ack_wait=10)
    ) as c:
        await c.create_stream(subject, name)
        # A subject with a wildcard token cannot be published to; publish on a literal one.
        # Only a whole '*' token is a wildcard: "0*" is a literal token (as in NATS).
        tokens = subject.split(".")
        pub_subject = ".".join("w" if t == "*" else t for t in tokens)
        literal = "*" not in tokens
        acks = [await c.publish(name, b"grpc", transport=Transport.GRPC, key=b"k")]
        if literal:
            acks.append(await c.publish(name, b"nats", transport=Transport.NATS))
        assert [a.offset for a in acks] == list(range(len(acks)))
        assert all(a.stream == name for a in acks)
        md = await c.fetch_metadata(name)
        assert md.streams[name].subject == subject
        async with c.subscribe(
            name, start=StartPosition.EARLIEST, stop_offset=len(acks) - 1
        ) as sub:
            got = [(msg.stream, msg.value) async for msg in sub]
        assert got == [(name, b"grpc"), (name, b"nats")][: len(acks)]
        if not literal:  # a message on a subject matching the wildcard is stored too
            await c.publish_to_subject(pub_subject, b"to-subject")
            info = await c.fetch_partition_metadata(name)
            assert info.newest_offset == len(acks)
        await c.delete_stream(name)
        assert name not in (await c.fetch_metadata()).streams


@settings(
    max_examples=25,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.filter_too_much],
)
@given(raw_name=_NAMES, tokens=_SUBJECT_TOKENS)
@example(raw_name="a" * 246, tokens=["edge"])  # 255 bytes with the unique suffix
@example(raw_name="日本語.ストリーム", tokens=["ユニコード", "*"])
def test_accepted_names_and_subjects_round_trip(
    liftbridge_server: SingleNode, raw_name: str, tokens: list[str]
) -> None:
    tag = uuid.uuid4().hex[:8]
    name = _accepted_name(f"{raw_name}-{tag}")
    try:
        subject = stream_subject(".".join(["prop", tag, *tokens]))
    except errors.InvalidInputError:
        subject = None
    assume(name is not None and subject is not None)  # refusals are pinned above
    assert name is not None
    assert subject is not None
    asyncio.run(round_trip(liftbridge_server, name, subject))
    assert not liftbridge_server.unexpected_exits()
