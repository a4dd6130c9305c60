"""A transport that hands every call to a function in the same process, as httpx's
MockTransport does: routing, health and delivery tested without sockets. The handler may
raise the PeerError family to play a peer that is down, hung or refusing."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass

from gateway.wire.transport import CHUNK_BYTES, Reply, Streamed


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

    @asynccontextmanager
    async def stream(self, url: str, headers: Mapping[str, str]) -> AsyncIterator[Streamed]:
        reply = await self._handle(Call("GET", url, dict(headers)))
        yield Streamed(reply.status, _chunks(reply.body))

    async def aclose(self) -> None:
        return None

    async def _handle(self, call: Call) -> Reply:
        self.calls.append(call)
        reply = self.handler(call)
        return await reply if inspect.isawaitable(reply) else reply


async def _chunks(body: bytes) -> AsyncIterator[bytes]:
    for start in range(0, len(body), CHUNK_BYTES):
        yield body[start : start + CHUNK_BYTES]
