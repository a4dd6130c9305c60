"""A node's parts, built for the role its process plays (gateway/workers/roles.py): the whole
node alone, the keeper of its worker processes, or one of the keeper's followers. GatewayNode
takes the parts as they come, as httpx's Client takes a transport instead of a mode flag:
which catalog, topology, coordinator and delivery a node has, and what its role adds to its
start, stop and metrics (its Duties), is decided here, once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Protocol

from contracts.coordination import Coordination, Member
from contracts.manifest import Built
from contracts.placement import Assignment, Replica
from contracts.project import Project
from contracts.topology import Topology
from gateway.cluster.coordinator import (
    Coordinator,
    ElasticCoordinator,
    StaticCoordinator,
    coordinator_timeout,
)
from gateway.cluster.metrics import NodeMetrics, summed
from gateway.model.topology_view import TopologyView
from gateway.storage.catalog.snapshots import SnapshotCatalog
from gateway.storage.delivery.lateness import LatenessWatch
from gateway.storage.delivery.node_core import NodeCore
from gateway.storage.delivery.switches import Switches
from gateway.storage.delivery.sync import SnapshotSync, StoreUnreachable
from gateway.wire.peers import PeerClient, pooled
from gateway.workers.follower import Follower
from gateway.workers.keeper import Keeper
from gateway.workers.roles import ONE_WORKER, Role, Workers

log = logging.getLogger(__name__)
FOLLOWERS_EXTRA_S = 5.0  # a stopping keeper waits for its followers' requests, and this


class Delivery(Protocol):
    """Where the node's snapshots come from: the snapshot store (SnapshotSync), or the
    node's keeper (a follower's: gateway/workers/follower.py)."""

    errors: dict[int, str]

    def held(self) -> list[int]: ...

    async def run_once(self, force: bool = False) -> dict[int, int]: ...

    async def run_forever(self) -> None: ...

    def log_end(self, topic: str, partition: int) -> int | None: ...

    def store_rows(self) -> dict[str, int]: ...

    def hand_over(self, partition: int) -> None: ...


class Duties(Protocol):
    """What a role adds to a node's life."""

    # This process is the node to the cluster: it acts on its assignment itself (hands
    # over, fetches, counts the moves), and its metrics are the node's (a follower's keeper
    # does both for it).
    joins: bool

    async def open(self) -> None:
        """Serve what there is, before the node's loops start."""

    def loops(self) -> list[Callable[[], Coroutine[Any, Any, None]]]:
        """Its background loops, run until the node stops."""

    async def started(self) -> None:
        """Last at start: the node serves."""

    async def stop(self) -> None:
        """First at stop."""

    async def exposition(self, own: Callable[[], bytes]) -> bytes:
        """The node's metrics, from this process's `own`."""

    async def workers(self) -> Workers:
        """The node's worker processes serving."""

    def late(self) -> dict[int, float]:
        """Each served chain's seconds behind what the pipeline published."""


@dataclass(frozen=True)
class NodeParts:
    core: NodeCore
    coordinator: Coordinator
    delivery: Delivery
    duties: Duties


@dataclass(frozen=True)
class NodeAsks:
    """What a node's parts ask of the node they are part of."""

    caught_up: Callable[[Assignment], frozenset[Replica]]  # KIP-441's warm-ups done
    exposition: Callable[[], Awaitable[bytes]]  # the node's metrics, every worker's summed
    # the chains' tables as the manifest names them, told before the chains are installed
    tables_built: Callable[[Built | None], None]


def assemble(
    project: Project, node_id: str, role: Role, metrics: NodeMetrics, asks: NodeAsks
) -> NodeParts:
    """The parts of a node of this role."""
    return BUILDERS[role.kind](project, node_id, role, metrics, asks)


def alone(
    project: Project, node_id: str, role: Role, metrics: NodeMetrics, asks: NodeAsks
) -> NodeParts:
    """The whole node in one process: it joins the cluster and syncs."""
    core = _core(
        project, node_id, _coordinated_view(project, node_id), owns_files=True, images=False
    )
    sync = SnapshotSync(core, asks.tables_built, metrics.freshness)
    return NodeParts(core, _coordinator(core, sync, asks), sync, Joined(core.catalog, sync))


def keeper(
    project: Project, node_id: str, role: Role, metrics: NodeMetrics, asks: NodeAsks
) -> NodeParts:
    """The keeper of a node's worker processes: a node alone that also tells its followers
    what it serves, and maps its bases' tables from images every worker shares."""
    assert role.followers is not None
    core = _core(
        project, node_id, _coordinated_view(project, node_id), owns_files=True, images=True
    )
    sync = SnapshotSync(core, asks.tables_built, metrics.freshness)
    coordinator = _coordinator(core, sync, asks)
    kept = Keeper(role.channel, role.followers, core, coordinator, sync, asks.exposition)
    wait_s = project.settings.request_timeout_s + FOLLOWERS_EXTRA_S
    return NodeParts(core, coordinator, sync, Keeping(core.catalog, sync, kept, wait_s))


def follower(
    project: Project, node_id: str, role: Role, metrics: NodeMetrics, asks: NodeAsks
) -> NodeParts:
    """A follower of the keeper: its Follower is at once its coordinator (the topology as
    the keeper holds it) and its delivery (the chains as the keeper serves them)."""
    assert role.lifeline is not None
    view = TopologyView(_unplaced(project))
    core = _core(project, node_id, view, owns_files=False, images=True)
    follows = Follower(role.channel, role.lifeline, core, metrics.exposition, asks.tables_built)
    return NodeParts(core, follows, follows, Following(follows))


BUILDERS = {"alone": alone, "keeper": keeper, "follower": follower}


class Joined:
    """A node that joins the cluster and syncs from the snapshot store."""

    joins = True

    def __init__(self, catalog: SnapshotCatalog, sync: SnapshotSync) -> None:
        self.catalog, self.sync = catalog, sync
        self.lateness = LatenessWatch(lambda: sync.manifest, self._versions, lambda: sync.synced_at)

    async def open(self) -> None:
        await asyncio.to_thread(self.catalog.open_existing, self.sync.held())
        try:
            await self.sync.run_once()
        except StoreUnreachable as exc:
            log.warning("snapshot store unreachable at start: %s", exc)

    def loops(self) -> list[Callable[[], Coroutine[Any, Any, None]]]:
        return [self.sync.run_forever, self.lateness.watch_forever]

    async def started(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    async def exposition(self, own: Callable[[], bytes]) -> bytes:
        return own()

    async def workers(self) -> Workers:
        return ONE_WORKER

    def late(self) -> dict[int, float]:
        return self.lateness.seconds()

    def _versions(self) -> dict[int, int]:
        """The version of each chain this node serves."""
        return {chain: snapshot.version for chain, snapshot in self.catalog.current().items()}


class Keeping(Joined):
    """A joined node that keeps worker processes: its followers start from what it serves,
    stop before it, and its metrics are every worker's summed."""

    def __init__(
        self, catalog: SnapshotCatalog, sync: SnapshotSync, kept: Keeper, wait_s: float
    ) -> None:
        super().__init__(catalog, sync)
        self.keeper, self.wait_s = kept, wait_s

    async def started(self) -> None:
        await self.keeper.start()

    async def stop(self) -> None:  # its followers first: they let go of its files
        await self.keeper.stop(self.wait_s)

    async def exposition(self, own: Callable[[], bytes]) -> bytes:
        return summed([own().decode(), *await self.keeper.follower_metrics()])

    async def workers(self) -> Workers:
        return self.keeper.workers()


class Following:
    """A follower: it serves what its keeper serves, from the moment its coordinator (its
    Follower) starts; the keeper counts the node's metrics."""

    joins = False

    def __init__(self, follows: Follower) -> None:
        self.follows = follows

    async def open(self) -> None:
        return None

    def loops(self) -> list[Callable[[], Coroutine[Any, Any, None]]]:
        return []

    async def started(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    async def exposition(self, own: Callable[[], bytes]) -> bytes:
        return await self.follows.node_metrics()

    async def workers(self) -> Workers:
        return await self.follows.workers()

    def late(self) -> dict[int, float]:
        return {}


def _core(
    project: Project, node_id: str, view: TopologyView, owns_files: bool, images: bool
) -> NodeCore:
    settings = project.settings
    catalog = SnapshotCatalog(
        project.cluster.node(node_id).snapshots,
        project,
        threads=settings.duckdb_threads,
        memory=settings.duckdb_memory_limit,
        owns_files=owns_files,
        images=images,
    )
    tls = project.tls.client(node_id) if project.tls else None
    peers = PeerClient(project.cluster.secret, pooled(settings, tls))
    return NodeCore(project, node_id, view, catalog, Switches(), peers)


def _coordinated_view(project: Project, node_id: str) -> TopologyView:
    """A joined node's first topology: the project file's, or, elastic, none assigned yet."""
    cluster = project.cluster
    if cluster.coordinator is None:
        return TopologyView(Topology.static(cluster))
    me = cluster.node(node_id)
    return TopologyView(Topology.unassigned(cluster, {me.id: me.address}))


def _coordinator(core: NodeCore, sync: SnapshotSync, asks: NodeAsks) -> Coordinator:
    """Who keeps a joined node's topology: the project file, or the coordinator."""
    project, cluster = core.project, core.project.cluster
    if cluster.coordinator is None:
        return StaticCoordinator(core.topology)
    me = Member(core.node_id, cluster.node(core.node_id).address)
    coordination = Coordination(
        cluster.coordinator,
        cluster.name,
        coordinator_timeout(project.settings),
        cluster.tls,
        holder=core.node_id,
    )
    return ElasticCoordinator(
        project, coordination, me, core.topology, asks.caught_up, sync.holding
    )


def _unplaced(project: Project) -> Topology:
    """A follower's topology until its keeper tells the one it holds."""
    cluster = project.cluster
    addresses = {n.id: n.address for n in cluster.nodes}
    return Topology.unassigned(cluster, addresses)
