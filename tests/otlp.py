"""An OTLP/HTTP traces endpoint in the test process: it decodes the protobuf requests a
collector would and keeps every span (tests/test_tracing.py; docs/trace.py draws them)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

EXPORTED_S = 20.0  # the longest a span takes to arrive


@dataclass(frozen=True)
class Span:
    trace: str
    id: str
    parent: str
    name: str
    node: str  # the exporting process's service.instance.id
    attributes: dict[str, Any]
    links: tuple[str, ...] = ()  # the span ids it links to
    start_ns: int = 0
    end_ns: int = 0


class Receiver(ThreadingHTTPServer):
    """An OTLP/HTTP traces endpoint: every span it was sent."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.spans: list[Span] = []
        self.lock = threading.Lock()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def where(self, found: Callable[[list[Span]], list[Span]]) -> list[Span]:
        """What `found` picks of the spans, once it picks any."""
        deadline = time.monotonic() + EXPORTED_S
        while time.monotonic() < deadline:
            with self.lock:
                picked = found(list(self.spans))
            if picked:
                return picked
            time.sleep(0.1)
        raise AssertionError(f"none found in {[(s.name, s.node) for s in self.spans]}")

    def of(self, trace: str, names: set[str]) -> list[Span]:
        """The trace's spans, once every name in `names` arrived."""
        deadline = time.monotonic() + EXPORTED_S
        while time.monotonic() < deadline:
            with self.lock:
                found = [s for s in self.spans if s.trace == trace]
            if names <= {s.name for s in found}:
                return found
            time.sleep(0.1)
        raise AssertionError(f"spans of {trace}: {[(s.name, s.node) for s in found]}")


class _Handler(BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(self.rfile.read(int(self.headers["content-length"])))
        spans = []
        for resource in request.resource_spans:
            attributes = {a.key: _value(a.value) for a in resource.resource.attributes}
            for scope in resource.scope_spans:
                spans += [
                    Span(s.trace_id.hex(), s.span_id.hex(), s.parent_span_id.hex(), s.name,
                         attributes.get("service.instance.id", ""),
                         {a.key: _value(a.value) for a in s.attributes},
                         tuple(link.span_id.hex() for link in s.links),
                         s.start_time_unix_nano, s.end_time_unix_nano)
                    for s in scope.spans
                ]  # fmt: skip
        with self.server.lock:
            self.server.spans += spans
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


def _value(value: Any) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, kind) if kind else None
