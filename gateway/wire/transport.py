"""The one protocol every way of reaching a peer speaks, as httpx's transports do: pooled
HTTP/1.1 connections (gateway/wire/hop.py), and a handler in the same process for tests
(gateway/wire/mock.py).

A transport sends what it is given and returns the reply whatever its status; it raises only
the PeerError family (gateway/wire/peer_errors.py). Headers, statuses and their meaning are the
client's (gateway/wire/peers.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes


class Transport(Protocol):
    async def post(self, url: str, body: bytes, headers: Mapping[str, str]) -> Reply: ...

    async def get(
        self, url: str, headers: Mapping[str, str], timeout: float | None = None
    ) -> Reply: ...

    async def aclose(self) -> None: ...
