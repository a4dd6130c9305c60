"""The general transport: every call through httpx, its errors translated once."""

from __future__ import annotations

import ssl
import traceback
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

import httpx

from contracts.settings import Settings
from gateway.wire.peer_errors import PeerUnreachable, PoolExhausted
from gateway.wire.transport import Reply

# Modules of the transport stack: an AttributeError raised inside them is a connection that
# a peer reset as it was made (uvloop hands anyio a transport without a socket,
# MagicStack/uvloop#560), not a bug of ours.
_TRANSPORT_MODULES = ("/anyio/", "/uvloop/", "/httpcore/")


class HttpxTransport:
    def __init__(self, settings: Settings, tls: ssl.SSLContext | None = None) -> None:
        self._client = httpx.AsyncClient(
            verify=tls or True,
            limits=httpx.Limits(
                max_connections=settings.peer_connections,
                max_keepalive_connections=settings.peer_connections // 2,
                keepalive_expiry=settings.peer_pool_expiry_s,
            ),
            timeout=settings.internal_timeout_s,
        )

    async def post(self, url: str, body: bytes, headers: Mapping[str, str]) -> Reply:
        async with _translated():
            response = await self._client.post(url, content=body, headers=headers)
            return Reply(response.status_code, response.content)

    async def get(
        self, url: str, headers: Mapping[str, str], timeout: float | None = None
    ) -> Reply:
        async with _translated():
            response = await self._client.get(
                url, headers=headers, timeout=timeout or httpx.USE_CLIENT_DEFAULT
            )
            return Reply(response.status_code, response.content)

    async def aclose(self) -> None:
        await self._client.aclose()


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
