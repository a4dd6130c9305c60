"""The hop's pool against a real loopback server: a reply, a connection kept and reused; a
call whose reply comes too late (TimeoutError) told apart from one that found no free
connection in time (PoolFull), both within the call's one timeout; a GET with its query and
a timeout of its own (a long poll), over the transport that puts the pool's failures in our
words."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from contracts.settings import Settings
from gateway.wire.hop import HopPool, HopTransport, PoolFull
from gateway.wire.peer_errors import PeerUnreachable
from gateway.wire.transport import Reply

TIMEOUT_S = 0.5


@asynccontextmanager
async def peer(delay_s: float = 0.0) -> AsyncIterator[tuple[str, list[int]]]:
    """A server answering each POST with its body after `delay_s`; the connections it was
    opened on."""
    opened: list[int] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        opened.append(1)
        try:
            while head := await reader.readuntil(b"\r\n\r\n"):
                lines = head.split(b"\r\n")
                length = next(
                    (int(line.split(b":")[1]) for line in lines
                     if line.lower().startswith(b"content-length:")),
                    0,
                )  # fmt: skip
                # a POST's body, or a GET's request line
                body = await reader.readexactly(length) if length else lines[0]
                await asyncio.sleep(delay_s)
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        yield f"http://127.0.0.1:{port}/internal/query", opened


def test_replies_come_back_on_one_kept_connection() -> None:
    asyncio.run(_replies_on_one_connection())


async def _replies_on_one_connection() -> None:
    pool = HopPool(connections=2, keep_alive_s=30, timeout_s=TIMEOUT_S)
    async with peer() as (url, opened):
        for number in range(5):
            body = b'{"n": %d}' % number
            assert await pool.request("POST", url, body, {"x-secret": "s"}) == (200, body)
        assert len(opened) == 1
        await pool.aclose()


def test_a_late_reply_times_out_and_a_full_pool_says_so() -> None:
    asyncio.run(_late_and_full())


async def _late_and_full() -> None:
    """One connection, replies 0.2 s late, a 0.5 s timeout: of four calls made at once, two
    are answered, the third takes the connection at 0.4 s and times out waiting for its
    reply, the fourth never has the connection."""
    pool = HopPool(connections=1, keep_alive_s=30, timeout_s=TIMEOUT_S)
    async with peer(delay_s=0.2) as (url, _):
        started = time.monotonic()
        calls = [pool.request("POST", url, b"[%d]" % n, {}) for n in range(4)]
        answered = await asyncio.gather(*calls, return_exceptions=True)
        assert time.monotonic() - started < TIMEOUT_S + 0.3
        assert answered[:2] == [(200, b"[0]"), (200, b"[1]")]
        late, full = answered[2:]
        assert isinstance(late, TimeoutError) and not isinstance(late, PoolFull)
        assert isinstance(full, PoolFull)
        # the slot was given back
        assert await pool.request("POST", url, b"[4]", {}) == (200, b"[4]")
        await pool.aclose()


def test_a_get_carries_its_query_and_waits_its_own_timeout() -> None:
    asyncio.run(_get())


async def _get() -> None:
    """A long poll: its query on the request line, no body, a timeout longer than the pool's
    (the peer answers late on purpose); too short a one is a hung peer in our words."""
    settings = Settings(internal_timeout_s=0.1, peer_connections=1)
    transport = HopTransport(settings)
    async with peer(delay_s=0.3) as (url, _):
        polled = f"{url.removesuffix('/internal/query')}/internal/status?changes=3&wait=0.3"
        reply = await transport.get(polled, {}, timeout=1.0)
        assert reply == Reply(200, b"GET /internal/status?changes=3&wait=0.3 HTTP/1.1")
        with pytest.raises(PeerUnreachable) as raised:
            await transport.get(polled, {})  # the pool's 0.1 s
        assert raised.value.hung
    await transport.aclose()
