"""Read deadlines: a slow client holds a node's connection for a bounded time (slowloris).

A request's headers must be whole within settings.header_timeout_s of its first byte (of the
connection, for its first request), its body within settings.body_timeout_s of its headers.
uvicorn keeps neither: its timeout_keep_alive runs only between requests and every byte
received resets it, and an ASGI app is called once the headers are whole. So the header
deadline is kept by uvicorn's HTTP protocol, subclassed (`header_deadline`), and the body's
by an ASGI layer (`BodyDeadline`). Either answers 408 REQUEST_TIMEOUT, logs a line naming
the client and closes the connection; a connection that sent nothing is closed without a
word, as an idle one is (browsers open some ahead of need).
"""

from __future__ import annotations

import asyncio
import contextlib

import orjson
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from contracts.errors import error_document
from resolvers.execution import client_errors

CODE = "REQUEST_TIMEOUT"
GRAPHQL = "/graphql"  # its errors have GraphQL's shape; the other endpoints', {"error": ...}


def header_deadline(timeout_s: float) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol, closing a connection whose request headers are not
    whole within `timeout_s` (uvicorn.run's `http`)."""

    class HeaderDeadline(HttpToolsProtocol):
        _timer: asyncio.TimerHandle | None = None
        _begun = False  # a byte of the request under way arrived

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._timer = self.loop.call_later(timeout_s, self._expired)

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._begun = True
            if self._timer is None:  # a request after the first: from its first byte
                self._timer = self.loop.call_later(timeout_s, self._expired)

        def on_headers_complete(self) -> None:
            self._disarm()
            super().on_headers_complete()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _disarm(self) -> None:
            if self._timer is not None:
                self._timer.cancel()
            self._timer, self._begun = None, False

        def _expired(self) -> None:
            self._timer = None
            if self.transport.is_closing():
                return
            if self._begun:
                message = _late("headers", "header_timeout_s", timeout_s)
                client_errors.transport(CODE, message, "http", client_errors.Who.at(self.client))
                if self.cycle is None or self.cycle.response_complete:  # none being written
                    self.transport.write(_raw_408(orjson.dumps(error_document(CODE, message))))
            self.transport.close()

    return HeaderDeadline


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


class _BodyTimedOut(asyncio.CancelledError):
    """Raised out of receive() at the body deadline: the app unwinds as it does when its
    client leaves, and no handler of Exception takes it for an error of its own."""


class BodyDeadline:
    """An HTTP request's body must arrive whole within `timeout_s` of its headers."""

    def __init__(self, app: ASGIApp, timeout_s: float) -> None:
        self.app = app
        self.timeout_s = timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        deadline = asyncio.get_running_loop().time() + self.timeout_s
        body = _Body(receive, send, deadline)
        with contextlib.suppress(_BodyTimedOut):
            await self.app(scope, body.receive, body.send)
        if body.timed_out and not body.answered:
            await self._answer(scope, receive, send)

    async def _answer(self, scope: Scope, receive: Receive, send: Send) -> None:
        """408, and the connection closed after it."""
        message = _late("body", "body_timeout_s", self.timeout_s)
        client_errors.transport(CODE, message, "http", client_errors.Who.at(scope.get("client")))
        if scope["path"] == GRAPHQL:
            content: object = {"errors": [{"message": message, "extensions": {"code": CODE}}]}
        else:
            content = error_document(CODE, message)
        response = JSONResponse(content, 408, headers={"connection": "close"})
        await response(scope, receive, send)


class _Body:
    """An app's receive and send, the first held to the deadline until the body is whole."""

    def __init__(self, receive: Receive, send: Send, deadline: float) -> None:
        self._receive = receive
        self._send = send
        self.deadline = deadline
        self.whole = False
        self.timed_out = False
        self.answered = False  # the app began its response

    async def receive(self) -> Message:
        if self.whole:
            return await self._receive()
        try:
            async with asyncio.timeout_at(self.deadline):
                message = await self._receive()
        except TimeoutError:
            self.timed_out = True
            raise _BodyTimedOut from None
        self.whole = message["type"] != "http.request" or not message.get("more_body", False)
        return message

    async def send(self, message: Message) -> None:
        if self.timed_out:
            return  # what the app still says: the 408 answers instead
        self.answered = True
        await self._send(message)
