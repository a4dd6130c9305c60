"""One gateway node: its snapshots, its view of the peers, its router, and their lifecycle."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from concurrent.futures import ThreadPoolExecutor

from contracts.clock import now_ms
from contracts.project import Project
from gateway.auth import Authenticator
from gateway.cluster.batching import RequestBatch
from gateway.cluster.health import Membership
from gateway.cluster.log_end import LogEnd, LogFileEnd, PublishedEnd
from gateway.cluster.metrics import NodeMetrics, NodeState
from gateway.cluster.routing import Router
from gateway.cluster.status import (
    LiveCounts,
    NodeStatus,
    PartitionInfo,
    PartitionMap,
    PartitionState,
    ReplicaInfo,
)
from gateway.model.queries import Answer, SubQuery, keys_of
from gateway.runtime.lanes import Lanes, offload, sliced
from gateway.runtime.stalls import Stalls
from gateway.storage import execution
from gateway.storage.snapshots import SnapshotCatalog
from gateway.storage.switches import Switches
from gateway.storage.sync import SnapshotSync, StoreUnreachable
from gateway.wire.peers import PeerClient, pooled

log = logging.getLogger(__name__)


class GatewayNode:
    def __init__(self, project: Project, node_id: str) -> None:
        self.project = project
        self.id = node_id
        self.config = project.cluster.node(node_id)
        self.authenticator = Authenticator(project.access)
        settings = project.settings
        self.catalog = SnapshotCatalog(
            self.config.data_dir / "snapshots",
            list(project.stores.values()),
            threads=settings.duckdb_threads,
            memory=settings.duckdb_memory_limit,
        )
        self.peers = PeerClient(project.cluster.secret, pooled(settings))
        self.switches = Switches()
        self.stalls = Stalls()
        self.membership = Membership(project, node_id, self.peers, self.switches, self.stalls)
        self.sync = SnapshotSync(project, node_id, self.catalog, self.peers, self.switches)
        self.metrics = NodeMetrics()
        self.lanes = Lanes()
        self.router = Router(
            project,
            node_id,
            self.membership,
            self.peers,
            self.execute_local,
            self._local_offsets,
            self.metrics,
        )
        self.log_end: LogEnd = (
            LogFileEnd(project.log_dir, settings.health_interval_s)
            if settings.log_end == "log"
            else PublishedEnd(self.sync.log_end, self._positions)
        )
        self.metrics.watch(NodeState(self.status, self._lag, self.membership.beliefs))
        self.pool = ThreadPoolExecutor(settings.query_threads, thread_name_prefix="query")
        self.internal_requests = 0
        self.live = LiveCounts()
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        hosted = self.project.cluster.hosted_by(self.id)
        await asyncio.to_thread(self.catalog.open_existing, hosted)
        try:
            await self.sync.run_once()
        except StoreUnreachable as exc:
            log.warning("snapshot store unreachable at start: %s", exc)
        self._tasks = [
            asyncio.create_task(self.stalls.watch_forever()),
            asyncio.create_task(self.membership.watch_forever()),
            asyncio.create_task(self.sync.run_forever()),
        ]

    async def stop(self) -> None:
        self.switches.close()
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.peers.aclose()
        self.pool.shutdown(wait=True)
        self.lanes.close()
        self.catalog.close()

    async def execute_local(self, subqueries: list[SubQuery]) -> list[Answer]:
        """Answer sub-queries from this node's snapshots: in-memory lookups at once, the rest
        one pool task per partition (DuckDB releases the GIL, so partitions run in parallel)."""
        if all(execution.in_memory(self.catalog, q) for q in subqueries):
            return await offload(self._execute_in_memory, subqueries, items=keys_of(subqueries))
        loop = asyncio.get_running_loop()
        by_partition: dict[int, list[SubQuery]] = {}
        for q in subqueries:
            by_partition.setdefault(q.partition, []).append(q)
        batches = await asyncio.gather(
            *(
                loop.run_in_executor(
                    self.pool, execution.execute, self.catalog, self.project, self.id, group
                )
                for group in by_partition.values()
            )
        )
        return [answer for batch in batches for answer in batch]

    def _execute_in_memory(self, subqueries: list[SubQuery]) -> list[Answer]:
        answers = []
        for some in sliced(subqueries, size=1):
            answers += execution.execute(self.catalog, self.project, self.id, list(some))
        return answers

    def request_batch(self, authorization: str | None) -> RequestBatch:
        return RequestBatch(
            self.router,
            self.project.cluster.partitions,
            self.log_end,
            authorization,
        )

    def _positions(self, partition: int) -> list[dict[str, int]]:
        """Every known replica's offsets of a partition: this node's, and its peers' as
        last polled."""
        known = [self._local_offsets(partition)]
        known += [self.membership.offsets(peer, partition) for peer in self.membership.peers]
        return [offsets for offsets in known if offsets is not None]

    def _local_offsets(self, partition: int) -> dict[str, int] | None:
        snapshot = self.catalog.get(partition)
        return snapshot.offsets if snapshot else None

    def status(self) -> NodeStatus:
        """This node's own snapshots, as peers poll them."""
        return NodeStatus(
            node=self.id,
            partitions={
                p: PartitionState(s.version, s.offsets, s.created_ms, s.served_ms)
                for p, s in sorted(self.catalog.current().items())
            },
            sync_errors=dict(self.sync.errors),
            internal_requests=self.internal_requests,
            changes=self.switches.changes,
            live=self.live,
        )

    def partition_map(self) -> PartitionMap:
        """Partitions, their replicas and roles, each replica's position, version, lag and
        liveness, as this node knows them."""
        cluster = self.project.cluster
        mine = self.status().partitions
        partitions = []
        for p, replica_ids in cluster.replica_map.items():
            replicas = []
            for rank, node_id in enumerate(replica_ids):
                if node_id == self.id:
                    state, alive = mine.get(p), True
                else:
                    state, alive = self.membership.state(node_id, p), self.membership.alive(node_id)
                replicas.append(
                    ReplicaInfo(
                        node=node_id,
                        address=cluster.node(node_id).address,
                        active=rank == 0,
                        alive=alive,
                        version=state.version if state else None,
                        position=state.offsets if state else {},
                        lag=self._lag(p, state.offsets) if state else None,
                    )
                )
            partitions.append(PartitionInfo(p, replicas))
        return PartitionMap(
            node=self.id,
            partitions_count=cluster.partitions,
            replicas=cluster.replicas,
            topics={t.name: t.key_type for t in self.project.topics.values()},
            nodes={n.id: n.address for n in cluster.nodes},
            partitions=partitions,
            generated_ms=now_ms(),
        )

    def _lag(self, partition: int, offsets: dict[str, int]) -> int | None:
        lags = []
        for topic in self.project.topics:
            end = self.log_end(topic, partition)
            if end is None:
                return None
            lags.append(max(0, end - offsets.get(topic, 0)))
        return sum(lags)
