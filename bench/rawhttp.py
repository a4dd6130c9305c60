"""A minimal HTTP/1.1 keep-alive client on asyncio streams, for the load generator.

httpx costs about 1 ms of client CPU per request on these machines, enough to make the client
the bottleneck; this client costs a few tens of microseconds. It speaks only what the
benchmark needs: POST and GET with a body of known length, one request in flight per
connection; replies are read by the node's own parser (gateway/wire/hop.py).
"""

from __future__ import annotations

import asyncio
import ssl
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType
from urllib.parse import urlsplit

from gateway.wire.hop import ClosedByPeer, read_reply


@dataclass(frozen=True)
class Reply:
    status_code: int
    content: bytes

    @property
    def text(self) -> str:
        return self.content.decode(errors="replace")


class Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str):
        self.reader = reader
        self.writer = writer
        self.host = host

    @classmethod
    async def open(cls, host: str, port: int, tls: ssl.SSLContext | None = None) -> Connection:
        reader, writer = await asyncio.open_connection(
            host, port, limit=2**24, ssl=tls, server_hostname=host if tls else None
        )
        return cls(reader, writer, f"{host}:{port}")

    async def request(
        self,
        method: str,
        target: str,
        body: bytes = b"",
        content_type: str = "application/json",
        headers: Mapping[str, str] | None = None,
    ) -> tuple[int, bytes]:
        more = "".join(f"{name}: {value}\r\n" for name, value in (headers or {}).items())
        head = (
            f"{method} {target} HTTP/1.1\r\nhost: {self.host}\r\n{more}"
            f"content-type: {content_type}\r\ncontent-length: {len(body)}\r\n\r\n"
        )
        self.writer.write(head.encode() + body)
        status, reply, _ = await read_reply(self.reader)
        return status, reply

    def close(self) -> None:
        self.writer.close()


class Pool:
    """Keep-alive connections per origin, opened on demand and reused."""

    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        self._idle: dict[tuple[str, int], list[Connection]] = defaultdict(list)
        self.tls = tls  # for https URLs

    async def post(
        self, url: str, content: bytes = b"", headers: Mapping[str, str] | None = None
    ) -> Reply:
        """POST a JSON body (httpx's signature; the content type is always JSON)."""
        return await self.request("POST", url, content, headers)

    async def get(self, url: str) -> Reply:
        return await self.request("GET", url)

    async def request(
        self, method: str, url: str, body: bytes = b"", headers: Mapping[str, str] | None = None
    ) -> Reply:
        parts = urlsplit(url)
        origin = (parts.hostname or "127.0.0.1", parts.port or 80)
        tls = self.tls if parts.scheme == "https" else None
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        idle = self._idle[origin]
        reused = bool(idle)
        connection = idle.pop() if reused else await Connection.open(*origin, tls)
        try:
            answer = await connection.request(method, target, body, headers=headers)
        except (ClosedByPeer, ConnectionResetError, BrokenPipeError):
            connection.close()
            if not reused:
                raise
            # the server closed the idle connection (its keep-alive timeout): once more
            connection = await Connection.open(*origin, tls)
            answer = await connection.request(method, target, body, headers=headers)
        except BaseException:
            connection.close()
            raise
        idle.append(connection)
        return Reply(*answer)

    async def aclose(self) -> None:
        for connections in self._idle.values():
            for connection in connections:
                connection.close()
        self._idle.clear()

    async def __aenter__(self) -> Pool:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
