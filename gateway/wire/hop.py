"""Calls to peers: HTTP/1.1 over small pools of keep-alive connections per peer, on plain
asyncio streams.

A general client (httpx) spends about a millisecond of CPU per call here, several times the
lookups it carries; this one writes a request in one call and reads the reply with
`read_reply`, the one HTTP/1.1 reply parser (the benchmark's raw client uses it too).
HopTransport sends POSTs (queries, internal calls) over one pool and GETs (a peer's status,
long-polled) over one of their own, so that queries taking every connection never keep a
node from seeing its peers; the pools' own failures (OSError, TimeoutError, PoolFull) become
the PeerError vocabulary there.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections import defaultdict
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from contracts.settings import Settings
from gateway.wire.peer_errors import PeerUnreachable, PoolExhausted
from gateway.wire.transport import Reply

_MAX_HEADER_BYTES = 64 * 1024
DEFAULT_PORTS = {"http": 80, "https": 443}


class PoolFull(Exception):
    """No connection to the peer became free within the timeout."""


class ClosedByPeer(OSError):
    """The peer closed a kept-alive connection before answering (safe to retry once)."""


@dataclass
class _Connection:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    idle_since: float = 0.0

    def close(self) -> None:
        self.writer.close()


@dataclass
class _Origin:
    slots: asyncio.Semaphore
    idle: list[_Connection] = field(default_factory=list)


class HopPool:
    def __init__(
        self,
        connections: int,
        keep_alive_s: float,
        timeout_s: float,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.connections = connections
        self.keep_alive_s = keep_alive_s
        self.timeout_s = timeout_s
        self.tls = tls  # for https URLs: the peer checked against the cluster's CA
        self._origins: dict[tuple[str, str, int], _Origin] = defaultdict(
            lambda: _Origin(asyncio.Semaphore(self.connections))
        )
        self._routes: dict[tuple[str, str], tuple[str, str, int, _Origin, str]] = {}

    async def request(
        self,
        method: str,
        url: str,
        body: bytes,
        headers: Mapping[str, str],
        timeout_s: float | None = None,
    ) -> tuple[int, bytes]:
        """(status, body) of a call, within `timeout_s` (else the pool's); a kept-alive
        connection the peer had closed is retried once on a fresh one."""
        scheme, host, port, origin, first = self._route(method, url)
        head = [first, *(f"{name}: {value}" for name, value in headers.items())]
        if body or method == "POST":
            head.append(f"content-length: {len(body)}")
        request = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body
        taken = False
        try:
            async with asyncio.timeout(timeout_s or self.timeout_s):  # a connection, the reply
                await origin.slots.acquire()
                taken = True
                connection, reused = await self._connection(origin, scheme, host, port)
                try:
                    status, reply, keep = await _exchange(connection, request)
                except (ClosedByPeer, ConnectionResetError, BrokenPipeError):
                    if not reused:
                        raise
                    connection = await self._open(scheme, host, port)
                    status, reply, keep = await _exchange(connection, request)
        except TimeoutError as exc:
            if not taken:
                raise PoolFull(f"no free connection to {host}:{port}") from exc
            raise
        finally:
            if taken:
                origin.slots.release()
        if keep:
            connection.idle_since = time.monotonic()
            origin.idle.append(connection)
        else:
            connection.close()
        return status, reply

    def _route(self, method: str, url: str) -> tuple[str, str, int, _Origin, str]:
        """The URL's scheme, host, port, pool and request line with its host header (kept:
        a node calls the same few URLs)."""
        route = self._routes.get((method, url))
        if route is None:
            parts = urlsplit(url)
            scheme = parts.scheme
            host, port = parts.hostname or "127.0.0.1", parts.port or DEFAULT_PORTS[scheme]
            origin = self._origins[(scheme, host, port)]
            target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            first = f"{method} {target} HTTP/1.1\r\nhost: {host}:{port}"
            route = (scheme, host, port, origin, first)
            if not parts.query:  # a long poll's URL changes with each poll
                self._routes[(method, url)] = route
        return route

    async def _connection(
        self, origin: _Origin, scheme: str, host: str, port: int
    ) -> tuple[_Connection, bool]:
        now = time.monotonic()
        while origin.idle:
            connection = origin.idle.pop()
            if now - connection.idle_since < self.keep_alive_s:
                return connection, True
            connection.close()
        return await self._open(scheme, host, port), False

    async def _open(self, scheme: str, host: str, port: int) -> _Connection:
        if scheme == "https":
            tls = self.tls or ssl.create_default_context()
            reader, writer = await asyncio.open_connection(
                host, port, limit=_MAX_HEADER_BYTES, ssl=tls, server_hostname=host
            )
        else:
            reader, writer = await asyncio.open_connection(host, port, limit=_MAX_HEADER_BYTES)
        return _Connection(reader, writer)

    async def aclose(self) -> None:
        for origin in self._origins.values():
            for connection in origin.idle:
                connection.close()
            origin.idle.clear()


async def _exchange(connection: _Connection, request: bytes) -> tuple[int, bytes, bool]:
    """Send one request and read its reply (status, body, whether the connection stays
    open); the connection is closed on any failure."""
    try:
        connection.writer.write(request)
        return await read_reply(connection.reader)
    except BaseException:
        connection.close()
        raise


async def read_reply(reader: asyncio.StreamReader) -> tuple[int, bytes, bool]:
    """One HTTP/1.1 reply: (status, body, whether the connection stays open), its body sized
    by Content-Length or chunked. ClosedByPeer when the connection was closed before the
    reply began, ConnectionError when the reply is broken."""
    try:
        try:
            head = await reader.readuntil(b"\r\n\r\n")  # its status and headers at once
        except asyncio.IncompleteReadError as exc:
            if exc.partial:
                raise
            raise ClosedByPeer("the peer closed the connection") from exc
        status_line, *lines = head[:-4].split(b"\r\n")
        status = int(status_line.split(b" ", 2)[1])
        length, chunked, keep_alive = -1, False, True
        for line in lines:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"connection" and b"close" in value.lower():
                keep_alive = False
            elif name == b"transfer-encoding" and b"chunked" in value.lower():
                chunked = True
        if chunked:
            return status, await _chunks(reader), keep_alive
        if length < 0:
            raise ConnectionError("a reply without content-length or chunks")
        return status, await reader.readexactly(length), keep_alive
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as exc:
        raise ConnectionError(f"a broken reply: {exc!r}") from exc


async def _chunks(reader: asyncio.StreamReader) -> bytes:
    parts: list[bytes] = []
    while size := int((await reader.readuntil(b"\r\n")).split(b";")[0], 16):
        parts.append(await reader.readexactly(size))
        await reader.readexactly(2)
    await reader.readuntil(b"\r\n")
    return b"".join(parts)


# A node long-polls each peer's status on one connection; a poll that hung (the peer
# froze) holds its connection until its timeout, while the next polls go on others.
POLL_CONNECTIONS = 4


class HopTransport:
    """POSTs over the query pool, GETs over the polls' pool: every call to a peer."""

    def __init__(self, settings: Settings, tls: ssl.SSLContext | None = None) -> None:
        def pool(connections: int) -> HopPool:
            return HopPool(
                connections, settings.peer_pool_expiry_s, settings.internal_timeout_s, tls
            )

        self._queries = pool(settings.peer_connections)
        self._polls = pool(POLL_CONNECTIONS)

    async def post(self, url: str, body: bytes, headers: Mapping[str, str]) -> Reply:
        return await _translated(self._queries.request("POST", url, body, headers))

    async def get(
        self, url: str, headers: Mapping[str, str], timeout: float | None = None
    ) -> Reply:
        return await _translated(self._polls.request("GET", url, b"", headers, timeout))

    async def aclose(self) -> None:
        await self._queries.aclose()
        await self._polls.aclose()


async def _translated(call: Awaitable[tuple[int, bytes]]) -> Reply:
    """The call's reply; the pool's failures in the PeerError vocabulary."""
    try:
        status, reply = await call
    except PoolFull as exc:
        raise PoolExhausted(str(exc)) from exc
    except TimeoutError as exc:
        raise PeerUnreachable(f"no reply within the timeout: {exc!r}", hung=True) from exc
    except OSError as exc:
        raise PeerUnreachable(repr(exc), hung=False) from exc
    return Reply(status, reply)
