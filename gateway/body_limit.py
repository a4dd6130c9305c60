"""A cap on the size of a GraphQL request body, enforced before the body is read whole.

A body over `max_request_bytes` is refused with HTTP 413 and a GraphQL error coded
REQUEST_TOO_LARGE, known from Content-Length or as soon as the chunks received pass the cap.
The node never buffers more than the cap of one request: the rest is read and dropped
before the answer, so the client is not reset while it is still sending.
"""

from __future__ import annotations

import orjson
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class _TooLarge(Exception):
    pass


class BodyLimit:
    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        length = headers.get("content-length", "")
        if length.isdigit() and int(length) > self.limit:
            if "100-continue" not in headers.get("expect", "").lower():
                await _drain(receive)  # else the client waits: asking for it would invite it
            await self._refuse(send)
            return
        received = 0
        more = True

        async def counted() -> Message:
            nonlocal received, more
            message = await receive()
            received += len(message.get("body", b""))
            more = message["type"] == "http.request" and message.get("more_body", False)
            if received > self.limit:
                raise _TooLarge
            return message

        try:
            await self.app(scope, counted, send)
        except _TooLarge:  # raised while the body is read, before any response is sent
            if more:
                await _drain(receive)
            await self._refuse(send)

    async def _refuse(self, send: Send) -> None:
        text = f"the request body is over max_request_bytes ({self.limit} bytes)"
        body = orjson.dumps(
            {"errors": [{"message": text, "extensions": {"code": "REQUEST_TOO_LARGE"}}]}
        )
        headers = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": 413, "headers": headers})
        await send({"type": "http.response.body", "body": body})


async def _drain(receive: Receive) -> None:
    """Read the rest of the body and drop it."""
    while True:
        message = await receive()
        if message["type"] != "http.request" or not message.get("more_body", False):
            return
