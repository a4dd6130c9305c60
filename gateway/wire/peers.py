"""Calls to other nodes and to the snapshot store, over one transport
(gateway/wire/transport.py): every call carries the cluster secret, and a reply's status
becomes our vocabulary (gateway/wire/peer_errors.py) here, once.

A call either returns the body of a 2xx reply (a query: its decoded answers) or raises a
PeerError (a query whose reply is not the protocol: a ProtocolError).
"""

from __future__ import annotations

import ssl

from contracts import tracing
from contracts.cluster_secret import secret_headers
from contracts.settings import Settings
from gateway.model.queries import Answer, SubQuery, keys_of
from gateway.runtime.lanes import offload
from gateway.wire.coalescing import Coalescing
from gateway.wire.hop import HopTransport
from gateway.wire.peer_errors import PeerRefused
from gateway.wire.protocol import PROTOCOL, PROTOCOL_HEADER, decode_answers, encode_request
from gateway.wire.transport import Reply, Transport

NOT_FOUND = 404


def pooled(settings: Settings, tls: ssl.SSLContext | None = None) -> Transport:
    """A node's transport (gateway/wire/hop.py); `tls` checks https peers
    (contracts/tls.py)."""
    return HopTransport(settings, tls)


class PeerClient:
    def __init__(self, secret: str, transport: Transport) -> None:
        self._headers = {**secret_headers(secret), PROTOCOL_HEADER: str(PROTOCOL)}
        self.transport = transport
        self._coalescing = Coalescing(self._query)

    async def post(self, url: str, body: bytes, authorization: str | None = None) -> bytes:
        """POST an idempotent internal call, with the caller's authorization when given."""
        headers = {**self._headers, "content-type": "application/json"}
        if authorization:
            headers["authorization"] = authorization
        tracing.inject(headers)  # the internal call's span, when tracing
        return _body(await self.transport.post(url, body, headers))

    async def query(
        self, url: str, subqueries: list[SubQuery], authorization: str | None = None
    ) -> list[Answer]:
        """A node's answers to sub-queries over the internal protocol (gateway/wire/protocol.py),
        in one call with those other requests ask of it at once (gateway/wire/coalescing.py),
        but while tracing: a call carries one request's trace."""
        if tracing.on():
            return await self._query(url, subqueries, authorization)
        return await self._coalescing.query(url, subqueries, authorization)

    async def _query(
        self, url: str, subqueries: list[SubQuery], authorization: str | None
    ) -> list[Answer]:
        """One call, encoded and decoded in the request's lane (a bulk request's on the bulk
        thread)."""
        keys = keys_of(subqueries)
        request = await offload(encode_request, subqueries, items=keys)
        reply = await self.post(url, request, authorization)
        return await offload(decode_answers, reply, items=keys)

    async def get(self, url: str, timeout: float | None = None) -> bytes | None:
        """GET a document (within `timeout` seconds when given, else the internal
        timeout); None when it does not exist (404)."""
        reply = await self.transport.get(url, self._headers, timeout)
        return None if reply.status == NOT_FOUND else _body(reply)

    async def aclose(self) -> None:
        await self.transport.aclose()


def _body(reply: Reply) -> bytes:
    if not 200 <= reply.status < 300:
        raise PeerRefused(reply.status)
    return reply.body
