"""OpenTelemetry trace propagation through message headers (the ``[otel]`` extra).

Enable it with ``ClientOptions(tracing=TracingOptions())``. Then:

- a publish (``publish``, ``send``, ``publish_nowait``) starts a PRODUCER span
  ``send <stream>`` (a child of the caller's current span), injects its context into
  the message headers (``traceparent`` and ``tracestate``, W3C Trace Context, through
  the configured propagator), and ends the span when the ack arrives (at once with
  ack policy NONE) or the publish fails;
- each message a subscription yields gets a CONSUMER span ``receive <stream>``, a
  child of the context found in its headers (so producer and consumer share a trace);
- `message_context` and `message_link` give any message's producer context, to
  parent or link the spans of the code that processes it.

Attributes follow the OpenTelemetry semantic conventions for messaging:
``messaging.system`` (``liftbridge``), ``messaging.operation.name`` and ``.type``,
``messaging.destination.name`` (the stream), ``messaging.destination.partition.id``,
``messaging.message.id`` (the correlation id), ``messaging.message.body.size``, and
``messaging.liftbridge.message.offset``.

When tracing is off (the default) the client never imports this module and publishing
and subscribing do no tracing work: one ``is None`` check per call.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.propagators.textmap import Getter, Setter, TextMapPropagator

from liftbridge_client import errors
from liftbridge_client._publish.acks import PublishFuture
from liftbridge_client._version import __version__
from liftbridge_client.models import Ack, Message
from liftbridge_client.options import TracingOptions
from liftbridge_client.subscription import Subscription

__all__ = [
    "ATTR_OFFSET",
    "SYSTEM",
    "Tracer",
    "message_context",
    "message_link",
]

SYSTEM = "liftbridge"
ATTR_SYSTEM = "messaging.system"
ATTR_OPERATION_NAME = "messaging.operation.name"
ATTR_OPERATION_TYPE = "messaging.operation.type"
ATTR_DESTINATION = "messaging.destination.name"
ATTR_PARTITION = "messaging.destination.partition.id"
ATTR_MESSAGE_ID = "messaging.message.id"
ATTR_BODY_SIZE = "messaging.message.body.size"
ATTR_OFFSET = "messaging.liftbridge.message.offset"  # no generic name: as Kafka's own
ATTR_ERROR_TYPE = "error.type"


class _HeaderSetter(Setter[MutableMapping[str, bytes]]):
    """Writes propagation fields as header bytes."""

    def set(self, carrier: MutableMapping[str, bytes], key: str, value: str) -> None:
        carrier[key] = value.encode()


class _HeaderGetter(Getter[Mapping[str, bytes]]):
    """Reads propagation fields from header bytes (undecodable values are absent)."""

    def get(self, carrier: Mapping[str, bytes], key: str) -> list[str] | None:
        value = carrier.get(key)
        if value is None:
            return None
        try:
            return [value.decode()]
        except UnicodeDecodeError:
            return None

    def keys(self, carrier: Mapping[str, bytes]) -> list[str]:
        return list(carrier)


_SETTER = _HeaderSetter()
_GETTER = _HeaderGetter()


def _propagator(propagator: object | None) -> TextMapPropagator:
    if propagator is None:
        return propagate.get_global_textmap()
    if not isinstance(propagator, TextMapPropagator):
        raise errors.InvalidInputError(
            f"tracing propagator must be a TextMapPropagator, got {propagator!r}"
        )
    return propagator


def message_context(
    message: Message, *, propagator: TextMapPropagator | None = None
) -> otel_context.Context:
    """The producer's context carried in ``message``'s headers (empty if none).

    Use it as the parent of the span that processes the message:
    ``tracer.start_as_current_span("handle", context=message_context(msg))``.
    """
    return _propagator(propagator).extract(message.headers, getter=_GETTER)


def message_link(
    message: Message, *, propagator: TextMapPropagator | None = None
) -> trace.Link | None:
    """A span link to the producer's span of ``message``; None if it carries no context."""
    span_context = trace.get_current_span(message_context(message, propagator=propagator))
    ctx = span_context.get_span_context()
    if not ctx.is_valid:
        return None
    return trace.Link(ctx)


class Tracer:
    """The client's tracing: wraps publish calls and makes traced subscriptions."""

    def __init__(self, options: TracingOptions) -> None:
        provider = options.tracer_provider
        if provider is not None and not isinstance(provider, trace.TracerProvider):
            raise errors.InvalidInputError(
                f"tracing tracer_provider must be a TracerProvider, got {provider!r}"
            )
        if options.propagator is not None:
            _propagator(options.propagator)  # checked now, not at the first publish
        self._tracer = trace.get_tracer("liftbridge_client", __version__, tracer_provider=provider)
        self._propagator = options.propagator
        self._receive_spans = options.receive_spans

    # ------------------------------------------------------------ publish

    def _start(self, stream: str, value: bytes, kw: dict[str, Any]) -> trace.Span:
        attributes: dict[str, str | int] = {
            ATTR_SYSTEM: SYSTEM,
            ATTR_OPERATION_NAME: "send",
            ATTR_OPERATION_TYPE: "send",
            ATTR_DESTINATION: stream,
            ATTR_BODY_SIZE: len(value),
        }
        if kw.get("partition") is not None:
            attributes[ATTR_PARTITION] = str(kw["partition"])
        if kw.get("correlation_id"):
            attributes[ATTR_MESSAGE_ID] = kw["correlation_id"]
        span = self._tracer.start_span(
            f"send {stream}", kind=trace.SpanKind.PRODUCER, attributes=attributes
        )
        headers = dict(kw.get("headers") or {})
        _propagator(self._propagator).inject(
            headers, context=trace.set_span_in_context(span), setter=_SETTER
        )
        kw["headers"] = headers
        return span

    @staticmethod
    def _end(span: trace.Span, result: object, error: BaseException | None) -> None:
        if error is not None:
            span.record_exception(error)
            span.set_attribute(ATTR_ERROR_TYPE, type(error).__qualname__)
            span.set_status(trace.Status(trace.StatusCode.ERROR, str(error) or None))
        elif isinstance(result, Ack):
            span.set_attribute(ATTR_PARTITION, str(result.partition))
            span.set_attribute(ATTR_OFFSET, result.offset)
            span.set_attribute(ATTR_MESSAGE_ID, result.correlation_id)
        span.end()

    def _end_with(self, span: trace.Span, future: asyncio.Future[Any]) -> None:
        def done(f: asyncio.Future[Any]) -> None:
            if f.cancelled():
                self._end(span, None, asyncio.CancelledError())
            else:
                error = f.exception()
                self._end(span, None if error else f.result(), error)

        future.add_done_callback(done)

    async def publish(
        self,
        call: Callable[..., Awaitable[Any]],
        stream: str,
        value: bytes,
        kw: dict[str, Any],
    ) -> Any:
        """``await call(stream, value, **kw)`` inside a producer span."""
        kw = dict(kw)
        span = self._start(stream, value, kw)
        try:
            result = await call(stream, value, **kw)
        except BaseException as exc:
            self._end(span, None, exc)
            raise
        self._end(span, result, None)
        return result

    async def send(
        self,
        call: Callable[..., Awaitable[PublishFuture[Any]]],
        stream: str,
        value: bytes,
        kw: dict[str, Any],
    ) -> PublishFuture[Any]:
        """``call`` returns the publish's future; the span ends when the future does."""
        kw = dict(kw)
        span = self._start(stream, value, kw)
        try:
            future = await call(stream, value, **kw)
        except BaseException as exc:
            self._end(span, None, exc)
            raise
        self._end_with(span, future)
        return future

    def publish_nowait(
        self,
        call: Callable[..., PublishFuture[Any]],
        stream: str,
        value: bytes,
        kw: dict[str, Any],
    ) -> PublishFuture[Any]:
        kw = dict(kw)
        span = self._start(stream, value, kw)
        try:
            future = call(stream, value, **kw)
        except BaseException as exc:
            self._end(span, None, exc)
            raise
        self._end_with(span, future)
        return future

    # ------------------------------------------------------------ subscribe

    def received(self, message: Message) -> None:
        """A CONSUMER span for a message a subscription yields, child of its producer's."""
        if not self._receive_spans:
            return
        span = self._tracer.start_span(
            f"receive {message.stream}",
            context=message_context(message, propagator=_propagator(self._propagator)),
            kind=trace.SpanKind.CONSUMER,
            attributes={
                ATTR_SYSTEM: SYSTEM,
                ATTR_OPERATION_NAME: "receive",
                ATTR_OPERATION_TYPE: "receive",
                ATTR_DESTINATION: message.stream,
                ATTR_PARTITION: str(message.partition),
                ATTR_OFFSET: message.offset,
                ATTR_BODY_SIZE: len(message.value),
            },
        )
        span.end()

    def subscription(self, *args: Any, **kw: Any) -> Subscription:
        return _TracedSubscription(self, *args, **kw)


class _TracedSubscription(Subscription):
    """A `Subscription` that records a receive span for each message it yields."""

    def __init__(self, tracer: Tracer, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self._tracer = tracer

    async def __anext__(self) -> Message:
        message = await super().__anext__()
        self._tracer.received(message)
        return message
