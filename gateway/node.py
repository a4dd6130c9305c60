"""One gateway node: its parts, as its role's builder made them (gateway/assembly.py), its
view of the peers, its router, and their lifecycle."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import signal
import time
from collections.abc import Callable

from contracts import chains
from contracts.clock import now_ms
from contracts.generations import kept
from contracts.manifest import Built
from contracts.placement import Assignment, Replica
from contracts.positions import satisfies
from contracts.project import Project, Store
from contracts.release import release
from contracts.snapshot_file import rows_as
from contracts.topology import Topology
from gateway.assembly import NodeAsks, assemble
from gateway.auth import Authenticator
from gateway.cluster.batching import RequestBatch
from gateway.cluster.health import Membership
from gateway.cluster.log_end import LogEnd, LogFileEnd, PublishedEnd
from gateway.cluster.metrics import NodeMetrics, NodeState
from gateway.cluster.routing import Router
from gateway.cluster.served import read_tables, servable, store_read
from gateway.cluster.status import (
    ASSIGNMENT_HEADER,
    FORMATS,
    NODE_HEADER,
    LiveCounts,
    NodeStatus,
    PartitionInfo,
    PartitionMap,
    PartitionState,
    ReplicaInfo,
    key_routes,
)
from gateway.runtime.lanes import Lanes
from gateway.runtime.stalls import Stalls
from gateway.storage.catalog.snapshots import Snapshot
from gateway.storage.delivery.sync import StoreUnreachable
from gateway.storage.execution import LocalExecution
from gateway.workers.roles import ALONE, Role, Workers

log = logging.getLogger(__name__)


class GatewayNode:
    def __init__(
        self, project: Project, node_id: str, role: Role = ALONE, schema: str = ""
    ) -> None:
        self.project = project  # its stores the tables the file's need (contracts/generations.py)
        self.file = dataclasses.replace(project)  # as the file says: `project` is taken into
        self._built: Built | None = None  # the chains' tables, as the manifest last said
        self.id = node_id
        self.role = role
        self.schema = schema  # the version of the schema it serves (NodeStatus.schema)
        self.release = release()  # read once, at start: a checkout's asks git
        self.authenticator = Authenticator(project.access, project.settings.max_token_lifetime_s)
        # what verifies tokens, read again this many times (SIGHUP: [auth], its JWKS file);
        # the event is set, and replaced, each time
        self.authentication = 0
        self.authentication_read = asyncio.Event()
        self.metrics = NodeMetrics()
        parts = assemble(
            project,
            node_id,
            role,
            self.metrics,
            NodeAsks(self._caught_up, self.exposition, self._tables_built),
        )
        core = parts.core
        self.catalog, self.topology = core.catalog, core.topology
        self.switches, self.peers = core.switches, core.peers
        self.coordinator, self.delivery = parts.coordinator, parts.delivery
        self.duties = parts.duties
        self.stalls = Stalls()
        self.membership = Membership(core, self.stalls)
        self.lanes = Lanes()
        settings = project.settings
        self.log_end: LogEnd = (
            LogFileEnd(project.log_dir, settings.health_interval_s)
            if settings.log_end == "log"
            else PublishedEnd(self.delivery.log_end, self._positions)
        )
        self.key_routes = key_routes(project)
        self.execute_local = LocalExecution(self.catalog, project, node_id, self.topology)
        self.router = Router(
            core,
            self.membership,
            self.execute_local,
            self._local_offsets,
            self.metrics,
            self.log_end,
        )
        self.metrics.watch(
            NodeState(
                self.status,
                self._lag,
                self.membership.beliefs,
                lambda: self.topology.current.version,
                lambda: self.coordinator.connected,
                lambda: self.id in self.topology.current.fenced,
                self._global_footprint,
                self.catalog.history_memory,
                self.duties.late,
            ),
            node_wide=self.duties.joins,
        )
        self.internal_requests = 0
        self.started_ms = now_ms()  # as it read its project file
        self.reloaded_ms: int | None = None  # when it read the file again last (SIGHUP)
        self.reloaded = ""  # what that did (stategate/reloading.py)
        self.live = LiveCounts()
        # the tables its schema reads (gateway/cluster/served.py), all until start
        self.served = frozenset(project.stores)
        self.declared = {name: rows_as(store) for name, store in project.stores.items()}
        self._rows: dict[str, tuple[Store, str]] = {}  # a table's store and its rows_as
        self._served_listeners: list[Callable[[frozenset[str]], None]] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._fetching: set[asyncio.Task[None]] = set()
        self._warming_since: dict[int, float] = {}  # partition -> when assigned to warm up

    def _caught_up(self, assignment: Assignment) -> frozenset[Replica]:
        """The warm-ups whose node holds its partition at least as far as the partition's
        active does (KIP-441's caught-up), as this node knows their positions."""
        done = set()
        for p, warming in enumerate(assignment.warming):
            active = assignment.serving[p][0] if assignment.serving[p] else None
            theirs = self._offsets_of(active, p) if active else None
            for node in warming:
                mine = self._offsets_of(node, p)
                if mine is not None and (theirs is None or satisfies(mine, theirs)):
                    done.add((p, node))
        return frozenset(done)

    def _offsets_of(self, node: str, partition: int) -> dict[str, int] | None:
        if node == self.id:
            return self._local_offsets(partition)
        return self.membership.offsets(node, partition)

    def _counted(self, before: Topology, after: Topology) -> None:
        """Count the partitions this node received and handed over, and time its warm-ups:
        from the first assignment it reads on, so listened to before the coordinator starts."""
        held, holds = set(before.assigned_to(self.id)), set(after.assigned_to(self.id))
        self.metrics.moves.labels("handed_over").inc(len(held - holds))
        self.metrics.moves.labels("received").inc(len(holds - held))
        self._time_warmups(set(before.hosted_by(self.id)), set(after.hosted_by(self.id)), holds)

    def _moved(self, before: Topology, after: Topology) -> None:
        """Hand over what this node no longer holds; fetch what it was given."""
        held, holds = set(before.assigned_to(self.id)), set(after.assigned_to(self.id))
        for partition in sorted(held - holds):
            self.delivery.hand_over(partition)
        if holds - held:
            task = asyncio.create_task(self._fetch_assigned())
            self._fetching.add(task)
            task.add_done_callback(self._fetching.discard)

    def _time_warmups(self, served: set[int], serves: set[int], holds: set[int]) -> None:
        """Observe how long each warm-up of this node took, from assigned to serving."""
        now = time.monotonic()
        for partition in holds - serves:
            self._warming_since.setdefault(partition, now)
        for partition in serves - served:
            started = self._warming_since.pop(partition, None)
            if started is not None:
                self.metrics.warmup.observe(now - started)
        for partition in set(self._warming_since) - holds:
            del self._warming_since[partition]  # called off

    async def _fetch_assigned(self) -> None:
        try:
            await self.delivery.run_once(force=True)
        except StoreUnreachable as exc:
            log.warning("snapshot store unreachable: %s", exc)

    async def start(self) -> None:
        if self.duties.joins:
            self.topology.listen(self._counted)
        await self.coordinator.start()  # a follower's: serves what the keeper serves
        self.membership.follow(self.topology)
        if self.duties.joins:
            self.topology.listen(self._moved)  # the first assignment is delivered just below
        await self.duties.open()
        self._tasks = [
            asyncio.create_task(self.stalls.watch_forever()),
            asyncio.create_task(self.membership.watch_forever()),
            *(asyncio.create_task(loop()) for loop in self.duties.loops()),
        ]
        await self.duties.started()
        await self._serve_first()
        self._tasks.append(asyncio.create_task(self._serve_more_forever()))

    async def stop(self) -> None:
        await self.duties.stop()
        await self.coordinator.stop()
        self.switches.close()
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.peers.aclose()
        self.execute_local.close()
        self.lanes.close()
        await asyncio.to_thread(self.catalog.close)  # waits for a sync thread still at work

    def behind(self, answered: dict[tuple[int, str], int]) -> bool:
        """Whether a node answered a chain at a version older than one this node knows it
        serves: another worker of that node had switched, and told of it, first."""
        for (chain, node_id), version in answered.items():
            if node_id == self.id:
                known: int | None = self.catalog.version(chain)
            else:
                state = self.membership.state(node_id, chain)
                known = state.version if state else None
            if known is not None and version < known:
                return True
        return False

    def store_rows(self, store: str) -> int:
        """A store's rows in the whole cluster, as the pipeline published them: the same on
        every node (a scan's cost, and so its verdict, must not depend on the node asked)."""
        return self.delivery.store_rows().get(store, 0)

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

    def _global_footprint(self) -> tuple[int, dict[str, int]]:
        held = self.catalog.footprint(chains.global_chains(self.project))
        return held.disk, held.memory

    def _local_state(self, partition: int) -> PartitionState | None:
        s = self.catalog.get(partition)
        return (
            None if s is None else PartitionState(s.version, s.offsets, s.created_ms, s.served_ms)
        )

    def _local_offsets(self, partition: int) -> dict[str, int] | None:
        snapshot = self.catalog.get(partition)
        return snapshot.offsets if snapshot else None

    def status(self) -> NodeStatus:
        """This node's own snapshots, as peers poll them."""
        return NodeStatus(
            node=self.id,
            partitions={p: _state(s) for p, s in sorted(self.catalog.current().items())},
            sync_errors=dict(self.delivery.errors),
            internal_requests=self.internal_requests,
            changes=self.switches.changes,
            live=self.live,
            release=self.release,
            schema=self.schema,
            formats=FORMATS,
            stores=self.built(),
            declared=self.declared,
            serving=sorted(self.served),
            pending=self.pending(),
            started_ms=self.started_ms,
            reloaded_ms=self.reloaded_ms,
            reloaded=self.reloaded,
        )

    def take(self, newer: Project) -> None:
        """A project file read again (stategate/reloading.py), taken into the project every
        part of the node reads, as the tables its stores need (`_retable`). The schema takes
        the stores declared since, and a store's new declaration, once every node has them
        built, as it does from start; the stores it no longer declares go from it at once."""
        authenticator = Authenticator(newer.access, newer.settings.max_token_lifetime_s)
        self.file = dataclasses.replace(newer)  # once the keys [auth] names were read
        self.authenticator = authenticator  # its JWKS file read again too: a key may be gone
        self.authentication += 1
        self.authentication_read.set()
        self.authentication_read = asyncio.Event()
        self.declared = {name: rows_as(store) for name, store in newer.stores.items()}
        self._retable(always=True)

    def _tables_built(self, built: Built | None) -> None:
        """The chains' tables as the manifest names them, heard before the delivery installs
        the chains it lists: the project's tables follow them (`_retable`)."""
        if built != self._built:
            self._built = built
            self._retable()

    def _retable(self, always: bool = False) -> None:
        """Take into the project the tables the file's stores need, given those the chains
        hold (contracts/generations.py: `kept`). The chains whose bases hold tables it did
        not open are opened again (SnapshotCatalog.widen), off the event loop; the tables
        it no longer needs go from the schema at once."""
        tables = kept(self.file, self._built)
        if not always and tables.stores == self.project.stores:
            return
        self.project.take(tables)
        self.key_routes = key_routes(self.project)
        self._serve(self._readable(self.served))
        task = asyncio.get_running_loop().create_task(self._widen())
        self._fetching.add(task)
        task.add_done_callback(self._fetching.discard)

    def ask_reload(self) -> bool:
        """Have the node read its project file again, as SIGHUP does: its first process is
        sent SIGHUP (a follower's keeper, which passes it on). False when this process
        would not take the signal as a reload (no handler: it would end)."""
        if self.role.kind == "follower":
            os.kill(os.getppid(), signal.SIGHUP)
            return True
        if signal.getsignal(signal.SIGHUP) in (signal.SIG_DFL, signal.SIG_IGN, None):
            return False
        os.kill(os.getpid(), signal.SIGHUP)
        return True

    async def _widen(self) -> None:
        opened = await asyncio.to_thread(self.catalog.widen)
        if opened:
            log.info("opened chains %s again for the stores declared since", opened)

    def built(self) -> list[str]:
        """The declared stores this node has built on every chain it serves: those whose
        base has their table (a store declared since the pipeline built a chain has none)."""
        current = self.catalog.current().items()
        return [
            name
            for name, store in self.project.stores.items()
            if all(
                snapshot.base.holds(name)
                for chain, snapshot in current
                if chains.is_global(self.project, chain) == store.is_global
            )
        ]

    def pending(self) -> list[str]:
        """The declared stores whose declaration it has not built yet on every chain it
        serves."""
        stores = self.project.stores
        built = {
            s.declared_name
            for t in self.built()
            if self._rows_as(s := stores[t]) == self.declared.get(s.declared_name)
        }
        return sorted(set(self.declared) - built)

    def _rows_as(self, store: Store) -> str:
        """rows_as(store), kept while the project holds that store: peers ask `pending` in
        every status poll, and the digest serializes the whole declaration."""
        kept = self._rows.get(store.name)
        if kept is None or kept[0] is not store:
            kept = self._rows[store.name] = (store, rows_as(store))
        return kept[1]

    def read_store(self, name: str) -> Store:
        """The table its schema reads of the declared store `name` (a join's target)."""
        return store_read(self.project, self.served, name)

    def when_served(self, listener: Callable[[frozenset[str]], None]) -> None:
        """Call `listener` with the stores the node serves each time they change."""
        self._served_listeners.append(listener)

    def _readable(self, reading: frozenset[str] = frozenset()) -> frozenset[str]:
        """The tables the schema may read (gateway/cluster/served.py): those every node has
        built, and those it reads already (`reading`): what it serves only grows, and a
        store's file declaration once read is never left for the one before it."""
        found = servable(self.project, self.built(), self.membership.built())
        reading &= frozenset(self.project.stores)  # not those the project no longer has
        return read_tables(self.project, found | reading, self.declared)

    async def _serve_first(self) -> None:
        """The tables every node has built, once each peer was asked: what the node serves
        from its start."""
        await self.membership.poll_once()
        self._serve(self._readable())

    async def _serve_more_forever(self) -> None:
        """Every health_interval_s, also the tables every node has built since."""
        while True:
            await asyncio.sleep(self.project.settings.health_interval_s)
            try:
                self._serve(self._readable(self.served))
            except Exception:  # a schema never switched again is worse than one round lost
                log.exception("the stores served were not switched")

    def _serve(self, stores: frozenset[str]) -> None:
        if stores == self.served:
            return
        waiting = sorted(set(self.project.stores) - stores)
        log.info(
            "serving stores %s%s",
            ", ".join(sorted(stores)),
            f"; not read (not yet built on every node, or replaced): {', '.join(waiting)}"
            if waiting
            else "",
        )
        for listener in self._served_listeners:
            listener(stores)
        self.served = stores  # once the schema switched: a failed switch is tried again

    async def exposition(self) -> bytes:
        """The node's metrics: with workers, each one's summed (the keeper's scrape asks
        its followers; a follower's asks the keeper)."""
        return await self.duties.exposition(self.metrics.exposition)

    async def workers(self) -> Workers:
        """The node's worker processes serving (a follower asks its keeper)."""
        return await self.duties.workers()

    def answer_headers(self) -> list[tuple[bytes, bytes]]:
        """NODE_HEADER and ASSIGNMENT_HEADER, as an answer carries them."""
        version = str(self.topology.current.assignment.version)
        return [
            (NODE_HEADER.encode(), self.id.encode()),
            (ASSIGNMENT_HEADER.encode(), version.encode()),
        ]

    def partition_map(self) -> PartitionMap:
        """Partitions, their replicas and roles (warm-ups too), each replica's position,
        version, lag and liveness, as this node knows them."""
        cluster, topology = self.project.cluster, self.topology.current
        assignment = topology.assignment
        partitions = [
            PartitionInfo(
                p,
                [self._replica(p, n, rank == 0) for rank, n in enumerate(topology.replicas(p))],
                [self._replica(p, n, False) for n in assignment.warming[p]],
            )
            for p in range(cluster.partitions)
        ]
        described = self.coordinator.describe()
        return PartitionMap(
            node=self.id,
            partitions_count=cluster.partitions,
            replicas=cluster.replicas,
            topics={t.name: t.key_type for t in self.project.topics.values()},
            nodes=dict(sorted(topology.addresses.items())),
            partitions=partitions,
            generated_ms=now_ms(),
            assignment_version=assignment.version,
            coordinator=described.get("coordinator"),
            leader=described.get("leader"),
            routes=self.key_routes,
            releases={**self.membership.releases(), self.id: (self.release, self.schema)},
            pending={**self.membership.pending(), self.id: self.pending()},
        )

    def _replica(self, partition: int, node_id: str, active: bool) -> ReplicaInfo:
        if node_id == self.id:
            state, alive = self._local_state(partition), True
        else:
            state = self.membership.state(node_id, partition)
            alive = self.membership.alive(node_id)
        return ReplicaInfo(
            node=node_id,
            address=self.topology.current.addresses.get(node_id, ""),
            active=active,
            alive=alive,
            version=state.version if state else None,
            position=state.offsets if state else {},
            lag=self._lag(partition, state.offsets) if state else None,
        )

    def _lag(self, partition: int, offsets: dict[str, int]) -> int | None:
        """Offsets behind the log end in the topics the replica's chain carries."""
        lags = []
        for topic, offset in offsets.items():
            end = self.log_end(topic, partition)
            if end is None:
                return None
            lags.append(max(0, end - offset))
        return sum(lags)


def _state(snapshot: Snapshot) -> PartitionState:
    return PartitionState(
        snapshot.version, snapshot.offsets, snapshot.created_ms, snapshot.served_ms
    )
