"""Tracing without servers: option checks and header carriers."""

from __future__ import annotations

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from liftbridge_client import Client, ClientOptions, Message, TracingOptions, errors
from liftbridge_client.tracing import Tracer, message_context, message_link


def test_tracing_options_are_checked() -> None:
    with pytest.raises(errors.InvalidInputError, match="tracing must be a TracingOptions"):
        ClientOptions(tracing=True)  # type: ignore[arg-type]
    with pytest.raises(errors.InvalidInputError, match="tracer_provider"):
        Client(["127.0.0.1:9292"], options=ClientOptions(tracing=TracingOptions(object())))
    with pytest.raises(errors.InvalidInputError, match="receive_spans"):
        TracingOptions(receive_spans="no")  # type: ignore[arg-type]
    with pytest.raises(errors.InvalidInputError, match="propagator"):
        Tracer(TracingOptions(propagator="w3c"))


def test_off_by_default_and_on_when_asked() -> None:
    assert ClientOptions().tracing is None
    assert Client(["127.0.0.1:9292"])._tracer is None
    on = Client(["127.0.0.1:9292"], options=ClientOptions(tracing=TracingOptions()))
    assert isinstance(on._tracer, Tracer)


def test_context_round_trip_through_header_bytes() -> None:
    provider = TracerProvider()
    propagator = TraceContextTextMapPropagator()
    with provider.get_tracer("t").start_as_current_span("s") as span:
        carrier: dict[str, str] = {}
        propagator.inject(carrier)
    headers = {k: v.encode() for k, v in carrier.items()}
    msg = Message("s", 0, 0, b"", headers=headers)
    carried = trace.get_current_span(message_context(msg, propagator=propagator))
    assert carried.get_span_context().span_id == span.get_span_context().span_id
    link = message_link(msg, propagator=propagator)
    assert link is not None
    assert link.context.trace_id == span.get_span_context().trace_id
    provider.shutdown()


def test_undecodable_or_missing_headers_carry_no_context() -> None:
    for headers in ({}, {"traceparent": b"\xff\xfe"}, {"traceparent": b"garbage"}):
        msg = Message("s", 0, 0, b"", headers=headers)
        assert message_link(msg) is None
