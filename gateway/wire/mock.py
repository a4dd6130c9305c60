"""A transport that hands every call to a function in the same process, as httpx's
MockTransport does: routing, health and delivery tested without sockets. The handler may
raise the PeerError family to play a peer that is down, hung or refusing."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from gateway.wire.transport import Reply


@dataclass(frozen=True)
class Call:
    method: str
    url: str
    headers: Mapping[str, str]
    body: bytes = b""


Handler = Callable[[Call], Reply | Awaitable[Reply]]


class MockTransport:
    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.calls: list[Call] = []

    async def post(self, url: str, body: bytes, headers: Mapping[str, str]) -> Reply:
        return await self._handle(Call("POST", url, dict(headers), body))

    async def get(
        self, url: str, headers: Mapping[str, str], timeout: float | None = None
    ) -> Reply:
        return await self._handle(Call("GET", url, dict(headers)))

    async def aclose(self) -> None:
        return None

    async def _handle(self, call: Call) -> Reply:
        self.calls.append(call)
        reply = self.handler(call)
        return await reply if inspect.isawaitable(reply) else reply
