"""Read deadlines: a slow client holds a node's connection for a bounded time (slowloris).

A request's headers must be whole within settings.header_timeout_s of its first byte (of the
connection, for its first request), its body within settings.body_timeout_s of its headers.
uvicorn keeps neither: its timeout_keep_alive runs only between requests and every byte
received resets it, and an ASGI app is called once the headers are whole. So both are kept
by uvicorn's HTTP protocol, subclassed (`ReadDeadlines`): a timer from the request's first
byte to its headers' end, another from there to its body's end; no layer of the app's is
on a request's way for them. Either answers 408 REQUEST_TIMEOUT (in GraphQL's error shape
on /graphql) unless the app began answering, logs a line naming the client and closes the
connection; the app, still reading the body, is told the client left. A connection that
sent nothing is closed without a word, as an idle one is (browsers open some ahead of need).
"""

from __future__ import annotations

import asyncio
from typing import ClassVar

import orjson
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from contracts.errors import error_document
from resolvers.execution import client_errors

CODE = "REQUEST_TIMEOUT"
GRAPHQL = "/graphql"  # its errors have GraphQL's shape; the other endpoints', {"error": ...}


class ReadDeadlines(HttpToolsProtocol):
    """uvicorn's httptools protocol, closing a connection whose request headers are not
    whole within `header_s`, or whose body is not within `body_s` of them (set by a subclass:
    stategate/server_protocol.py)."""

    header_s: ClassVar[float]
    body_s: ClassVar[float]
    _timer: asyncio.TimerHandle | None = None  # the headers' deadline
    _begun = False  # a byte of the request under way arrived, not yet all its headers
    _body: asyncio.TimerHandle | None = None  # the body's deadline
    _reading = False  # the request's headers arrived, not yet all its body
    _idle_since: float | None = None  # when the last response ended, on an idle connection
    _idle_timer: asyncio.TimerHandle | None = None  # its keep-alive deadline, or later

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._timer = self.loop.call_later(self.header_s, self._headers_late)

    def data_received(self, data: bytes) -> None:
        """The bytes read; then a deadline for what they leave unfinished. Armed here, not
        as a request begins, so one that arrives whole (most) arms none."""
        super().data_received(data)
        if self.transport.is_closing():
            return
        if self._begun and self._timer is None:  # a request after the first: its first byte
            self._timer = self.loop.call_later(self.header_s, self._headers_late)
        if self._reading and self._body is None:
            self._body = self.loop.call_later(self.body_s, self._body_late)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._begun = True

    def on_headers_complete(self) -> None:
        self._disarm()
        before = self.cycle
        super().on_headers_complete()
        self._reading = self.cycle is not before  # a request for the app (not an upgrade)

    def on_message_complete(self) -> None:
        self._disarm_body()
        super().on_message_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self._disarm_body()
        if self._idle_timer is not None:
            self._idle_timer.cancel()
        super().connection_lost(exc)

    def on_response_complete(self) -> None:
        """uvicorn's, but for its keep-alive deadline: one timer a connection, moved on when
        it fires while the connection was busy, not one armed and cancelled per response."""
        self.server_state.total_requests += 1
        if self.transport.is_closing():
            return
        self._unset_keepalive_if_required()
        self.flow.resume_reading()
        if self.pipeline:
            cycle, app = self.pipeline.pop()
            self._start_asgi_task(cycle, app)
            return
        self._idle_since = self.loop.time()
        if self._idle_timer is None:
            self._idle_timer = self.loop.call_later(self.timeout_keep_alive, self._idle_late)

    def _unset_keepalive_if_required(self) -> None:
        """The connection is busy: bytes arrived, or a response ended (uvicorn's call)."""
        super()._unset_keepalive_if_required()
        self._idle_since = None

    def _idle_late(self) -> None:
        self._idle_timer = None
        if self._idle_since is None or self.transport.is_closing():
            return  # busy: the next response's end arms it again
        left = self._idle_since + self.timeout_keep_alive - self.loop.time()
        if left > 0:
            self._idle_timer = self.loop.call_later(left, self._idle_late)
        else:
            self.timeout_keep_alive_handler()

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer, self._begun = None, False

    def _disarm_body(self) -> None:
        if self._body is not None:
            self._body.cancel()
        self._body, self._reading = None, False

    def _headers_late(self) -> None:
        self._timer = None
        if self.transport.is_closing():
            return
        if self._begun:
            message = _late("headers", "header_timeout_s", self.header_s)
            client_errors.transport(CODE, message, "http", client_errors.Who.at(self.client))
            if self.cycle is None or self.cycle.response_complete:  # none being written
                self.transport.write(_raw_408(orjson.dumps(error_document(CODE, message))))
        self.transport.close()

    def _body_late(self) -> None:
        self._body = None
        cycle = self.cycle
        if self.transport.is_closing() or cycle is None:
            return
        message = _late("body", "body_timeout_s", self.body_s)
        client_errors.transport(CODE, message, "http", client_errors.Who.at(self.client))
        if not cycle.response_started:
            self.transport.write(_raw_408(_timed_out(cycle.scope["path"], message)))
        cycle.disconnected = True  # the app reads that its client left; its sends drop
        cycle.message_event.set()
        self.transport.close()


def _timed_out(path: str, message: str) -> bytes:
    """The 408's body, in the shape of the endpoint's errors."""
    if path == GRAPHQL:
        return orjson.dumps({"errors": [{"message": message, "extensions": {"code": CODE}}]})
    return orjson.dumps(error_document(CODE, message))


def _late(part: str, setting: str, timeout_s: float) -> str:
    return (
        f"the request's {part} did not arrive within {setting} ({timeout_s:g} s): "
        "the connection is closed"
    )


def _raw_408(body: bytes) -> bytes:
    head = (
        "HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode() + body
