"""All the work of one GraphQL request, executed as one routed batch.

Each root field contributes a Work item: a store, a query kind and its parameters, and its
consistency demands. The batch splits every item into per-partition sub-queries (key lookups
of one partition with the same demands share one: a thousand aliased lookups become one
IN-list per partition), hands them all to the router at once (so each owning node gets one
internal request per round), and gives every item back its own answers.
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
    max_age_ms: int | None = None


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
        uses: list[list[int]] = [[] for _ in works]  # work -> the sub-queries it reads
        lookups: dict[tuple[Any, ...], int] = {}  # key lookups of one partition share a query
        for index, work in enumerate(works):
            require_active = work.consistency.require_active
            max_age_ms = work.consistency.max_age_ms
            for partition, params in self._split(work):
                bound = self._bound(work, partition)
                if work.kind == "get":
                    shared = (
                        work.store.name,
                        partition,
                        tuple(sorted(bound.items())),
                        require_active,
                        max_age_ms,
                    )
                    if shared in lookups:
                        subqueries[lookups[shared]].params["keys"].extend(params["keys"])
                        uses[index].append(lookups[shared])
                        continue
                    lookups[shared] = len(subqueries)
                uses[index].append(len(subqueries))
                subqueries.append(
                    SubQuery(
                        len(subqueries),
                        partition,
                        work.store.name,
                        work.kind,
                        params,
                        bound,
                        require_active,
                        max_age_ms,
                    )
                )
        for q in subqueries:
            if q.kind == "get":
                q.params["keys"] = list(dict.fromkeys(q.params["keys"]))
        answers, trace = await self.router.execute(subqueries, self.authorization)
        self.traces.append(trace)
        return [
            Outcome(work, [(subqueries[i], answers[i]) for i in ids])
            for work, ids in zip(works, uses, strict=True)
        ]

    def _split(self, work: Work) -> list[tuple[int, dict[str, Any]]]:
        """The partitions a work reads, each with its own parameters."""
        if work.kind == "get":
            grouped = keys_by_partition(work.store, work.params["keys"], self.num_partitions)
            return [(p, {"keys": keys}) for p, keys in sorted(grouped.items())]
        if work.kind == "window":
            key = work.params["key"]
            return [(partition_for(key, work.store.key_type, self.num_partitions), work.params)]
        return [(p, work.params) for p in work.partitions]

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
