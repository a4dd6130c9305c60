"""Placement as versioned data: which nodes serve each partition, which warm up to take over,
and where the cluster is heading.

An elected leader computes the next Assignment with `plan` and stores it as JSON (`to_json`);
every node routes by the newest one it has read (`replica_map`, `hosted_by`, as
`Cluster.replica_map` today) and pulls what it is assigned (`assigned_to`). A static
`[[cluster.nodes]]` file is the fixed assignment `static` returns. Everything here is pure and
deterministic: the same inputs give the same assignment, in whatever order members are given.

For each partition an Assignment holds
  serving  the replicas that answer queries: the active first, then the standbys;
  warming  replicas being copied to a node, which serve once caught up (KIP-441's warm-ups);
  target   where the partition is heading: the balanced, sticky goal `target` computes.
The target is stored, not recomputed from what serves: a new leader carries on the same moves,
and a move under way is not decided again.

Invariants of every Assignment (checked when one is built, from JSON too):
- no node twice in a partition: serving and warming have no repeats and share no node;
- warming is part of the target; serving and target hold at most `replicas` nodes.
What `target` returns for members M, with R = min(replicas, len(M)):
- every partition has R distinct members, the first its active;
- replica counts per member differ by at most 1, and so do active counts;
- sticky: a replica stays where it is unless balance needs it elsewhere, so a joining node
  takes its share and nothing else moves, and a leaving node's replicas move and nothing else
  does, unless the survivors cannot take them evenly: then another moves too (one, in every
  case tests/unit/test_placement.py measures);
- what members hold counts (`holding`: they serve a partition, or its files are on their
  disk): a member back from an absence (the previous target placed it nowhere) takes back
  what it holds over a member of the target that has no data of it yet (warming up, or not
  started), and a replica that must move goes to a member that holds it first, so that
  nothing a member holds is copied again;
- an active stays active unless actives must be rebalanced, which makes a standby active (no
  data moves), and no changed active could be given back with the actives still balanced;
- a fixed point: asked again with the same members and replicas, it answers the same.
What `plan` does, for each partition:
- a replica on a node neither member nor retiring stops serving at once (the node is gone);
- a node the target adds warms up first, and serves once reported caught up; at most
  `max_warmups` warm-ups are started in the cluster, partitions with the fewest serving
  replicas first (lost replicas are restored before balance moves);
- a serving replica the target no longer has (on a retiring node, or moved for balance)
  stops serving once its replacement serves: a planned move never lowers a partition's
  serving replicas below the target's count, and never removes its last one;
- a replica serves only once caught up: when every serving replica of a partition is gone,
  they go on serving (a node whose lease expired may still answer, cut off from the
  coordinator alone) until a warm-up of the target catches up, and their warm-ups start
  first;
- a partition that no replica served gets its target serving at once (a cold start: there is
  nothing to warm up from).
"""

from __future__ import annotations

import heapq
import json
from collections import Counter, deque
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

FORMAT = 1  # of the JSON form; a reader refuses any other
STATIC_VERSION = 0  # what a static [[cluster.nodes]] file implies; a leader's start at 1
MAX_WARMUPS = 2  # concurrent warm-ups in the cluster: KIP-441's max.warmup.replicas default
# What a move costs when `target` chooses among chains of moves that make room for a replica.
REROUTE_COST = 0  # a replica placed earlier in the same computation: nothing was copied yet
UNSTARTED_COST = 1  # a target replica whose warm-up has not started
MOVE_COST = 2  # a replica with data
ACTIVE_MOVE_COST = 3  # ...that is also the active: dearer than one move, cheaper than two
HOLDER_SAVING = 1  # a move to a member that holds the partition: it copies nothing

Nodes = tuple[str, ...]
Placement = tuple[Nodes, ...]  # partition -> node ids
Replica = tuple[int, str]  # (partition, node id)
# A chain of moves offered: (cost, whether the receiver lacks the partition's data, its load,
# partitions it shares with the other holders, receiver, giver, partition): cheapest first,
# then to a member that holds the data, then the least loaded, then the one that spreads a
# partition's replicas over the most different nodes.
_Offer = tuple[int, bool, int, int, str, str, int]
FIELDS = ("format", "version", "replicas", "partitions")
PARTITION_FIELDS = ("serving", "warming", "target")
NO_NODE = ""  # no node ids are empty: marks the start of a chain of moves


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

    def placed(self, node: str) -> bool:
        """Whether the target has `node` in some partition: a node it has nowhere was not a
        member when it was made (or has no share, with more members than replicas)."""
        return any(node in nodes for nodes in self.target)

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


def target(
    previous: Assignment | None,
    members: Sequence[str],
    partitions: int,
    replicas: int,
    holding: Collection[Replica] = frozenset(),
) -> Placement:
    """The balanced goal for `members`, sticky to `previous` and to what members hold
    (`_sticky`): partition -> node ids, the active first. `holding`: the replicas whose data
    a member has (it serves them, or their files are on its disk)."""
    eligible = _node_ids(members, "members")
    _check_shape(previous, partitions, replicas)
    if not eligible:
        return ((),) * partitions
    count = min(replicas, len(eligible))
    holds = frozenset(holding)
    was = {p: n for p in range(partitions) if (n := _was_active(previous, p))}
    shareless = {n for n in eligible if previous is None or not previous.placed(n)}
    while True:  # a member left without a share may hold data a replica placed lacks
        found = _place(previous, partitions, eligible, count, holds, frozenset(shareless), was)
        left_out = {n for n in eligible if not any(n in nodes for nodes in found)}
        if left_out <= shareless:
            return found
        shareless |= left_out


def _place(
    previous: Assignment | None,
    partitions: int,
    members: Nodes,
    count: int,
    holding: frozenset[Replica],
    shareless: frozenset[str],
    was: dict[int, str],
) -> Placement:
    """A balanced placement, sticky to `previous`, with `shareless` taken for members that
    have no share yet."""
    held = [_sticky(previous, p, members, holding, shareless, count) for p in range(partitions)]
    balance = _Balance(held, members, count, _prices(previous, held, was, holding), holding)
    balance.fill()
    balance.shed()
    actives = _actives(balance.placement, was, balance.prices, members)
    return tuple((a, *(n for n in balance.placement[p] if n != a)) for p, a in enumerate(actives))


def plan(
    previous: Assignment | None,
    members: Sequence[str],
    retiring: Collection[str],
    partitions: int,
    replicas: int,
    caught_up: Collection[Replica] = frozenset(),
    max_warmups: int = MAX_WARMUPS,
    holding: Collection[Replica] = frozenset(),
) -> Assignment:
    """The next assignment: `previous` itself when nothing changes, else one version newer.

    members may host (registered, not draining); retiring nodes keep serving until their
    replacements are caught up and receive nothing new; any other node is gone. caught_up
    holds the warm-ups reported as caught up with their partition's active; others are
    ignored (a report may arrive after its warm-up was called off). holding: the replicas
    whose data members have (`target`)."""
    eligible = _node_ids(members, "members")
    draining = frozenset(_node_ids(retiring, "retiring"))
    if both := sorted(draining.intersection(eligible)):
        raise PlacementError(f"nodes both members and retiring: {both}")
    _whole(max_warmups, "max_warmups", 1)
    goal = target(previous, eligible, partitions, replicas, holding)
    before = previous or _empty(partitions, replicas)
    alive = draining.union(eligible)
    steps = [_advance(p, before, goal[p], alive, draining, caught_up) for p in range(partitions)]
    serving = tuple(s for s, _ in steps)
    warming = _warm_up(serving, [w for _, w in steps], goal, alive, max_warmups)
    after = (replicas, serving, warming, goal)
    if previous and _content(previous) == after:
        return previous
    return Assignment(before.version + 1, *after)


def drain_check(assignment: Assignment, node: str, members: Sequence[str]) -> None:
    """Refuse to drain a node nobody knows, or the last member. Any other drain leaves every
    partition a replica: the target gives each min(replicas, members) of the others, and the
    draining node serves until they are caught up."""
    eligible = _node_ids(members, "members")
    known = set(eligible).union(*assignment.serving, *assignment.warming, *assignment.target)
    if node not in known:
        raise PlacementError(f"unknown node {node!r}; nodes are {sorted(known)}")
    if eligible == (node,):
        raise PlacementError(
            f"draining {node!r} would leave every partition without a replica: it is the last"
            " member; add a node first"
        )


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


class _Balance:
    """Replicas placed until every partition has its count and member loads differ by at most
    1, each along the cheapest chain of moves that ends at a member with room (a chain never
    puts a node twice in a partition)."""

    def __init__(
        self,
        held: list[list[str]],
        members: Nodes,
        count: int,
        prices: dict[Replica, int],
        holding: frozenset[Replica],
    ) -> None:
        self.placement = held
        self.members = members
        self.count = count
        self.prices = prices  # a replica absent was placed by this computation
        self.holding = holding
        self.holds: dict[str, set[int]] = {n: set() for n in members}
        for p, nodes in enumerate(held):
            for n in nodes:
                self.holds[n].add(p)
        self.load = Counter({n: len(self.holds[n]) for n in members})
        self.share, self.larger = divmod(len(held) * count, len(members))
        self.shared: Counter[tuple[str, str]] = Counter()  # partitions two nodes both hold
        for nodes in held:
            self.shared.update(_pair(a, b) for a in nodes for b in nodes if a < b)

    def fill(self) -> None:
        for p, nodes in enumerate(self.placement):
            while len(nodes) < self.count:
                self._augment(NO_NODE, p, self._room)

    def shed(self) -> None:
        """From the busiest member to one with two fewer, until none has."""
        while True:
            busiest = _busiest(self.load)
            if self.load[busiest[0]] - self.load[busiest[-1]] < 2:
                return
            self._augment(busiest[0], -1, self._lighter(self.load[busiest[0]]))

    def _lighter(self, load: int) -> Callable[[str], bool]:
        return lambda node: self.load[node] <= load - 2

    def _room(self, node: str) -> bool:
        """Below its share, or at it while the larger shares are not all taken."""
        load = self.load[node]
        above = sum(max(0, held - self.share) for held in self.load.values())
        return load < self.share or (load == self.share and above < self.larger)

    def _augment(self, source: str, partition: int, room: Callable[[str], bool]) -> None:
        """One replica of `partition` more (no source), or one fewer on `source`."""
        came: dict[str, tuple[str, int]] = {source: (NO_NODE, -1)} if source else {}
        heap: list[_Offer] = []
        first = sorted(self.holds[source]) if source else [partition]
        self._offer(heap, came, 0, source, first)
        while heap:
            cost, _, _, _, node, giver, q = heapq.heappop(heap)
            if node in came:
                continue
            came[node] = (giver, q)
            if room(node):
                self._apply(came, node)
                return
            self._offer(heap, came, cost, node, sorted(self.holds[node]))
        # Unreachable: while a replica is missing or loads differ by 2, some member has room
        # and a move, or a chain of two, reaches it (a node with room lacks some partition
        # that a fuller node holds).
        raise AssertionError("no chain of moves ends at a member with room")

    def _offer(
        self,
        heap: list[_Offer],
        came: dict[str, tuple[str, int]],
        cost: int,
        giver: str,
        parts: list[int],
    ) -> None:
        for q in parts:
            price = self.prices.get((q, giver), REROUTE_COST) if giver else 0
            others = [n for n in self.placement[q] if n != giver]
            for m in self.members:
                if m not in came and m not in self.placement[q]:
                    lacks = (q, m) not in self.holding
                    step = price if lacks else max(price - HOLDER_SAVING, 0)
                    spread = sum(self.shared[_pair(m, n)] for n in others)
                    heapq.heappush(heap, (cost + step, lacks, self.load[m], spread, m, giver, q))

    def _apply(self, came: dict[str, tuple[str, int]], node: str) -> None:
        giver, q = came[node]
        while q >= 0:
            self._move(q, giver, node)
            node = giver
            giver, q = came.get(node, (NO_NODE, -1))

    def _move(self, partition: int, giver: str, receiver: str) -> None:
        nodes = self.placement[partition]
        others = [n for n in nodes if n != giver]
        self.shared.update(_pair(receiver, n) for n in others)
        if giver:
            self.shared.subtract(_pair(giver, n) for n in others)
            nodes[nodes.index(giver)] = receiver
            self.holds[giver].discard(partition)
            self.load[giver] -= 1
        else:
            nodes.append(receiver)
        self.holds[receiver].add(partition)
        self.load[receiver] += 1


def _actives(
    placement: list[list[str]], was: dict[int, str], kept: Collection[Replica], members: Nodes
) -> list[str]:
    """Each partition's active: the previous one while it holds the partition, else the
    least busy holder (one with data first); then balanced by making standbys active."""
    active = {p: n for p, n in was.items() if n in placement[p]}
    counts = Counter({n: 0 for n in members})
    counts.update(active.values())
    for p, nodes in enumerate(placement):
        if p not in active:
            active[p] = _least_busy(p, nodes, counts, kept)
            counts[active[p]] += 1
    while any(_shift_active(c, active, placement, counts) for c in _levels(counts)):
        pass
    _give_back(active, was, placement, counts)
    return [active[p] for p in range(len(placement))]


def _levels(counts: Counter[str]) -> list[int]:
    return sorted(set(counts.values()), reverse=True)


def _give_back(
    active: dict[int, str], was: dict[int, str], placement: list[list[str]], counts: Counter[str]
) -> None:
    """Undo the changes the balance did not need: a previous active that still holds its
    partition takes it back while it has fewer actives than the node that took it over."""
    while undo := [
        p
        for p, old in sorted(was.items())
        if old in placement[p] and counts[old] < counts[active[p]]
    ]:
        p = undo[0]
        counts[active[p]] -= 1
        counts[was[p]] += 1
        active[p] = was[p]


def _pair(a: str, b: str) -> tuple[str, str]:
    return (a, b) if a < b else (b, a)


def _least_busy(p: int, nodes: list[str], counts: Counter[str], kept: Collection[Replica]) -> str:
    return min(nodes, key=lambda n: (counts[n], (p, n) not in kept, n))


def _busiest(counts: Counter[str]) -> list[str]:
    return sorted(counts, key=lambda n: (-counts[n], n))


def _shift_active(
    level: int, active: dict[int, str], placement: list[list[str]], counts: Counter[str]
) -> bool:
    """One active fewer on a node with `level` actives, along the shortest chain of standbys
    made active that ends at a node with at most level - 2; False when there is none.

    When no level has such a chain, the actives are as even as these placements allow
    (Harvey et al., Semi-matchings for bipartite graphs and load balancing, 2006)."""
    sources = sorted(n for n, c in counts.items() if c == level)
    came: dict[str, tuple[str, int]] = {n: (NO_NODE, -1) for n in sources}
    queue = deque(sources)
    while queue:
        node = queue.popleft()
        for p in sorted(q for q, n in active.items() if n == node):
            for m in placement[p]:
                if m in came:
                    continue
                came[m] = (node, p)
                if counts[m] <= level - 2:
                    counts[m] += 1
                    while (step := came[m])[1] >= 0:
                        active[step[1]], m = m, step[0]
                    counts[m] -= 1
                    return True
                queue.append(m)
    return False


def _sticky(
    previous: Assignment | None,
    p: int,
    members: Nodes,
    holding: frozenset[Replica],
    shareless: frozenset[str],
    count: int,
) -> list[str]:
    """Up to `count` members to keep partition p on, chosen in order of preference: those of
    the previous target that have its data (they serve it, or hold it), then members without
    a share that have it (back from an absence: placed nowhere by the previous target, they
    held on to it), then the rest of the target (warming up, or not started), then those
    that still serve it (relieved by a move under way). The target's order is kept."""
    goal = previous.target[p] if previous else ()
    serving = previous.serving[p] if previous else ()
    has = {*serving, *(n for n in members if (p, n) in holding)}
    ranked = dict.fromkeys(
        (
            *(n for n in goal if n in has),
            *(n for n in members if n in shareless and n in has),
            *goal,
            *serving,
        )
    )
    chosen = [n for n in ranked if n in members][:count]
    return sorted(chosen, key=lambda n: goal.index(n) if n in goal else len(goal))


def _was_active(previous: Assignment | None, p: int) -> str | None:
    if previous is None:
        return None
    return next(iter(previous.target[p] or previous.serving[p]), None)


def _prices(
    previous: Assignment | None,
    held: list[list[str]],
    was: dict[int, str],
    holding: frozenset[Replica],
) -> dict[Replica, int]:
    """What moving each replica already placed would cost."""
    prices = {}
    for p, nodes in enumerate(held):
        for n in nodes:
            copied = (p, n) in holding or (
                previous is not None and (n in previous.serving[p] or n in previous.warming[p])
            )
            extra = ACTIVE_MOVE_COST - MOVE_COST if was.get(p) == n else 0
            prices[p, n] = MOVE_COST + extra if copied else UNSTARTED_COST
    return prices


def _advance(
    p: int,
    before: Assignment,
    goal: Nodes,
    alive: frozenset[str],
    draining: frozenset[str],
    caught_up: Collection[Replica],
) -> tuple[Nodes, Nodes]:
    """Partition p's next serving and warming replicas, one step toward `goal`."""
    was = before.serving[p]
    serving = [n for n in was if n in alive]
    warming = [n for n in before.warming[p] if n in goal]
    serving += [n for n in warming if (p, n) in caught_up]
    warming = [n for n in warming if n not in serving]
    if serving:
        serving = _drop_replaced(serving, goal, draining)
    elif was and goal:
        serving = list(was)  # all gone, and nobody else has the data: they may still answer
    else:
        return goal, ()
    return _order(serving, goal, was[:1]), tuple(warming)


def _drop_replaced(serving: list[str], goal: Nodes, draining: frozenset[str]) -> list[str]:
    """Serving replicas the target no longer has, dropped as far as their replacements serve:
    those on retiring nodes first, then the last standbys."""
    surplus = len(serving) - max(len(goal), 1)
    leaving = [n for n in reversed(serving) if n not in goal]
    leaving.sort(key=lambda n: n not in draining)
    dropped = set(leaving[: max(surplus, 0)])
    return [n for n in serving if n not in dropped]


def _order(serving: list[str], goal: Nodes, previous: Nodes) -> Nodes:
    """Serving replicas in the target's order, those it no longer has last; the previous
    active stays active until the target's active serves."""
    ranked = sorted(serving, key=lambda n: goal.index(n) if n in goal else len(goal))
    if goal and goal[0] not in serving and previous and previous[0] in serving:
        ranked.remove(previous[0])
        ranked.insert(0, previous[0])
    return tuple(ranked)


def _warm_up(
    serving: Placement,
    warming: list[Nodes],
    goal: Placement,
    alive: frozenset[str],
    max_warmups: int,
) -> Placement:
    """Warm-ups started for the target's replicas not yet there, within the cluster's budget:
    partitions with the fewest live serving replicas first."""
    budget = max_warmups - sum(map(len, warming))
    wanted = sorted(
        (len(alive.intersection(serving[p])), p, rank, n)
        for p, nodes in enumerate(goal)
        for rank, n in enumerate(nodes)
        if n not in serving[p] and n not in warming[p]
    )
    started = [list(w) for w in warming]
    for _, p, _, n in wanted[: max(budget, 0)]:
        started[p].append(n)
    return tuple(tuple(w) for w in started)


def _content(a: Assignment) -> tuple[int, Placement, Placement, Placement]:
    """All but the version."""
    return a.replicas, a.serving, a.warming, a.target


def _empty(partitions: int, replicas: int) -> Assignment:
    nothing = ((),) * partitions
    return Assignment(STATIC_VERSION, replicas, nothing, nothing, nothing)


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


def _check_shape(previous: Assignment | None, partitions: int, replicas: int) -> None:
    _whole(partitions, "partitions", 1)
    _whole(replicas, "replicas", 1)
    if previous is not None and previous.partitions != partitions:
        raise PlacementError(
            f"the assignment has {previous.partitions} partitions, not {partitions}: another"
            " count sends keys to other partitions, so it makes a new cluster"
        )


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
