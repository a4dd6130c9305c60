"""OpenTelemetry traces of a record's way from the log to the client.

A request's: a span for the request, one per round of routing, one per internal call and, on
the node that answers, one per partition read (its partition, node, replica, version and
position). W3C `traceparent` is taken from a client's request and carried across the hop
to the peer, so one trace shows the client's request, the hop and the peer's read.

A publication's: the pipeline records a span per layer it publishes, from when it read the
layer's records to when the manifest names it, and keeps its `traceparent` in the manifest
(contracts/manifest.py); each node's install of that layer is its child, and a partition
read links to the publication of the version it read.

Off unless the standard variables ask for it: OTEL_TRACES_EXPORTER=otlp (OTLP over HTTP,
configured by OTEL_EXPORTER_OTLP_* as the SDK reads them; OTEL_TRACES_SAMPLER and its ARG
pick the sampler, OTEL_SERVICE_NAME the service). Off, `span` hands back one shared
context manager that does nothing: no OpenTelemetry call on a request's way.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping, MutableMapping
from typing import Any

from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.trace import Span

EXPORTERS = ("otlp",)  # the OTEL_TRACES_EXPORTER values a node acts on ("none": off)
SERVICE = "stategate"
_OFF = contextlib.nullcontext()


class Child:
    """`span`'s default parent: the current span."""


CHILD = Child()
_tracer: trace.Tracer | None = None
_flush: list[Any] = []  # the provider's force_flush, once configured


def configure(instance: str) -> bool:
    """Trace this process (a node, or the pipeline: its `instance`) when
    OTEL_TRACES_EXPORTER asks for it; whether it does."""
    global _tracer
    if os.environ.get("OTEL_TRACES_EXPORTER", "none").strip().lower() not in EXPORTERS:
        return False
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", SERVICE),
                                "service.instance.id": instance})  # fmt: skip
    provider = TracerProvider(resource=resource)  # the sampler from OTEL_TRACES_SAMPLER
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    _tracer = provider.get_tracer(SERVICE)
    _flush.append(provider.force_flush)
    return True


def on() -> bool:
    return _tracer is not None


def span(
    name: str, attributes: Mapping[str, Any], parent: Context | None | Child = CHILD
) -> contextlib.AbstractContextManager[Span | None]:
    """A span for the block: the current span's child (nothing when that one is sampled
    out), or one that begins a request's part of a trace, whose `parent` is what its
    `traceparent` carried (None: a trace of its own). Nothing at all when off."""
    if _tracer is None:
        return _OFF
    if isinstance(parent, Child):
        if not trace.get_current_span().is_recording():
            return _OFF  # sampled out (or no request around it): no span under it either
        parent = None
    return _started(_tracer, name, attributes, parent)


@contextlib.contextmanager
def _started(
    tracer: trace.Tracer, name: str, attributes: Mapping[str, Any], parent: Context | None
) -> Iterator[Span]:
    with tracer.start_as_current_span(name, context=parent, attributes=attributes) as current:
        yield current


def finished(name: str, attributes: Mapping[str, Any], start_ms: int | None) -> str | None:
    """Record a span of a trace of its own, from `start_ms` (None: now) until now; its
    `traceparent`, or None when off or sampled out."""
    if _tracer is None:
        return None
    start = None if start_ms is None else start_ms * 1_000_000
    recorded = _tracer.start_span(name, context=Context(), attributes=attributes, start_time=start)
    recorded.end()
    if not recorded.get_span_context().trace_flags.sampled:
        return None
    carrier: dict[str, str] = {}
    propagate.inject(carrier, context=trace.set_span_in_context(recorded))
    return carrier.get("traceparent")


def following(traceparent: str | None) -> Context | None:
    """The context a stored `traceparent` names (None when off or there is none)."""
    return None if traceparent is None else extracted({"traceparent": traceparent})


def link(current: Span | None, traceparent: str | None) -> None:
    """Link a span to the one a stored `traceparent` names (a read to its publication)."""
    context = following(traceparent) if current is not None else None
    if current is not None and context is not None:
        current.add_link(trace.get_current_span(context).get_span_context())


def extracted(headers: Mapping[str, str]) -> Context | None:
    """The context a request's `traceparent` carries (None when off or absent)."""
    if _tracer is None or "traceparent" not in headers:
        return None
    return propagate.extract(headers)


def inject(headers: MutableMapping[str, str]) -> None:
    """Add the current span's `traceparent` to an outgoing request's headers."""
    if _tracer is not None:
        propagate.inject(headers)


def flush() -> None:
    """Export what is buffered (a node stopping)."""
    for force_flush in _flush:
        force_flush()
