"""All the work of one GraphQL request, executed as one routed batch.

Each root field contributes a Work item: a store, a query, the partitions it reads and its
consistency demands. The batch splits every item into per-partition sub-queries (key lookups
of one partition with the same demands share one: a thousand aliased lookups become one
IN-list per partition, of at most MAX_SUBQUERY_KEYS keys), hands them all to the router
at once (so each owning node gets one internal request per round), and gives every item back
its own answers.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

from contracts import chains
from contracts.partitioner import Key, partition_for, partitions_for
from contracts.positions import Position, restrict
from contracts.project import Store
from contracts.settings import MAX_SUBQUERY_KEYS
from gateway.cluster.log_end import LogEnd
from gateway.cluster.routing import Router, Trace
from gateway.model.queries import Answer, Get, Query, SubQuery, Versions, WindowsOfKey
from gateway.runtime.lanes import offload, sliced

DEFAULT_MAX_KEYS = MAX_SUBQUERY_KEYS


@dataclass(frozen=True)
class Consistency:
    bound: Position = field(default_factory=dict)
    require_active: bool = False
    max_lag: int | None = None
    max_age_ms: int | None = None


@dataclass(frozen=True, eq=False)
class Work:
    store: Store
    query: Query
    partitions: tuple[int, ...]  # the partitions a scan reads (lookups derive theirs)
    consistency: Consistency = field(default_factory=Consistency)


@dataclass(frozen=True)
class Outcome:
    work: Work
    parts: list[tuple[SubQuery, Answer]]  # one per partition read, in partition order
    key_parts: dict[Key, int] = field(default_factory=dict)  # a lookup's key -> its part

    def part_of(self, key: Key) -> tuple[SubQuery, Answer]:
        """The sub-query and answer of a lookup's key (its partition's)."""
        return self.parts[self.key_parts[key]]


def keys_by_partition(store: Store, keys: Sequence[Key], partitions: int) -> dict[int, list[Key]]:
    grouped: dict[int, list[Key]] = defaultdict(list)
    unique = list(dict.fromkeys(keys))
    for some in sliced(unique):
        for key, partition in zip(
            some, partitions_for(some, store.key_type, partitions), strict=True
        ):
            grouped[partition].append(key)
    return grouped


@dataclass
class _Slot:
    """One sub-query in the making: lookups that share it pool their keys."""

    partition: int
    store: str
    query: Query
    bound: dict[str, int]
    consistency: Consistency
    keys: dict[Key, None] = field(default_factory=dict)


class RequestBatch:
    def __init__(
        self,
        router: Router,
        num_partitions: int,
        log_end: LogEnd,
        authorization: str | None = None,
        max_keys: int = DEFAULT_MAX_KEYS,
    ) -> None:
        self.router = router
        self.num_partitions = num_partitions
        self.log_end = log_end
        self.max_keys = max_keys  # most keys of one sub-query (peers refuse more)
        self.authorization = authorization
        self.traces: list[Trace] = []

    async def run(self, works: list[Work]) -> list[Outcome]:
        if len(works) == 1 and isinstance(works[0].query, Get) and len(works[0].query.keys) == 1:
            return [await self._one_key(works[0], works[0].query)]
        slots: list[_Slot] = []
        uses: list[list[int]] = [[] for _ in works]  # work -> the slots it reads
        key_parts: list[dict[Key, int]] = [{} for _ in works]  # work -> key -> part
        shared: dict[Hashable, int] = {}  # key lookups of one partition share a slot
        for index, work in enumerate(works):
            for part, (partition, query) in enumerate(await self._split(work)):
                bound = self._bound(work, partition)
                slot = _Slot(partition, work.store.name, query, bound, work.consistency)
                if isinstance(query, Get):
                    share = (
                        work.store.name,
                        partition,
                        tuple(sorted(bound.items())),
                        work.consistency.require_active,
                        work.consistency.max_age_ms,
                    )
                    pooled = shared.get(share)
                    if pooled is None or len(slots[pooled].keys) + len(query.keys) > self.max_keys:
                        shared[share] = len(slots)
                        slots.append(slot)
                    slots[shared[share]].keys.update(dict.fromkeys(query.keys))
                    uses[index].append(shared[share])
                    key_parts[index].update(dict.fromkeys(query.keys, part))
                else:
                    uses[index].append(len(slots))
                    slots.append(slot)
        subqueries = [_subquery(i, slot) for i, slot in enumerate(slots)]
        answers, trace = await self.router.execute(subqueries, self.authorization)
        self.traces.append(trace)
        return [
            Outcome(work, [(subqueries[i], answers[i]) for i in ids], parts)
            for work, ids, parts in zip(works, uses, key_parts, strict=True)
        ]

    async def _one_key(self, work: Work, query: Get) -> Outcome:
        """A batch of one key's lookup (most requests): its sub-query, as run() makes it."""
        (key,) = query.keys
        partition = partition_for(key, work.store.key_type, self.num_partitions)
        demands = work.consistency
        q = SubQuery(0, partition, work.store.name, query, self._bound(work, partition),
                     demands.require_active, demands.max_age_ms)  # fmt: skip
        answers, trace = await self.router.execute([q], self.authorization)
        self.traces.append(trace)
        return Outcome(work, [(q, answers[0])], {key: 0})

    async def _split(self, work: Work) -> list[tuple[int, Query]]:
        """The partitions a work reads, each with its own query."""
        query = work.query
        if isinstance(query, Get):
            size = len(query.keys)
            grouped = await offload(
                keys_by_partition, work.store, query.keys, self.num_partitions, items=size
            )
            return [(p, Get(tuple(keys))) for p, keys in sorted(grouped.items())]
        if isinstance(query, WindowsOfKey | Versions):
            return [(partition_for(query.key, work.store.key_type, self.num_partitions), query)]
        return [(p, query) for p in work.partitions]

    def _bound(self, work: Work, partition: int) -> dict[str, int]:
        """The caller's bound for this partition, in the topics the store's chain carries
        (contracts/chains.py: its state depends on no other), raised to `log end - max lag`
        if asked."""
        bound = restrict(work.consistency.bound, partition)
        if bound:  # most requests carry none: no chain to look at
            project = self.router.project
            carried = chains.topics(project, chains.of(project, work.store, partition))
            bound = {t: o for t, o in bound.items() if t in carried}
        max_lag = work.consistency.max_lag
        if max_lag is not None:
            topic = work.store.topic.name
            end = self.log_end(topic, partition)
            if end is not None:
                bound[topic] = max(bound.get(topic, 0), end - max_lag)
        return bound


def _subquery(index: int, slot: _Slot) -> SubQuery:
    query = Get(tuple(slot.keys)) if isinstance(slot.query, Get) else slot.query
    return SubQuery(
        id=index,
        partition=slot.partition,
        store=slot.store,
        query=query,
        bound=slot.bound,
        require_active=slot.consistency.require_active,
        max_age_ms=slot.consistency.max_age_ms,
    )
