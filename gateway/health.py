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

from contracts.project import Project
from gateway.peers import PeerClient, PeerError, PeerUnreachable, PoolExhausted
from gateway.protocol import ProtocolError
from gateway.status import NodeStatus, PartitionState

log = logging.getLogger(__name__)


@dataclass
class Peer:
    id: str
    alive: bool = True  # optimistic until a call or a poll says otherwise
    hung: bool = False  # down because a call timed out: asking again costs a whole timeout
    seen_ms: int = 0
    partitions: dict[int, PartitionState] = field(default_factory=dict)


class Membership:
    def __init__(self, project: Project, node_id: str, peers: PeerClient) -> None:
        self.project = project
        self.node_id = node_id
        self.client = peers
        self.peers = {n.id: Peer(n.id) for n in project.cluster.nodes if n.id != node_id}

    def alive(self, node_id: str) -> bool:
        peer = self.peers.get(node_id)
        return peer is None or peer.alive

    def cheap_to_ask(self, node_id: str) -> bool:
        """Alive, or down for a fast failure (refused, reset) rather than a timeout."""
        peer = self.peers.get(node_id)
        return peer is None or not peer.hung

    def mark_down(self, node_id: str, error: PeerError | ProtocolError) -> None:
        peer = self.peers.get(node_id)
        if peer is None or isinstance(error, PoolExhausted):
            return  # no connection of our own was free: nothing is known of the peer
        peer.hung = isinstance(error, PeerUnreachable) and error.hung
        if peer.alive:
            # A peer never seen yet is most likely still starting: not worth a warning.
            level = logging.WARNING if peer.seen_ms else logging.INFO
            log.log(level, "peer %s is down: %s", node_id, error)
            peer.alive = False

    def mark_up(self, node_id: str) -> None:
        peer = self.peers.get(node_id)
        if peer is not None and not peer.alive:
            log.info("peer %s is back", node_id)
            peer.alive, peer.hung = True, False

    def state(self, node_id: str, partition: int) -> PartitionState | None:
        peer = self.peers.get(node_id)
        return None if peer is None else peer.partitions.get(partition)

    def offsets(self, node_id: str, partition: int) -> dict[str, int] | None:
        state = self.state(node_id, partition)
        return None if state is None else state.offsets

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
        url = f"{self.project.cluster.node(peer.id).url}/internal/status"
        try:
            status = NodeStatus.from_json(await self.client.get(url) or b"")
        except (PeerError, ProtocolError) as exc:  # no status from it: down for routing
            self.mark_down(peer.id, exc)
            return
        peer.partitions = status.partitions
        peer.seen_ms = int(time.time() * 1000)
        self.mark_up(peer.id)
