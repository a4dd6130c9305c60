"""What this node knows of its peers: liveness, and each peer's snapshot positions.

Peers are polled every `health_interval_s`; a failed call marks a peer down at once and a
successful one marks it up. A peer down because a call timed out (hung, overloaded) is
skipped until a poll or a call sees it again, so it costs at most one timeout per request.
A peer down because it refused or reset a connection fails fast: the router still asks it
when no other replica is left, so a stale belief never fails a partition on its own.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson

from gateway.config import Project
from gateway.protocol import PEER_ERRORS, SECRET_HEADER

log = logging.getLogger(__name__)
# A poll that failed: the call, or an answer that is not a status (ValueError, KeyError...).
_BAD_POLL: tuple[type[Exception], ...] = (*PEER_ERRORS, ValueError, KeyError, TypeError)


@dataclass
class Peer:
    id: str
    alive: bool = True  # optimistic until a call or a poll says otherwise
    hung: bool = False  # down because a call timed out: asking again costs a whole timeout
    seen_ms: int = 0
    partitions: dict[int, dict[str, Any]] = field(default_factory=dict)  # p -> version, offsets


class Membership:
    def __init__(self, project: Project, node_id: str, client: httpx.AsyncClient) -> None:
        self.project = project
        self.node_id = node_id
        self.client = client
        self.peers = {n.id: Peer(n.id) for n in project.cluster.nodes if n.id != node_id}

    def alive(self, node_id: str) -> bool:
        peer = self.peers.get(node_id)
        return peer is None or peer.alive

    def cheap_to_ask(self, node_id: str) -> bool:
        """Alive, or down for a fast failure (refused, reset) rather than a timeout."""
        peer = self.peers.get(node_id)
        return peer is None or not peer.hung

    def mark_down(self, node_id: str, error: Exception) -> None:
        peer = self.peers.get(node_id)
        if peer is None or isinstance(error, httpx.PoolTimeout):
            return  # no connection of our own was free: nothing is known of the peer
        peer.hung = isinstance(error, httpx.TimeoutException)
        if peer.alive:
            # A peer never seen yet is most likely still starting: not worth a warning.
            level = logging.WARNING if peer.seen_ms else logging.INFO
            log.log(level, "peer %s is down: %r", node_id, error)
            peer.alive = False

    def mark_up(self, node_id: str) -> None:
        peer = self.peers.get(node_id)
        if peer is not None and not peer.alive:
            log.info("peer %s is back", node_id)
            peer.alive, peer.hung = True, False

    def offsets(self, node_id: str, partition: int) -> dict[str, int] | None:
        peer = self.peers.get(node_id)
        if peer is None or partition not in peer.partitions:
            return None
        return peer.partitions[partition]["offsets"]

    async def poll_forever(self) -> None:
        while True:
            try:
                await self.poll_once()
            except Exception:  # a frozen view of the peers is worse than one lost poll
                log.exception("polling the peers failed")
            await asyncio.sleep(self.project.settings.health_interval_s)

    async def poll_once(self) -> None:
        await asyncio.gather(*(self._poll(peer) for peer in self.peers.values()))

    async def _poll(self, peer: Peer) -> None:
        node = self.project.cluster.node(peer.id)
        try:
            response = await self.client.get(
                f"{node.url}/internal/status",
                headers={SECRET_HEADER: self.project.cluster.secret},
                timeout=self.project.settings.internal_timeout_s,
            )
            response.raise_for_status()
            status = orjson.loads(response.content)
            partitions = {int(p): s for p, s in status["partitions"].items()}
        except _BAD_POLL as exc:
            self.mark_down(peer.id, exc)
            return
        peer.partitions = partitions
        peer.seen_ms = int(time.time() * 1000)
        self.mark_up(peer.id)
