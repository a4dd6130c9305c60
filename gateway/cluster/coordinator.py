"""How a node learns its topology: fixed by the project file (StaticCoordinator), or kept in
a coordination service that nodes join and leave while serving (ElasticCoordinator, etcd
through contracts/coordination.py).

An elastic node registers under a lease it keeps alive; a node that dies loses its
registration within `session_ttl_s`. Its registration says which partitions it holds the
data of, and is written again whenever that changes. The first node to create the leader key
leads: it computes each next assignment (contracts/placement.py: sticky, balanced, warm-ups
before handover) from the members, the drains asked for, what the members hold, and which
warm-ups have caught up, and writes it over the one it read. Every node watches the
cluster's keys and takes each new assignment into its TopologyView, which routing and
delivery read.

A member that disappears keeps its replicas for `lost_node_grace_s` (a restart is not a
move); then they are placed again, warm-up first. While the coordinator is unreachable a node
keeps serving the last assignment it read, and nothing moves, until it answers again. Once
`session_ttl_s` has passed since the last keep-alive the coordinator took, the node's lease
may have expired and its replicas may be placed elsewhere: it fences itself (serves as
nobody's active, contracts/topology.py) until it reads the assignment again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable
from typing import Any, Protocol

from contracts import placement
from contracts.coordination import Coordination, CoordinatorError, Member, State
from contracts.placement import Assignment, Replica
from contracts.project import Project
from contracts.settings import Settings
from contracts.topology import Topology
from gateway.model.topology_view import TopologyView

log = logging.getLogger(__name__)
RETRY_S = 1.0  # wait before reconnecting to a coordinator that failed
UNEXPECTED = "the coordinator's loop goes on after"  # a loop of its that ends stops the node's
# part in the cluster for good, without a word
CALLS_PER_TTL = 4  # a coordinator call's deadline: a quarter of session_ttl_s
MIN_CALL_S = 0.5
CaughtUp = Callable[[Assignment], frozenset[Replica]]  # the warm-ups caught up now
Holds = Callable[[], frozenset[int]]  # the partitions whose data this node has now


def _nothing() -> frozenset[int]:
    return frozenset()


class Coordinator(Protocol):
    connected: bool  # whether the coordinator answered the last call (always, without one)

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def describe(self) -> dict[str, Any]: ...


class StaticCoordinator:
    """The project file's nodes and round-robin placement: nothing to start."""

    connected = True

    def __init__(self, view: TopologyView) -> None:
        self.view = view

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    def describe(self) -> dict[str, Any]:
        return {"kind": "static", "assignmentVersion": self.view.current.version}


class ElasticCoordinator:
    def __init__(
        self,
        project: Project,
        coordination: Coordination,
        me: Member,
        view: TopologyView,
        caught_up: CaughtUp,
        holds: Holds = _nothing,
    ) -> None:
        self.project = project
        self.coordination = coordination
        self.me = me
        self.view = view
        self.caught_up = caught_up
        self.holds = holds
        self.state = State()
        self.connected = False
        self._lease: int | None = None
        self._held_since = 0.0  # when the last keep-alive the coordinator took was sent
        self._landed = asyncio.Event()  # set whenever one lands
        self.grace = Grace(project.settings.lost_node_grace_s)
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        """Join the cluster; a CoordinatorError when the coordinator does not answer."""
        await self._join()
        self._tasks = [
            asyncio.create_task(self._keep_alive()),
            asyncio.create_task(self._fence_on_time()),
            asyncio.create_task(self._follow()),
            asyncio.create_task(self._poll()),
        ]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._lease is not None:
            with contextlib.suppress(CoordinatorError):
                await self.coordination.revoke(self._lease)  # leave now, not after the TTL
        await self.coordination.close()

    def describe(self) -> dict[str, Any]:
        assignment = self.view.current.assignment
        return {
            "kind": "elastic",
            "coordinator": self.coordination.url,
            "connected": self.connected,
            "leader": self.state.leader,
            "assignmentVersion": assignment.version,
            "members": sorted(self.state.members),
            "draining": sorted(self.state.draining),
            "warming": [
                {"partition": p, "node": n}
                for p, nodes in enumerate(assignment.warming)
                for n in nodes
            ],
        }

    async def _join(self) -> None:
        """Register; a drain asked of this node's earlier run ends with it: a node started
        again is started to serve."""
        await self.coordination.connect()
        await self.coordination.undrain(self.me.id)
        await self._register()
        self.connected = True
        await self._read()

    async def _register(self) -> None:
        """Register this node under a new lease of `session_ttl_s`. The lease is the node's
        once its registration is written: a lease granted to a registration that failed
        would be kept alive with nobody registered under it."""
        ttl = math.ceil(self.project.settings.session_ttl_s)  # never shorter than the fence's
        sent = time.monotonic()
        lease = await self.coordination.lease(ttl)
        me = self._member()
        await self.coordination.register(me, lease)
        self._lease, self.me = lease, me
        self._held(sent)

    def _member(self) -> Member:
        return Member(self.me.id, self.me.address, self.holds())

    async def _tell_holdings(self) -> None:
        """Register again when what this node holds changed, so that the leader places by
        what it holds now."""
        me = self._member()
        if self._lease is None or me.holds == self.me.holds:
            return
        try:
            await self.coordination.register(me, self._lease)
        except CoordinatorError as exc:  # an expired lease: the keep-alive registers anew
            log.info("what this node holds not told: %s", exc)
            return
        self.me = me

    async def _read(self) -> None:
        self.state = await self.coordination.read()
        if self.state.leader != self.me.id:
            self.grace.forget()
        self._take(self.state)

    def _take(self, state: State) -> None:
        """Route by the state read (and serve as its assignment says: no longer fenced)."""
        if state.assignment is None:
            return
        addresses = dict(self.view.current.addresses)  # a lost member's, until it is moved off
        addresses.update({m.id: m.address for m in state.members.values()})
        if self.me.id in self.view.current.fenced:
            log.info("the assignment read again: serving as it says")
        scheme = self.project.cluster.scheme
        self.view.update(
            Topology(state.assignment, addresses, draining=state.draining, scheme=scheme)
        )

    async def _keep_alive(self) -> None:
        """Refresh the lease every third of its TTL; a failed call is tried again at once
        (on the next member)."""
        ttl = self.project.settings.session_ttl_s
        while True:
            until_fenced = self._fence_at() - time.monotonic()
            await asyncio.sleep(until_fenced if 0 < until_fenced < ttl / 3 else ttl / 3)
            for attempt in range(2):
                try:
                    await self._refresh()
                    if self.me.id in self.view.current.fenced:
                        await self._read()  # the lease held: serve by the assignment now
                    self._reached()
                    break
                except CoordinatorError as exc:
                    log.info("keep-alive failed: %s", exc)
                    if attempt == 1:
                        self._unreachable(exc)
                except Exception:
                    log.exception(UNEXPECTED)

    async def _refresh(self) -> None:
        """Refresh the lease, or register anew if it expired; bounded as a whole, so that
        nothing the connection does can stop the keep-alives."""
        sent = time.monotonic()
        try:
            async with asyncio.timeout(self.project.settings.session_ttl_s):
                if self._lease is None or await self.coordination.refresh(self._lease) == 0:
                    await self._rejoin()
                else:
                    self._held(sent)
        except TimeoutError as exc:
            raise CoordinatorError("a keep-alive that did not end within the TTL") from exc

    def _held(self, sent: float) -> None:
        self._held_since = sent
        self._landed.set()

    async def _fence_on_time(self) -> None:
        """Fence the moment the lease may have expired, whatever a keep-alive is waiting on
        meanwhile (a call to a member cut off may take a whole TTL to fail); then count the
        TTL again from the next keep-alive that lands."""
        while True:
            due = self._fence_at() - time.monotonic()
            if due > 0:
                await asyncio.sleep(due)
                continue
            try:
                self._fence("no keep-alive reached the coordinator within the TTL")
            except Exception:
                log.exception(UNEXPECTED)
            self._landed.clear()
            await self._landed.wait()

    def _fence_at(self) -> float:
        return self._held_since + self.project.settings.session_ttl_s

    def _fence(self, why: str) -> None:
        """Serve as nobody's active until the assignment is read again (`_take`)."""
        current = self.view.current
        if self.me.id not in current.fenced:
            log.warning("%s: serving as nobody's active until the assignment is read", why)
            self.view.update(current.fence(self.me.id))

    def _reached(self) -> None:
        if not self.connected:
            log.info("the coordinator answers again")
        self.connected = True

    def _unreachable(self, error: CoordinatorError) -> None:
        """Said once per outage: the node serves its last assignment meanwhile."""
        if self.connected:
            log.warning("coordinator unreachable, serving the last assignment: %s", error)
        self.connected = False

    async def _rejoin(self) -> None:
        """The lease expired (the coordinator was away longer than the TTL): register anew,
        and read the assignment made meanwhile before serving by it."""
        self._fence("this node's lease expired")
        await self._register()
        log.info("registered again with the coordinator as %s", self.me.id)
        await self._read()

    async def _follow(self) -> None:
        while True:
            try:
                async for _ in self.coordination.changes(self.state.revision):
                    await self._read()
                    if self.state.leader == self.me.id:
                        await self._lead()  # a member came or went, a drain: plan now
            except CoordinatorError as exc:
                self._unreachable(exc)
            except Exception:
                log.exception(UNEXPECTED)
            await asyncio.sleep(RETRY_S)
            with contextlib.suppress(CoordinatorError):
                await self._read()

    async def _poll(self) -> None:
        """Read the state at every health interval, whatever the watch tells (it may lag a
        split, or end without a word); campaign while nobody leads; while leading, plan the
        next assignment (warm-ups catch up without any key changing)."""
        while True:
            await asyncio.sleep(self.project.settings.health_interval_s)
            try:
                await self._read()
                await self._tell_holdings()
                if self.state.leader is None and self._lease is not None:
                    await self.coordination.campaign(self.me.id, self._lease)
                    await self._read()
                if self.state.leader == self.me.id:
                    await self._lead()
            except CoordinatorError as exc:
                self._unreachable(exc)
            except Exception:
                log.exception(UNEXPECTED)

    async def _lead(self) -> None:
        state = self.state
        members, retiring = self._eligible(state)
        if not members and not retiring:
            return
        cluster, settings = self.project.cluster, self.project.settings
        previous = state.assignment
        caught = self.caught_up(previous) if previous else frozenset()
        holding = frozenset().union(*(m.holding for m in state.members.values()))
        try:
            nxt = placement.plan(
                previous,
                sorted(members),
                sorted(retiring),
                cluster.partitions,
                cluster.replicas,
                caught,
                settings.max_warmups,
                holding,
            )
        except placement.PlacementError as exc:
            log.error("no next assignment: %s", exc)
            return
        if nxt is previous:
            return
        if await self.coordination.publish(nxt, state.assignment_revision, self.me.id):
            log.info("assignment %s published: %s", nxt.version, _summary(previous, nxt))
            await self._read()

    def _eligible(self, state: State) -> tuple[set[str], set[str]]:
        """(members, retiring): registered nodes not draining, and draining ones; a node that
        vanished counts as it was while its grace lasts."""
        registered = set(state.members)
        known: set[str] = set()
        if state.assignment is not None:
            a = state.assignment
            known = set().union(*a.serving, *a.warming, *a.target)
        present = registered | self.grace.kept(known - registered, time.monotonic())
        return present - state.draining, present & state.draining


class Grace:
    """Lost members counted as present for `seconds` after this node, leading, first saw them
    gone: a restart is not a move. A node that stops leading forgets what it saw, so that a
    leader counts each loss from its own sight of it, never from a loss seen in an earlier
    term that has since come back."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._since: dict[str, float] = {}  # a missing member: since when (monotonic)

    def kept(self, missing: set[str], now: float) -> set[str]:
        """The members of `missing` still within their grace; the others' is over."""
        self._since = {n: t for n, t in self._since.items() if n in missing}
        for node in sorted(missing - set(self._since)):
            log.warning("%s is not registered: its replicas stay for %.1f s", node, self.seconds)
            self._since[node] = now
        return {n for n, since in self._since.items() if now - since < self.seconds}

    def forget(self) -> None:
        self._since.clear()


def _summary(previous: Assignment | None, nxt: Assignment) -> str:
    if previous is None:
        return f"{nxt.partitions} partitions placed"
    moved = placement.moves(previous, nxt)
    warming = sum(len(w) for w in nxt.warming)
    return f"+{len(moved.added)} -{len(moved.removed)} replicas, {warming} warming up"


def coordinator_timeout(settings: Settings) -> float:
    """A coordinator call's deadline: short enough that a keep-alive tried on a second member
    still arrives within the lease's TTL."""
    return max(MIN_CALL_S, settings.session_ttl_s / CALLS_PER_TTL)
