"""Placement as versioned data: which nodes serve each partition, which warm up to take over,
and where the cluster is heading.

An Assignment is stored as JSON (`to_json`) and read by every node, which routes by it
(`replica_map`, `hosted_by`, as `Cluster.replica_map` today) and pulls what it is assigned
(`assigned_to`). A static `[[cluster.nodes]]` file is the fixed assignment `static` returns.

For each partition an Assignment holds
  serving  the replicas that answer queries: the active first, then the standbys;
  warming  replicas being copied to a node, which serve once caught up (KIP-441's warm-ups);
  target   where the partition is heading.
The target is stored, not recomputed from what serves: a new leader carries on the same moves,
and a move under way is not decided again.

Invariants of every Assignment (checked when one is built, from JSON too):
- no node twice in a partition: serving and warming have no repeats and share no node;
- warming is part of the target; serving and target hold at most `replicas` nodes.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

FORMAT = 1  # of the JSON form; a reader refuses any other
STATIC_VERSION = 0  # what a static [[cluster.nodes]] file implies; a leader's start at 1

Nodes = tuple[str, ...]
Placement = tuple[Nodes, ...]  # partition -> node ids
Replica = tuple[int, str]  # (partition, node id)
FIELDS = ("format", "version", "replicas", "partitions")
PARTITION_FIELDS = ("serving", "warming", "target")


class PlacementError(ValueError):
    """An assignment, or a change asked of one, that is not valid; the message says which."""


@dataclass(frozen=True)
class Assignment:
    version: int
    replicas: int  # wanted per partition; fewer while there are fewer members
    serving: Placement
    warming: Placement
    target: Placement

    def __post_init__(self) -> None:
        _check(self)

    @property
    def partitions(self) -> int:
        return len(self.serving)

    @cached_property
    def replica_map(self) -> dict[int, Nodes]:
        """partition -> serving node ids, active first (as `Cluster.replica_map`); a partition
        whose every replica was lost maps to ()."""
        return dict(enumerate(self.serving))

    def hosted_by(self, node: str) -> list[int]:
        """The partitions `node` serves (as `Cluster.hosted_by`)."""
        return [p for p, nodes in enumerate(self.serving) if node in nodes]

    def assigned_to(self, node: str) -> list[int]:
        """The partitions `node` must hold: those it serves or warms up. A retiring node with
        none left may go."""
        return sorted(set(self.hosted_by(node)) | _holding(self.warming, node))

    def to_json(self) -> bytes:
        parts = zip(self.serving, self.warming, self.target, strict=True)
        body = {
            "format": FORMAT,
            "version": self.version,
            "replicas": self.replicas,
            "partitions": [dict(zip(PARTITION_FIELDS, map(list, p), strict=True)) for p in parts],
        }
        return json.dumps(body, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> Assignment:
        """Parse and check an assignment; PlacementError naming what is wrong otherwise."""
        body = _fields(_parse(raw), FIELDS, "the assignment")
        found = body["format"]
        if type(found) is not int or found != FORMAT:
            raise PlacementError(f"the assignment has format {found!r}; this reads {FORMAT}")
        if not isinstance(body["partitions"], list):
            raise PlacementError("the assignment's partitions is not a list")
        parts = [
            _fields(e, PARTITION_FIELDS, f"partition {p}") for p, e in enumerate(body["partitions"])
        ]
        placements = (
            tuple(_ids(entry[name], f"partition {p}: {name}") for p, entry in enumerate(parts))
            for name in PARTITION_FIELDS
        )
        serving, warming, goal = placements
        return cls(body["version"], body["replicas"], serving, warming, goal)


@dataclass(frozen=True)
class Moves:
    """What changed between two assignments' serving replicas."""

    added: frozenset[Replica]
    removed: frozenset[Replica]
    actives: frozenset[int]  # partitions whose active changed


def moves(a: Assignment, b: Assignment) -> Moves:
    """The serving replicas added and removed from `a` to `b`, and the actives changed."""
    if a.partitions != b.partitions:
        raise PlacementError(f"{a.partitions} partitions against {b.partitions}")
    before, after = _replicas(a.serving), _replicas(b.serving)
    changed = (p for p in range(a.partitions) if a.serving[p][:1] != b.serving[p][:1])
    return Moves(after - before, before - after, frozenset(changed))


def static(nodes: Sequence[str], partitions: int, replicas: int) -> Assignment:
    """The assignment a static [[cluster.nodes]] file implies: partition p on the nodes
    p, p+1, ... (mod their count) in the file's order, the first its active."""
    ids = tuple(nodes)
    _node_ids(ids, "nodes")
    if not 1 <= replicas <= len(ids):
        raise PlacementError(f"replicas must be between 1 and the node count {len(ids)}")
    rr = tuple(tuple(ids[(p + r) % len(ids)] for r in range(replicas)) for p in range(partitions))
    return Assignment(STATIC_VERSION, replicas, rr, ((),) * partitions, rr)


def _replicas(placement: Placement) -> frozenset[Replica]:
    return frozenset((p, n) for p, nodes in enumerate(placement) for n in nodes)


def _holding(placement: Placement, node: str) -> set[int]:
    return {p for p, nodes in enumerate(placement) if node in nodes}


def _check(a: Assignment) -> None:
    _whole(a.version, "version", 0)
    _whole(a.replicas, "replicas", 1)
    if not a.serving:
        raise PlacementError("an assignment has at least one partition")
    if not len(a.serving) == len(a.warming) == len(a.target):
        sizes = f"{len(a.serving)}, {len(a.warming)} and {len(a.target)}"
        raise PlacementError(f"serving, warming and target cover {sizes} partitions")
    for p, nodes in enumerate(zip(a.serving, a.warming, a.target, strict=True)):
        _check_partition(p, *nodes, a.replicas)


def _check_partition(p: int, serving: Nodes, warming: Nodes, goal: Nodes, replicas: int) -> None:
    for name, nodes in zip(PARTITION_FIELDS, (serving, warming, goal), strict=True):
        if not isinstance(nodes, tuple) or not all(isinstance(n, str) and n for n in nodes):
            raise PlacementError(f"partition {p}: {name} is not a tuple of node ids: {nodes!r}")
        if len(set(nodes)) < len(nodes):
            raise PlacementError(f"partition {p}: a node is twice in its {name} {list(nodes)}")
        if name != "warming" and len(nodes) > replicas:
            raise PlacementError(f"partition {p}: {name} {list(nodes)} has more than {replicas}")
    if both := sorted(set(serving) & set(warming)):
        raise PlacementError(f"partition {p}: {both} both serving and warming")
    if outside := sorted(set(warming) - set(goal)):
        raise PlacementError(f"partition {p}: {outside} warming but not in the target")


def _whole(value: object, name: str, minimum: int) -> None:
    if type(value) is not int or value < minimum:
        raise PlacementError(f"{name} must be a whole number of at least {minimum}, not {value!r}")


def _node_ids(ids: Iterable[str], what: str) -> Nodes:
    """Sorted node ids; PlacementError for a repeated or empty one."""
    if isinstance(ids, str):
        raise PlacementError(f"{what} must be a list of node ids, not the string {ids!r}")
    found = tuple(ids)
    if bad := [n for n in found if not isinstance(n, str) or not n]:
        raise PlacementError(f"{what}: {bad[0]!r} is not a node id")
    if repeated := sorted(n for n, seen in Counter(found).items() if seen > 1):
        raise PlacementError(f"{what}: {repeated} given more than once")
    return tuple(sorted(found))


def _parse(raw: bytes) -> object:
    if not isinstance(raw, bytes | bytearray):
        raise PlacementError(f"an assignment is read from bytes, not {type(raw).__name__}")
    try:
        return json.loads(raw, object_pairs_hook=_object)
    except PlacementError:
        raise
    except RecursionError:
        raise PlacementError("the assignment is not JSON: nested too deeply") from None
    except ValueError as exc:  # not JSON, not UTF-8, a number too long
        raise PlacementError(f"the assignment is not JSON: {exc}") from None


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    body = dict(pairs)
    if len(body) < len(pairs):
        repeated = sorted(k for k, seen in Counter(k for k, _ in pairs).items() if seen > 1)
        raise PlacementError(f"the assignment repeats the field {repeated[0]!r}")
    return body


def _fields(value: object, names: tuple[str, ...], what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise PlacementError(f"{what} is not a JSON object")
    if missing := [n for n in names if n not in value]:
        raise PlacementError(f"{what} has no {missing[0]!r}")
    if unknown := sorted(set(value) - set(names)):
        raise PlacementError(f"{what} has an unknown field {unknown[0]!r}")
    return value


def _ids(value: object, what: str) -> Nodes:
    if not isinstance(value, list) or not all(isinstance(n, str) for n in value):
        raise PlacementError(f"{what} is not a list of node ids: {value!r}")
    return tuple(value)
