"""What this node knows of its peers: liveness, and each peer's snapshot positions.

Each peer's status is watched by a blocking poll: the peer answers as soon as it switches a
version (gateway/storage/delivery/switches.py), and after `health_interval_s` when nothing
changed. So a node hears of a peer's switch within one round trip, and of its liveness at
least that often.
The partitions a peer switched are reported to this node's Switches. A failed call marks
a peer down at once and a successful one marks it up; listeners (the live subscriptions,
resolvers/transport/live.py) hear of a peer that is back, which is not a switch.

A peer down because a call timed out (hung, overloaded) is skipped until a poll or a call
sees it again, so it costs at most one timeout per request. A peer down because it refused
or reset a connection fails fast: the router still asks it when no other replica is left,
so a stale belief never fails a partition on its own.

A timeout is held against a peer only when this node ran throughout the call. After a stall
of its own (stopped, swapped out, a long pause: gateway/runtime/stalls.py) a node's pending
calls time out the moment it resumes, their replies unread; such a timeout leaves the
peer as it was believed, and the call's partitions fail over as after any failed call.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from contracts.clock import now_ms
from contracts.topology import Topology
from gateway.cluster.status import NodeStatus, PartitionState
from gateway.model.topology_view import TopologyView
from gateway.runtime.stalls import Stalls
from gateway.storage.delivery.node_core import NodeCore
from gateway.wire.peer_errors import PeerError, PeerUnreachable, PoolExhausted
from gateway.wire.protocol import PROTOCOL, ProtocolError

log = logging.getLogger(__name__)


@dataclass
class Peer:
    id: str
    alive: bool = True  # optimistic until a call or a poll says otherwise
    hung: bool = False  # down because a call timed out: asking again costs a whole timeout
    seen_ms: int = 0
    changes: int = -1  # the peer's switch counter as last seen; -1: answer at once
    partitions: dict[int, PartitionState] = field(default_factory=dict)
    runs: tuple[str, str] = ("", "")  # its release and schema version, as it last said
    stores: frozenset[str] | None = None  # the stores it has built, as it last said
    pending: list[str] | None = None  # those it declares and has not built yet


class Membership:
    def __init__(self, core: NodeCore, stalls: Stalls | None = None) -> None:
        self.project = project = core.project
        self.node_id = node_id = core.node_id
        self.client = core.peers
        self.switches = core.switches
        self.stalls = stalls or Stalls()  # one not watching knows of no stall
        self.peers = {n.id: Peer(n.id) for n in project.cluster.nodes if n.id != node_id}
        self.topology: TopologyView | None = None
        self._watching = False
        self._watches: dict[str, asyncio.Task[None]] = {}
        self._back: list[Callable[[str], None]] = []

    def follow(self, topology: TopologyView) -> None:
        """Watch the members of `topology` from now on, as they come and go."""
        self.topology = topology
        self._reconcile(topology.current)
        topology.listen(lambda before, after: self._reconcile(after))

    def _reconcile(self, topology: Topology) -> None:
        members = set(topology.nodes()) - {self.node_id}
        for gone in set(self.peers) - members:
            del self.peers[gone]
            task = self._watches.pop(gone, None)
            if task is not None:
                task.cancel()
        for new in sorted(members - set(self.peers)):
            peer = self.peers[new] = Peer(new)
            if self._watching:
                self._watches[new] = asyncio.create_task(self._watch(peer))

    def when_back(self, listener: Callable[[str], None]) -> None:
        """Call `listener` with a peer's id whenever a peer believed down is up again."""
        self._back.append(listener)

    def alive(self, node_id: str) -> bool:
        peer = self.peers.get(node_id)
        return peer is None or peer.alive

    def beliefs(self) -> dict[str, bool]:
        """Each peer: alive or not, as this node believes."""
        return {peer.id: peer.alive for peer in self.peers.values()}

    def cheap_to_ask(self, node_id: str) -> bool:
        """Alive, or down for a fast failure (refused, reset) rather than a timeout."""
        peer = self.peers.get(node_id)
        return peer is None or not peer.hung

    def mark_down(self, node_id: str, error: PeerError | ProtocolError, started: float) -> None:
        """The call made at `started` (time.monotonic()) failed with `error`."""
        peer = self.peers.get(node_id)
        if peer is None or isinstance(error, PoolExhausted):
            return  # no connection of our own was free: nothing is known of the peer
        hung = isinstance(error, PeerUnreachable) and error.hung
        if hung and (stalled := self.stalls.since(started)):
            log.info(
                "%s timed out as this node stalled %.2f s: not held against it", node_id, stalled
            )
            return
        peer.hung = hung
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
            for listener in self._back:
                listener(node_id)

    def state(self, node_id: str, partition: int) -> PartitionState | None:
        peer = self.peers.get(node_id)
        return None if peer is None else peer.partitions.get(partition)

    def releases(self) -> dict[str, tuple[str, str]]:
        """Each peer's release and schema, as it last said ("" when it has not)."""
        return {peer.id: peer.runs for peer in self.peers.values()}

    def pending(self) -> dict[str, list[str] | None]:
        """Each peer's stores declared and not built yet, as it last said (None: unsaid)."""
        return {peer.id: peer.pending for peer in self.peers.values()}

    def built(self) -> list[frozenset[str] | None]:
        """The stores each peer has built, as it last said (None: it said nothing yet)."""
        return [peer.stores for peer in self.peers.values()]

    def offsets(self, node_id: str, partition: int) -> dict[str, int] | None:
        state = self.state(node_id, partition)
        return None if state is None else state.offsets

    async def watch_forever(self) -> None:
        """Watch every peer, those that join later too, until cancelled."""
        self._watching = True
        for peer in list(self.peers.values()):
            self._watches[peer.id] = asyncio.create_task(self._watch(peer))
        try:
            await asyncio.Event().wait()
        finally:
            for task in self._watches.values():
                task.cancel()
            self._watches.clear()

    async def poll_once(self) -> None:
        """Every peer's status, now."""
        await asyncio.gather(*(self._poll(peer, wait=False) for peer in self.peers.values()))

    def _url(self, node_id: str) -> str:
        if self.topology is None:
            return self.project.cluster.node(node_id).url
        return self.topology.current.url(node_id)

    async def _watch(self, peer: Peer) -> None:
        while True:
            try:
                answered = await self._poll(peer, wait=True)
            except Exception:  # a frozen view of the peers is worse than one lost poll
                log.exception("polling %s failed", peer.id)
                answered = False
            if not answered:
                await asyncio.sleep(self.project.settings.health_interval_s)

    async def _poll(self, peer: Peer, wait: bool) -> bool:
        """Ask the peer's status (when `wait`, once it differs from what was seen last);
        False when it did not answer."""
        interval = self.project.settings.health_interval_s
        url = f"{self._url(peer.id)}/internal/status"
        if wait:
            url += f"?changes={peer.changes}&wait={interval}"
        timeout = self.project.settings.internal_timeout_s + (interval if wait else 0)
        started = time.monotonic()
        try:
            status = NodeStatus.from_json(await self.client.get(url, timeout) or b"")
        except (PeerError, ProtocolError) as exc:  # no status from it: down for routing
            self.mark_down(peer.id, exc, started)
            peer.changes = -1
            return False
        if not status.reads("protocol", PROTOCOL):  # a release that cannot read our calls
            refused = ProtocolError(f"it reads protocol {status.formats.get('protocol')}")
            self.mark_down(peer.id, refused, started)
            peer.changes = -1
            return False
        switched = [
            p
            for p, state in status.partitions.items()
            if (seen := peer.partitions.get(p)) is None or seen.version != state.version
        ]
        peer.partitions, peer.changes = status.partitions, status.changes
        peer.runs = (status.release, status.schema)
        peer.stores = None if status.stores is None else frozenset(status.stores)
        peer.pending = status.pending
        peer.seen_ms = now_ms()
        self.mark_up(peer.id)
        self.switches.observed(switched)
        return True
