"""Calls to other nodes and to the snapshot store, and the one place where what went wrong
on the way becomes our own failure vocabulary.

Every call carries the cluster secret. A call either returns the body of a 2xx reply or
raises a PeerError: PeerUnreachable (nothing usable came back: refused, reset, timed out;
`hung` when it timed out), PeerRefused (the peer answered with an error status), or
PoolExhausted (this node had no free connection of its own: nothing is known of the peer).
Nothing else is caught here, so a bug stays a bug.
"""

from __future__ import annotations

import traceback
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx

from contracts.auth import secret_headers
from contracts.settings import Settings
from gateway.wire.hop import HopPool, PoolFull

# Modules of the transport stack: an AttributeError raised inside them is a connection that
# a peer reset as it was made (uvloop hands anyio a transport without a socket,
# MagicStack/uvloop#560), not a bug of ours.
_TRANSPORT_MODULES = ("/anyio/", "/uvloop/", "/httpcore/")


class PeerError(Exception):
    """A call to a peer or the store that did not return a usable reply."""


class PeerUnreachable(PeerError):
    def __init__(self, message: str, hung: bool) -> None:
        super().__init__(message)
        self.hung = hung  # timed out: asking again costs a whole timeout


class PeerRefused(PeerError):
    def __init__(self, status: int) -> None:
        super().__init__(f"answered HTTP {status}")
        self.status = status


class PoolExhausted(PeerError):
    """No connection of this node's pool was free in time."""


class PeerClient:
    def __init__(self, secret: str, settings: Settings) -> None:
        self._headers = secret_headers(secret)
        self._hop = HopPool(
            settings.peer_connections, settings.peer_pool_expiry_s, settings.internal_timeout_s
        )
        self._client = httpx.AsyncClient(
            limits=httpx.Limits(
                max_connections=settings.peer_connections,
                max_keepalive_connections=settings.peer_connections // 2,
                keepalive_expiry=settings.peer_pool_expiry_s,
            ),
            timeout=settings.internal_timeout_s,
        )

    async def post(self, url: str, body: bytes, authorization: str | None = None) -> bytes:
        """POST an idempotent internal call (the query hop: gateway/wire/hop.py); a pooled
        connection the peer closed as it was reused is retried once on a fresh one."""
        headers = {**self._headers, "content-type": "application/json"}
        if authorization:
            headers["authorization"] = authorization
        try:
            status, reply = await self._hop.post(url, body, headers)
        except PoolFull as exc:
            raise PoolExhausted(str(exc)) from exc
        except TimeoutError as exc:
            raise PeerUnreachable(f"no reply within the timeout: {exc!r}", hung=True) from exc
        except OSError as exc:
            raise PeerUnreachable(repr(exc), hung=False) from exc
        if not 200 <= status < 300:
            raise PeerRefused(status)
        return reply

    async def get(self, url: str, timeout: float | None = None) -> bytes | None:
        """GET a document (within `timeout` seconds when given, else the internal
        timeout); None when it does not exist (404)."""
        async with _translated():
            response = await self._client.get(
                url, headers=self._headers, timeout=timeout or httpx.USE_CLIENT_DEFAULT
            )
            if response.status_code == 404:
                return None
            return _body(response)

    @asynccontextmanager
    async def stream(self, url: str) -> AsyncIterator[AsyncIterator[bytes]]:
        """GET a large file as chunks."""
        async with (
            _translated(),
            self._client.stream("GET", url, headers=self._headers) as response,
        ):
            if not response.is_success:
                raise PeerRefused(response.status_code)
            yield response.aiter_bytes(1 << 20)

    async def aclose(self) -> None:
        await self._hop.aclose()
        await self._client.aclose()


def _body(response: httpx.Response) -> bytes:
    if not response.is_success:
        raise PeerRefused(response.status_code)
    return response.content


@asynccontextmanager
async def _translated() -> AsyncIterator[None]:
    try:
        yield
    except httpx.PoolTimeout as exc:
        raise PoolExhausted(repr(exc)) from exc
    except httpx.TimeoutException as exc:
        raise PeerUnreachable(repr(exc), hung=True) from exc
    except (httpx.TransportError, OSError) as exc:
        raise PeerUnreachable(repr(exc), hung=False) from exc
    except AttributeError as exc:
        if not _raised_in_transport(exc):
            raise
        raise PeerUnreachable(f"connection reset as it was made: {exc!r}", hung=False) from exc


def _raised_in_transport(exc: BaseException) -> bool:
    frames = traceback.extract_tb(exc.__traceback__)
    return bool(frames) and any(m in frames[-1].filename for m in _TRANSPORT_MODULES)
