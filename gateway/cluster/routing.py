"""Where sub-queries go: each partition to one of its replicas, in rounds.

Round r sends every sub-query still unanswered to its next eligible replica, one internal
request per node, all nodes in parallel. A partition whose replica failed (node down,
NOT_PRESENT during a move, NOT_UP_TO_BOUND...) moves to the next replica in the next round.
Internal requests are answered locally by the receiving node and never forwarded again.

A global store's partitions are on every node: this node answers them, and the other live
nodes are asked only when it cannot (it has not installed one yet, or is behind a bound).

Replica order: this node first when it hosts the partition and is as fresh as the active
(no hop at all), then the active, then the standbys; replicas known to be behind the
request's bound go after those, and a replica that is really behind answers NOT_UP_TO_BOUND.
Last come replicas believed down that failed fast (gateway/cluster/health.py): asking one again
costs a refused connection, and what this node believes of a peer may be out of date.

A partition whose every replica answered NOT_UP_TO_BOUND for a position the pipeline has
published (a token from a replica that moved on, another that has not installed the newest
version yet) is asked again, after a pause, for up to `bound_wait_s`: its replicas are a
delivery away from it. A bound past what was published fails at once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from contracts import tracing
from contracts.errors import Failure
from contracts.positions import satisfies
from gateway.cluster.health import Membership
from gateway.cluster.log_end import LogEnd
from gateway.cluster.metrics import NodeMetrics
from gateway.model.queries import NOT_HERE, Answer, NotHere, SubQuery
from gateway.storage.delivery.node_core import NodeCore
from gateway.wire.coalescing import LEAVES_AFTER_TURNS
from gateway.wire.peer_errors import PeerError, PeerRefused
from gateway.wire.protocol import ProtocolError

log = logging.getLogger(__name__)
# Failures the caller's own demands cause (a bound, requireActive): not worth a warning.
_ASKED_FOR = frozenset({Failure.NOT_UP_TO_BOUND, Failure.NOT_ACTIVE})
BOUND_PAUSE_S = 0.05  # the first pause before replicas behind a bound are asked again


class Local(Protocol):
    """How this node answers sub-queries itself (gateway/storage/execution.py)."""

    async def __call__(self, subqueries: list[SubQuery]) -> list[Answer]: ...

    def here(self, q: SubQuery) -> Answer | NotHere:
        """One sub-query read at once on the event loop, or NOT_HERE."""
        ...


@dataclass
class Trace:
    """What one request cost: the internal calls of each round."""

    rounds: list[dict[str, int]] = field(default_factory=list)  # node -> sub-queries
    millis: float = 0.0

    def calls(self) -> int:
        return sum(len(r) for r in self.rounds)


class Router:
    def __init__(
        self,
        core: NodeCore,
        membership: Membership,
        local: Local,
        local_offsets: Callable[[int], dict[str, int] | None],
        metrics: NodeMetrics,
        log_end: LogEnd,
    ) -> None:
        self.project = core.project
        self.node_id = core.node_id
        self.membership = membership
        self.peers = core.peers
        self.topology = core.topology
        self.local = local
        self.local_offsets = local_offsets
        self.metrics = metrics
        self.log_end = log_end

    async def execute(
        self, subqueries: list[SubQuery], authorization: str | None = None
    ) -> tuple[dict[int, Answer], Trace]:
        started = time.perf_counter()
        if len(subqueries) == 1:
            read = self.read_here(subqueries[0], started)
            if read is not None:
                return {subqueries[0].id: read[0]}, read[1]
        trace = Trace()
        done: dict[int, Answer] = {}
        tried: dict[int, set[str]] = defaultdict(set)
        pending = list(subqueries)
        pause, waited = BOUND_PAUSE_S, 0.0
        while pending:
            by_node, behind = self._round(pending, tried, done, waited)
            if not by_node and behind:  # every replica is behind: wait for one, ask again
                await asyncio.sleep(pause)
                waited, pause = waited + pause, pause * 2
                for q in behind:
                    tried[q.id].clear()
                pending = behind
                continue
            if not by_node:
                break
            trace.rounds.append({n: len(qs) for n, qs in by_node.items()})
            with tracing.span("routing round", {"stategate.round": len(trace.rounds),
                                                  "stategate.nodes": sorted(by_node)}):  # fmt: skip
                pending = behind + await self._ask(by_node, done, authorization)
        trace.millis = (time.perf_counter() - started) * 1000
        return done, trace

    def read_here(self, q: SubQuery, started: float) -> tuple[Answer, Trace] | None:
        """The answer of a sub-query this node is the first replica to ask, read from its
        memory at once, as the first round would have it; None when a round must go (the
        first replica is another, memory cannot answer it at once, or the read failed)."""
        replicas = self.replicas(q)
        if not replicas or replicas[0] != self.node_id:
            return None
        answer = self.local.here(q)
        if answer is NOT_HERE or answer.failure is not None:
            return None
        millis = (time.perf_counter() - started) * 1000
        return answer, Trace([{self.node_id: 1}], millis)

    def _round(
        self,
        pending: list[SubQuery],
        tried: dict[int, set[str]],
        done: dict[int, Answer],
        waited: float,
    ) -> tuple[dict[str, list[SubQuery]], list[SubQuery]]:
        """Where each pending sub-query goes this round (node -> its sub-queries), and those
        whose every replica is behind a bound worth waiting for; one no replica is left to
        answer gets its failure in `done`."""
        by_node: dict[str, list[SubQuery]] = defaultdict(list)
        behind: list[SubQuery] = []
        for q in pending:
            node = self._next_replica(q, tried[q.id])
            if node is None and self._catching_up(q, done.get(q.id), waited):
                behind.append(q)
            elif node is None:
                done.setdefault(q.id, self._unanswerable(q))
            else:
                tried[q.id].add(node)
                by_node[node].append(q)
        return by_node, behind

    async def _ask(
        self,
        by_node: dict[str, list[SubQuery]],
        done: dict[int, Answer],
        authorization: str | None,
    ) -> list[SubQuery]:
        """One internal request per node, all at once, their answers into `done`; returns the
        sub-queries whose replica failed in a way the next one may not (to ask it next)."""
        calls = [self._peer(n, qs, authorization) for n, qs in by_node.items() if n != self.node_id]
        if self.node_id in by_node:
            calls.append(self._here(by_node[self.node_id], after_peers=bool(calls)))
        batches = [await calls[0]] if len(calls) == 1 else await asyncio.gather(*calls)
        by_id = {q.id: q for qs in by_node.values() for q in qs}
        again = []
        for answer in (a for answers in batches for a in answers):
            if not _hides(answer, done.get(answer.id)):
                done[answer.id] = answer  # a failure stands unless a later one says more
            if answer.failure is not None and answer.failure.retryable:
                self._failed_over(by_id[answer.id], answer)
                again.append(by_id[answer.id])
        return again

    async def _here(self, subqueries: list[SubQuery], after_peers: bool) -> list[Answer]:
        """This node's share of a round. Its reads may run on the loop at once (lookups,
        walks), so with peers asked in the same round it starts once their requests are
        written, to be read while they answer: their calls leave a turn after they are made
        (gateway/wire/coalescing.py), and it waits as many more."""
        if after_peers:
            for _ in range(LEAVES_AFTER_TURNS):
                await asyncio.sleep(0)
        return await self.local(subqueries)

    def _failed_over(self, q: SubQuery, answer: Answer) -> None:
        assert answer.failure is not None
        self.metrics.failovers.labels(answer.node or "none", answer.failure).inc()
        log.log(
            logging.INFO if answer.failure in _ASKED_FOR else logging.WARNING,
            "partition %s on %s failed (%s): %s",
            q.partition,
            answer.node,
            answer.failure,
            answer.message,
        )

    def replicas(self, q: SubQuery) -> list[str]:
        """The replicas of the sub-query's partition worth asking, in the order they are tried.

        Replicas known to be behind the bound go after the others rather than nowhere: what
        this node knows of a peer is up to one poll old, and only the replica itself can
        refuse. Replicas down for a fast failure come last; hung ones are not asked.
        """
        if self._global(q):  # every node holds it: this one first, then any other
            others = [n for n in self.topology.current.nodes() if n != self.node_id]
            return [self.node_id, *(n for n in others if self.membership.alive(n))]
        ids = list(self.topology.current.replicas(q.partition))
        if not ids:
            return []
        active = ids[0]
        if q.require_active:
            ids = [active]
        elif self.node_id in ids[1:] and self._as_fresh_as(active, q.partition):
            ids.remove(self.node_id)
            ids.insert(0, self.node_id)
        alive = [n for n in ids if self.membership.alive(n)]
        down = [n for n in ids if n not in alive and self.membership.cheap_to_ask(n)]
        if q.bound:  # without one, every replica may satisfy it
            alive.sort(key=lambda n: not self._may_satisfy(n, q))
        return alive + down

    def _global(self, q: SubQuery) -> bool:
        store = self.project.stores.get(q.store)
        return store is not None and store.is_global

    def _next_replica(self, q: SubQuery, tried: set[str]) -> str | None:
        return next((n for n in self.replicas(q) if n not in tried), None)

    def _known_offsets(self, node_id: str, partition: int) -> dict[str, int] | None:
        if node_id == self.node_id:
            return self.local_offsets(partition)
        return self.membership.offsets(node_id, partition)

    def _may_satisfy(self, node_id: str, q: SubQuery) -> bool:
        offsets = self._known_offsets(node_id, q.partition)
        return offsets is None or satisfies(offsets, q.bound)  # unknown: let the node say

    def _as_fresh_as(self, active: str, partition: int) -> bool:
        mine = self.local_offsets(partition)
        if mine is None:
            return False
        theirs = self._known_offsets(active, partition)
        return theirs is None or satisfies(mine, theirs)

    def _catching_up(self, q: SubQuery, last: Answer | None, waited: float) -> bool:
        """Whether a partition whose replicas all refused is worth asking again: its last
        answer was behind a bound the pipeline has published, and there is time left."""
        if last is None or last.failure != Failure.NOT_UP_TO_BOUND:
            return False
        if waited >= self.project.settings.bound_wait_s or satisfies(last.offsets, q.bound):
            return False  # out of time, or behind for maxAgeMs, which waiting does not mend
        for topic, offset in q.bound.items():
            end = self.log_end(topic, q.partition)
            if end is None or offset > end:
                return False  # not published yet: no replica will have it soon
        return True

    def _unanswerable(self, q: SubQuery) -> Answer:
        """The failure of a partition no live replica was left to ask."""
        ids = self.topology.current.replicas(q.partition)
        if not ids:
            text = f"partition {q.partition} has no replica assigned"
        elif q.require_active:
            text = f"active replica {ids[0]} of partition {q.partition} is down"
        else:
            text = f"no live replica of partition {q.partition} ({', '.join(ids)} are down)"
        return Answer(id=q.id, node="").fail(Failure.NODE_UNAVAILABLE, text)

    async def _peer(
        self, node_id: str, subqueries: list[SubQuery], authorization: str | None
    ) -> list[Answer]:
        """A peer's share of a round, in one internal request."""
        url = f"{self.topology.current.url(node_id)}/internal/query"
        started = time.monotonic()
        called = {"stategate.peer": node_id, "stategate.subqueries": len(subqueries)}
        try:
            with tracing.span("internal call", called):
                answers = await self.peers.query(url, subqueries, authorization)
        except PeerRefused as exc:  # it is up, but did not answer these: fail them over
            self.metrics.internal_call(node_id, "refused")
            return _all_failed(subqueries, node_id, f"{node_id} {exc}")
        except ProtocolError as exc:  # not our protocol: another version, a proxy
            self.metrics.internal_call(node_id, "garbage")
            return _all_failed(subqueries, node_id, f"{node_id} answered garbage: {exc}")
        except PeerError as exc:
            self.metrics.internal_call(node_id, "unreachable")
            self.membership.mark_down(node_id, exc, started)
            return _all_failed(subqueries, node_id, f"{node_id} unreachable: {exc}")
        self.metrics.internal_call(node_id, "ok")
        self.membership.mark_up(node_id)
        return answers


def _hides(answer: Answer, earlier: Answer | None) -> bool:
    """An unreachable replica asked last says less than what an earlier replica answered."""
    return (
        answer.failure is Failure.NODE_UNAVAILABLE
        and earlier is not None
        and earlier.failure not in (None, Failure.NODE_UNAVAILABLE)
    )


def _all_failed(subqueries: list[SubQuery], node_id: str, message: str) -> list[Answer]:
    return [
        Answer(id=q.id, node=node_id).fail(Failure.NODE_UNAVAILABLE, message) for q in subqueries
    ]
