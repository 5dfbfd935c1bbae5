"""``--traceparent``: publishes from the command line join the caller's trace.

A shell script or CI job that has a trace (the ``TRACEPARENT`` variable, as otel-cli
and CI tracers set it) passes it on: each message published carries it, as a
``traceparent`` header whose parent is that span, so consumers can link back to it.
Needs the ``[otel]`` extra.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from liftbridge_client import errors

__all__ = ["check_traceparent", "in_trace"]


def check_traceparent(value: str) -> None:
    """InvalidInputError unless ``value`` is a valid W3C traceparent (and OTel is there)."""
    try:
        from opentelemetry import trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
    except ImportError as exc:
        raise errors.InvalidInputError(
            f"--traceparent needs OpenTelemetry: install the [otel] extra ({exc})"
        ) from exc
    ctx = TraceContextTextMapPropagator().extract({"traceparent": value})
    if not trace.get_current_span(ctx).get_span_context().is_valid:
        raise errors.InvalidInputError(f"traceparent is not a W3C traceparent: {value!r}")


@contextlib.contextmanager
def in_trace(traceparent: str) -> Iterator[None]:
    """Run the block in the (remote) span ``traceparent`` names."""
    from opentelemetry import context
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    token = context.attach(TraceContextTextMapPropagator().extract({"traceparent": traceparent}))
    try:
        yield
    finally:
        context.detach(token)
