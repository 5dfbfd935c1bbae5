"""Trace propagation over real servers, recorded by the OpenTelemetry SDK's in-memory exporter.

Each test uses its own TracerProvider (passed in TracingOptions), so no global state is
touched; the propagator is OpenTelemetry's default (W3C Trace Context and Baggage).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from liftbridge_client import (
    AckPolicy,
    Client,
    ClientOptions,
    Message,
    StartPosition,
    StopPosition,
    TracingOptions,
    Transport,
    errors,
)
from liftbridge_client.testing import Deployment, StreamName
from liftbridge_client.tracing import message_context, message_link

pytestmark = pytest.mark.integration


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> Iterator[TracerProvider]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider
    provider.shutdown()


def traced_client(deployment: Deployment, provider: TracerProvider) -> Client:
    return Client(
        deployment.addresses,
        nats_servers=[deployment.nats_url],
        options=ClientOptions(tracing=TracingOptions(tracer_provider=provider)),
    )


def by_kind(exporter: InMemorySpanExporter, kind: trace.SpanKind) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.kind is kind]


async def read_all(client: Client, stream: str) -> list[Message]:
    sub = client.subscribe(stream, start=StartPosition.EARLIEST, stop=StopPosition.LATEST)
    async with sub:
        return [m async for m in sub]


@pytest.mark.parametrize("transport", [Transport.NATS, Transport.GRPC])
async def test_publish_injects_context_and_subscribe_continues_the_trace(
    liftbridge_server: Deployment,
    unique_stream: StreamName,
    provider: TracerProvider,
    exporter: InMemorySpanExporter,
    transport: Transport,
) -> None:
    name, subject = unique_stream
    app = provider.get_tracer("app")
    async with traced_client(liftbridge_server, provider) as client:
        await client.create_stream(subject, name)
        with app.start_as_current_span("checkout") as parent:
            acks = [
                await client.publish(
                    name, f"m{i}".encode(), headers={"user": b"kept"}, transport=transport
                )
                for i in range(3)
            ]
        messages = await read_all(client, name)

    producers = by_kind(exporter, trace.SpanKind.PRODUCER)
    assert [s.name for s in producers] == [f"send {name}"] * 3
    trace_id = parent.get_span_context().trace_id
    for span, ack, msg in zip(producers, acks, messages, strict=True):
        ctx = span.context
        assert ctx is not None
        assert ctx.trace_id == trace_id
        assert span.parent is not None
        assert span.parent.span_id == parent.get_span_context().span_id
        assert dict(span.attributes or {}) == {
            "messaging.system": "liftbridge",
            "messaging.operation.name": "send",
            "messaging.operation.type": "send",
            "messaging.destination.name": name,
            "messaging.message.body.size": 2,
            "messaging.destination.partition.id": "0",
            "messaging.liftbridge.message.offset": ack.offset,
            "messaging.message.id": ack.correlation_id,
        }
        assert span.status.is_ok
        # W3C Trace Context in the headers, next to the caller's own.
        flags = f"{int(ctx.trace_flags):02x}"  # sampled (and, with newer SDKs, random)
        traceparent = f"00-{trace_id:032x}-{ctx.span_id:016x}-{flags}"
        assert msg.headers["traceparent"] == traceparent.encode()
        assert ctx.trace_flags.sampled
        assert msg.headers["user"] == b"kept"
        carried = trace.get_current_span(message_context(msg)).get_span_context()
        assert (carried.trace_id, carried.span_id) == (trace_id, ctx.span_id)
        link = message_link(msg)
        assert link is not None
        assert link.context.span_id == ctx.span_id

    consumers = by_kind(exporter, trace.SpanKind.CONSUMER)
    assert [s.name for s in consumers] == [f"receive {name}"] * 3
    for consumer, producer, msg in zip(consumers, producers, messages, strict=True):
        assert consumer.parent is not None
        assert producer.context is not None
        assert consumer.parent.span_id == producer.context.span_id
        assert consumer.context is not None
        assert consumer.context.trace_id == trace_id
        attributes = dict(consumer.attributes or {})
        assert attributes["messaging.operation.type"] == "receive"
        assert attributes["messaging.liftbridge.message.offset"] == msg.offset
        assert attributes["messaging.destination.partition.id"] == "0"


async def test_send_nowait_ack_none_and_failures_end_their_spans(
    liftbridge_server: Deployment,
    unique_stream: StreamName,
    provider: TracerProvider,
    exporter: InMemorySpanExporter,
) -> None:
    name, subject = unique_stream
    async with traced_client(liftbridge_server, provider) as client:
        await client.create_stream(subject, name)
        sent = await client.send(name, b"a", partition=0)
        nowait = client.publish_nowait(name, b"b", ack_policy=AckPolicy.NONE)
        await sent
        await nowait
        with pytest.raises(errors.NotFoundError):
            await client.publish(name + "-missing", b"c", transport=Transport.GRPC)
        await client.flush()

    # In the order they started (an unacked publish may end before an acked one).
    spans = sorted(by_kind(exporter, trace.SpanKind.PRODUCER), key=lambda s: s.start_time or 0)
    assert [s.name for s in spans] == [f"send {name}", f"send {name}", f"send {name}-missing"]
    acked, unacked, failed = spans
    assert (acked.attributes or {})["messaging.liftbridge.message.offset"] == 0
    assert "messaging.liftbridge.message.offset" not in (unacked.attributes or {})
    assert unacked.status.is_ok
    assert failed.status.status_code is trace.StatusCode.ERROR
    assert (failed.attributes or {})["error.type"] == "NotFoundError"
    assert [e.name for e in failed.events] == ["exception"]


async def test_receive_spans_can_be_turned_off(
    liftbridge_server: Deployment,
    unique_stream: StreamName,
    provider: TracerProvider,
    exporter: InMemorySpanExporter,
) -> None:
    name, subject = unique_stream
    options = ClientOptions(tracing=TracingOptions(tracer_provider=provider, receive_spans=False))
    async with Client(liftbridge_server.addresses, options=options) as client:
        await client.create_stream(subject, name)
        await client.publish(name, b"x")
        (msg,) = await read_all(client, name)
    assert "traceparent" in msg.headers
    assert by_kind(exporter, trace.SpanKind.CONSUMER) == []
    assert len(by_kind(exporter, trace.SpanKind.PRODUCER)) == 1


async def test_tracing_off_adds_no_header_even_inside_a_span(
    liftbridge_server: Deployment,
    unique_stream: StreamName,
    provider: TracerProvider,
    exporter: InMemorySpanExporter,
) -> None:
    name, subject = unique_stream
    async with Client(liftbridge_server.addresses) as client:
        await client.create_stream(subject, name)
        with provider.get_tracer("app").start_as_current_span("outer"):
            await client.publish(name, b"x", headers={"h": b"1"})
        (msg,) = await read_all(client, name)
    assert "traceparent" not in msg.headers
    assert msg.headers["h"] == b"1"
    assert [s.name for s in exporter.get_finished_spans()] == ["outer"]
    assert trace.get_current_span(message_context(msg)).get_span_context().is_valid is False
    assert message_link(msg) is None
