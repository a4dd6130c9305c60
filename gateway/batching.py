"""All the work of one GraphQL request, executed as one routed batch.

Each root field contributes a Work item: a store, a query kind and its parameters, and its
consistency demands. The batch splits every item into per-partition sub-queries, hands them
all to the router at once (so each owning node gets one internal request per round), and
gives every item back its own answers.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gateway.config import Store
from gateway.partitioner import Key, partition_for
from gateway.positions import Position, restrict
from gateway.protocol import Answer, SubQuery
from gateway.routing import Router, Trace


@dataclass(frozen=True)
class Consistency:
    bound: Position = field(default_factory=dict)
    require_active: bool = False
    max_lag: int | None = None


@dataclass(eq=False)
class Work:
    store: Store
    kind: str
    params: dict[str, Any]
    partitions: list[int]  # the partitions this work reads
    consistency: Consistency = field(default_factory=Consistency)


@dataclass
class Outcome:
    work: Work
    parts: list[tuple[SubQuery, Answer]]


def keys_by_partition(store: Store, keys: list[Key], partitions: int) -> dict[int, list[Key]]:
    grouped: dict[int, list[Key]] = defaultdict(list)
    for key in dict.fromkeys(keys):
        grouped[partition_for(key, store.key_type, partitions)].append(key)
    return grouped


class RequestBatch:
    def __init__(
        self,
        router: Router,
        num_partitions: int,
        log_end: Callable[[str, int], int | None],
        authorization: str | None = None,
    ) -> None:
        self.router = router
        self.num_partitions = num_partitions
        self.log_end = log_end
        self.authorization = authorization
        self.traces: list[Trace] = []

    async def run(self, works: list[Work]) -> list[Outcome]:
        subqueries: list[SubQuery] = []
        owner: list[int] = []
        for index, work in enumerate(works):
            for q in self._split(work, len(subqueries)):
                subqueries.append(q)
                owner.append(index)
        answers, trace = await self.router.execute(subqueries, self.authorization)
        self.traces.append(trace)
        outcomes = [Outcome(work, []) for work in works]
        for q in subqueries:
            outcomes[owner[q.id]].parts.append((q, answers[q.id]))
        return outcomes

    def _split(self, work: Work, first_id: int) -> list[SubQuery]:
        if work.kind == "get":
            grouped = keys_by_partition(work.store, work.params["keys"], self.num_partitions)
            per_partition = [(p, {"keys": keys}) for p, keys in sorted(grouped.items())]
        elif work.kind == "window":
            key = work.params["key"]
            per_partition = [
                (partition_for(key, work.store.key_type, self.num_partitions), work.params)
            ]
        else:
            per_partition = [(p, work.params) for p in work.partitions]
        return [
            SubQuery(
                id=first_id + i,
                partition=p,
                store=work.store.name,
                kind=work.kind,
                params=params,
                bound=self._bound(work, p),
                require_active=work.consistency.require_active,
            )
            for i, (p, params) in enumerate(per_partition)
        ]

    def _bound(self, work: Work, partition: int) -> dict[str, int]:
        """The caller's bound for this partition, raised to `log end - max lag` if asked."""
        bound = restrict(work.consistency.bound, partition)
        max_lag = work.consistency.max_lag
        if max_lag is not None:
            topic = work.store.topic.name
            end = self.log_end(topic, partition)
            if end is not None:
                bound[topic] = max(bound.get(topic, 0), end - max_lag)
        return bound
