"""Placement as versioned data (contracts/placement.py): the assignment and its JSON form,
the balanced, sticky target, and the plan that walks to it through warm-ups.

Replicas moved (serving replicas added) from a settled assignment to the settled one after
the change, 2 replicas per partition; round-robin is today's `(partition + r) % len(nodes)`
recomputed over the new node list, sticky is `plan` repeated until it settles (5 -> 2 as a
drain of three nodes):

| partitions | change | round-robin: moved, actives changed | sticky: moved, actives changed |
| ---------- | ------ | ----------------------------------- | ------------------------------ |
| 9          | 3 -> 4 | 9, 6                                | 4, 2                           |
| 9          | 3 -> 5 | 10, 6                               | 6, 3                           |
| 9          | 5 -> 2 | 11, 7                               | 10, 5                          |
| 18         | 3 -> 4 | 16, 12                              | 9, 4                           |
| 18         | 3 -> 5 | 19, 12                              | 14, 6                          |
| 18         | 5 -> 2 | 21, 14                              | 21, 10                         |

Sticky moves the new nodes' shares on a join and the leaving nodes' replicas on a removal
(5 -> 2 can move no fewer: those are the replicas the three nodes held).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Collection, Sequence
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from contracts.placement import (
    Assignment,
    Placement,
    PlacementError,
    Replica,
    drain_check,
    moves,
    plan,
    static,
    target,
)
from contracts.project import Cluster, Node

REPRODUCIBLE = settings(
    derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
MAX_NODES = 7
MAX_PARTITIONS = 24
MAX_REPLICAS = 3
DELETE = object()  # with_edit: remove the field instead


def ids(count: int) -> list[str]:
    return [f"n{i}" for i in range(1, count + 1)]


def layout() -> st.SearchStrategy[tuple[int, int, int]]:
    """(nodes, partitions, replicas) of a cluster."""
    return st.tuples(
        st.integers(1, MAX_NODES), st.integers(1, MAX_PARTITIONS), st.integers(1, MAX_REPLICAS)
    )


def settled(placement: Placement, replicas: int) -> Assignment:
    """An assignment serving its target, nothing warming."""
    return Assignment(1, replicas, placement, ((),) * len(placement), placement)


def counts(placement: Placement) -> tuple[Counter[str], Counter[str]]:
    """Replicas and actives per node."""
    held = Counter(n for nodes in placement for n in nodes)
    return held, Counter(nodes[0] for nodes in placement if nodes)


def assert_balanced(placement: Placement, members: Sequence[str], replicas: int) -> None:
    if not members:
        assert all(not nodes for nodes in placement)
        return
    assert all(len(nodes) == min(replicas, len(members)) for nodes in placement)
    assert all(len(set(nodes)) == len(nodes) and set(nodes) <= set(members) for nodes in placement)
    for per_node in counts(placement):
        spread = [per_node[n] for n in members]
        assert max(spread) - min(spread) <= 1, (per_node, placement)


def needless(before: Placement, after: Placement, members: Sequence[str]) -> list[int]:
    """The partitions whose active changed though the old one still holds the partition and
    could have it back with the actives still balanced: there should be none."""
    actives = Counter({n: 0 for n in members})
    actives.update(nodes[0] for nodes in after if nodes)
    found = []
    for p, (was, now) in enumerate(zip(before, after, strict=True)):
        if was and now and was[0] != now[0] and was[0] in now:
            back = actives.copy()
            back.update({was[0]: 1, now[0]: -1})
            if max(back.values()) - min(back.values()) <= 1:
                found.append(p)
    return found


# --- the assignment and its JSON form ------------------------------------------------------


def test_static_is_todays_replica_map() -> None:
    order = ["b", "a", "c"]
    nodes = tuple(Node(n, f"127.0.0.1:{8100 + i}", Path(n)) for i, n in enumerate(order))
    cluster = Cluster(partitions=7, replicas=2, nodes=nodes, secret="s")
    a = static(order, 7, 2)
    assert a.replica_map == cluster.replica_map
    assert all(a.hosted_by(n) == cluster.hosted_by(n) for n in order)
    assert a.version == 0  # older than any a leader writes


def test_what_a_node_serves_and_holds() -> None:
    a = Assignment(4, 2, (("a", "b"), ("b",)), ((), ("c",)), (("a", "b"), ("c", "b")))
    assert a.replica_map == {0: ("a", "b"), 1: ("b",)}
    assert (a.hosted_by("b"), a.hosted_by("c"), a.assigned_to("c")) == ([0, 1], [], [1])
    assert a.partitions == 2


def test_moves() -> None:
    a = Assignment(1, 2, (("a", "b"), ("b", "c")), ((), ()), (("a", "b"), ("b", "c")))
    b = Assignment(2, 2, (("b", "a"), ("b", "d")), ((), ()), (("b", "a"), ("b", "d")))
    assert moves(a, b) == moves(a, b)
    moved = moves(a, b)
    assert (moved.added, moved.removed, moved.actives) == ({(1, "d")}, {(1, "c")}, {0})
    with pytest.raises(PlacementError, match="2 partitions against 3"):
        moves(a, static(["a"], 3, 1))


@pytest.mark.parametrize(
    ("serving", "warming", "goal", "message"),
    [
        ((("a", "a"),), ((),), (("a",),), r"partition 0: a node is twice in its serving"),
        ((("a",),), (("a",),), (("a",),), r"partition 0: \['a'\] both serving and warming"),
        ((("a",),), (("b",),), (("a",),), r"partition 0: \['b'\] warming but not in the target"),
        ((("a", "b", "c"),), ((),), (("a",),), r"serving \['a', 'b', 'c'\] has more than 2"),
        ((("a",),), ((),), ((), ()), "serving, warming and target cover 1, 1 and 2 partitions"),
        ((), (), (), "an assignment has at least one partition"),
        (((1,),), ((),), ((),), "partition 0: serving is not a tuple of node ids"),
        ((["a"],), ((),), ((),), "partition 0: serving is not a tuple of node ids"),
    ],
)
def test_an_assignment_checks_itself(
    serving: Placement, warming: Placement, goal: Placement, message: str
) -> None:
    with pytest.raises(PlacementError, match=message):
        Assignment(1, 2, serving, warming, goal)


def test_static_refuses() -> None:
    with pytest.raises(PlacementError, match="between 1 and the node count 2"):
        static(["a", "b"], 4, 3)
    with pytest.raises(PlacementError, match=r"nodes: \['a'\] given more than once"):
        static(["a", "a"], 4, 1)
    with pytest.raises(PlacementError, match="at least one partition"):
        static(["a"], 0, 1)


def test_json_round_trip_and_form() -> None:
    a = Assignment(7, 2, (("n1", "n2"), ("n2",)), ((), ("n3",)), (("n1", "n2"), ("n2", "n3")))
    assert Assignment.from_json(a.to_json()) == a
    assert json.loads(a.to_json()) == {
        "format": 1,
        "version": 7,
        "replicas": 2,
        "partitions": [
            {"serving": ["n1", "n2"], "warming": [], "target": ["n1", "n2"]},
            {"serving": ["n2"], "warming": ["n3"], "target": ["n2", "n3"]},
        ],
    }


def valid() -> dict[str, object]:
    a = Assignment(3, 2, (("n1", "n2"), ("n2",)), ((), ("n1",)), (("n1", "n2"), ("n2", "n1")))
    body: dict[str, object] = json.loads(a.to_json())
    return body


def with_edit(path: Sequence[object], value: object) -> bytes:
    """A valid assignment's JSON with the value at `path` replaced, or removed (DELETE)."""
    body: object = valid()
    parent = body
    for key in path[:-1]:
        parent = parent[key]  # type: ignore[index]
    if value is DELETE:
        del parent[path[-1]]  # type: ignore[attr-defined]
    else:
        parent[path[-1]] = value  # type: ignore[index]
    return json.dumps(body).encode()


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"", "the assignment is not JSON"),
        (b"\xff\xfe\x00", "the assignment is not JSON"),
        (b"[" * 100_000, "the assignment is not JSON"),
        (b"1" * 5000, "the assignment is not JSON"),
        (b"[]", "the assignment is not a JSON object"),
        (b'{"format": 1, "format": 1}', "repeats the field 'format'"),
        (with_edit(["format"], 2), "has format 2; this reads 1"),
        (with_edit(["format"], True), "has format True; this reads 1"),
        (with_edit(["version"], DELETE), "the assignment has no 'version'"),
        (with_edit(["extra"], 1), "the assignment has an unknown field 'extra'"),
        (with_edit(["version"], -1), "version must be a whole number of at least 0, not -1"),
        (with_edit(["version"], 1.5), "version must be .* not 1.5"),
        (with_edit(["version"], float("nan")), "version must be .* not nan"),
        (with_edit(["replicas"], "2"), "replicas must be .* not '2'"),
        (with_edit(["partitions"], {}), "the assignment's partitions is not a list"),
        (with_edit(["partitions"], []), "an assignment has at least one partition"),
        (with_edit(["partitions", 1], []), "partition 1 is not a JSON object"),
        (with_edit(["partitions", 0, "target"], DELETE), "partition 0 has no 'target'"),
        (with_edit(["partitions", 0, "x"], []), "partition 0 has an unknown field 'x'"),
        (with_edit(["partitions", 0, "serving"], "n1"), "partition 0: serving is not a list"),
        (with_edit(["partitions", 0, "warming"], [None]), "partition 0: warming is not a list"),
        (with_edit(["partitions", 0, "serving"], ["n1", "n1"]), "twice in its serving"),
        (with_edit(["partitions", 0, "warming"], ["n3"]), r"\['n3'\] warming but not in the"),
        (with_edit(["partitions", 1, "serving"], ["n1"]), r"\['n1'\] both serving and warming"),
        (with_edit(["partitions", 0, "serving"], [""]), "serving is not a tuple of node ids"),
    ],
)
def test_malformed_json_is_refused_naming_the_problem(raw: bytes, message: str) -> None:
    with pytest.raises(PlacementError, match=message):
        Assignment.from_json(raw)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=4),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=9), inner, max_size=4)
    ),
    max_leaves=12,
)
FIELD_NAMES = ["format", "version", "replicas", "partitions", "serving", "warming", "target"]


@REPRODUCIBLE
@given(st.lists(st.sampled_from([*FIELD_NAMES, 0, 1]), min_size=1, max_size=4), JSON)
def test_any_edit_of_a_valid_document_is_read_or_refused_cleanly(
    path: list[object], value: object
) -> None:
    try:
        raw = with_edit(path, value)
    except (KeyError, IndexError, TypeError):
        return  # the path leads nowhere in the document
    read_or_refused(raw)


@REPRODUCIBLE
@given(st.binary(max_size=64) | JSON.map(lambda v: json.dumps(v).encode()))
def test_any_bytes_are_read_or_refused_cleanly(raw: bytes) -> None:
    read_or_refused(raw)


def read_or_refused(raw: bytes) -> None:
    """Refused with a PlacementError, or read into an assignment that round-trips."""
    try:
        a = Assignment.from_json(raw)
    except PlacementError:
        return
    assert Assignment.from_json(a.to_json()) == a


# --- the target ----------------------------------------------------------------------------


@REPRODUCIBLE
@given(layout())
def test_a_first_target_is_balanced(shape: tuple[int, int, int]) -> None:
    size, partitions, replicas = shape
    assert_balanced(target(None, ids(size), partitions, replicas), ids(size), replicas)


@REPRODUCIBLE
@given(layout())
def test_a_join_moves_the_new_nodes_share_and_nothing_else(shape: tuple[int, int, int]) -> None:
    size, partitions, replicas = shape
    before = settled(target(None, ids(size), partitions, replicas), replicas)
    members = ids(size + 1)
    after = target(before, members, partitions, replicas)
    moved = moves(before, settled(after, replicas))
    share = counts(after)[0][members[-1]]
    assert {n for _, n in moved.added} <= {members[-1]}
    assert len(moved.added) == share <= -(-partitions * min(replicas, size + 1) // (size + 1))
    grown = partitions * (min(replicas, size + 1) - min(replicas, size))
    assert len(moved.removed) == share - grown
    assert not needless(before.target, after, members)
    assert_balanced(after, members, replicas)


@REPRODUCIBLE
@given(layout(), st.data())
def test_a_leave_moves_its_replicas_and_rarely_one_more(
    shape: tuple[int, int, int], data: st.DataObject
) -> None:
    """Exactly its replicas, unless the survivors cannot take them evenly: then one more
    (test_a_leave_that_must_move_one_more)."""
    size, partitions, replicas = shape
    assume(size >= 2)
    before = settled(target(None, ids(size), partitions, replicas), replicas)
    gone = data.draw(st.sampled_from(ids(size)))
    members = [n for n in ids(size) if n != gone]
    after = target(before, members, partitions, replicas)
    moved = moves(before, settled(after, replicas))
    lost = {(p, gone) for p in before.hosted_by(gone)}
    assert lost <= moved.removed and len(moved.removed - lost) <= 1
    shrunk = partitions * (min(replicas, size) - min(replicas, size - 1))
    assert len(moved.added) == len(moved.removed) - shrunk
    assert not needless(before.target, after, members)
    assert_balanced(after, members, replicas)


def test_a_leave_that_must_move_one_more() -> None:
    """5 partitions x 2 replicas on 6 nodes: n5 and n6 hold one replica each, of the same
    partition. Without n6 every node must hold 2; the only node with room, n5, holds the
    orphan already, so another replica must move to n5."""
    before = settled(target(None, ids(6), 5, 2), 2)
    assert before.hosted_by("n5") == before.hosted_by("n6") == [2]
    after = target(before, ids(5), 5, 2)
    assert len(moves(before, settled(after, 2)).removed) == 2
    assert_balanced(after, ids(5), 2)


@REPRODUCIBLE
@given(layout(), st.permutations(range(MAX_NODES)))
def test_the_target_is_deterministic_and_a_fixed_point(
    shape: tuple[int, int, int], order: list[int]
) -> None:
    size, partitions, replicas = shape
    first = target(None, ids(size), partitions, replicas)
    shuffled = [ids(MAX_NODES)[i] for i in order if i < size]
    assert target(None, shuffled, partitions, replicas) == first
    assert target(settled(first, replicas), shuffled, partitions, replicas) == first


def test_a_static_clusters_assignment_is_kept_and_grows_like_any() -> None:
    a = static(ids(3), 9, 2)
    assert target(a, ids(3), 9, 2) == a.target  # round-robin is balanced here
    assert len(moves(a, settled(target(a, ids(4), 9, 2), 2)).added) == 4


def test_replicas_raised_and_lowered() -> None:
    a = settled(target(None, ids(4), 6, 2), 2)
    up = target(a, ids(4), 6, 3)
    assert_balanced(up, ids(4), 3)
    assert all(set(a.target[p]) < set(up[p]) for p in range(6))
    down = target(settled(up, 3), ids(4), 6, 1)
    assert_balanced(down, ids(4), 1)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"members": ["n1", "n1"]}, r"members: \['n1'\] given more than once"),
        ({"members": "n1"}, "members must be a list of node ids, not the string 'n1'"),
        ({"members": ["n1", ""]}, "members: '' is not a node id"),
        ({"partitions": 0}, "partitions must be a whole number of at least 1, not 0"),
        ({"replicas": 0}, "replicas must be a whole number of at least 1, not 0"),
        ({"replicas": True}, "replicas must be a whole number of at least 1, not True"),
        ({"previous": static(["n1"], 5, 1)}, "the assignment has 5 partitions, not 4"),
    ],
)
def test_target_refuses(kwargs: dict[str, object], message: str) -> None:
    args = {"previous": None, "members": ["n1", "n2"], "partitions": 4, "replicas": 2} | kwargs
    with pytest.raises(PlacementError, match=message):
        target(**args)  # type: ignore[arg-type]


# --- the plan ------------------------------------------------------------------------------


def warmups(a: Assignment) -> set[Replica]:
    return {(p, n) for p, nodes in enumerate(a.warming) for n in nodes}


def cold(members: Sequence[str], partitions: int, replicas: int) -> Assignment:
    return plan(None, members, (), partitions, replicas)


def settle(
    a: Assignment,
    members: Sequence[str],
    retiring: Sequence[str] = (),
    max_warmups: int = 2,
    holding: Collection[Replica] = frozenset(),
) -> tuple[Assignment, int]:
    """Plan, reporting every warm-up caught up, until nothing changes: the settled assignment
    and how many warm-ups were started on the way (the data copied)."""
    started = 0
    for _ in range(a.partitions * MAX_REPLICAS + 2):
        args = (members, retiring, a.partitions, a.replicas, warmups(a), max_warmups, holding)
        after = plan(a, *args)
        if after is a:
            return a, started
        started += len(warmups(after) - warmups(a))
        a = after
    raise AssertionError(f"not settled after a step per replica: {a}")


@REPRODUCIBLE
@given(layout())
def test_a_cold_start_serves_the_target_at_once(shape: tuple[int, int, int]) -> None:
    size, partitions, replicas = shape
    a = cold(ids(size), partitions, replicas)
    assert (a.version, a.serving, a.warming) == (1, a.target, ((),) * partitions)
    assert a.target == target(None, ids(size), partitions, replicas)


@REPRODUCIBLE
@given(layout(), st.integers(1, 3), st.data())
def test_the_plan_copies_exactly_what_the_target_moves(
    shape: tuple[int, int, int], max_warmups: int, data: st.DataObject
) -> None:
    size, partitions, replicas = shape
    before = cold(ids(size), partitions, replicas)
    members = data.draw(st.lists(st.sampled_from(ids(MAX_NODES)), min_size=1, unique=True))
    retiring = [n for n in ids(size) if n not in members]
    goal = target(before, members, partitions, replicas)
    after, copied = settle(before, members, retiring, max_warmups)
    assert (after.serving, after.target) == (goal, goal)
    assert (after is before) == (goal == before.target)
    assert copied == len(moves(before, after).added)
    assert not any(after.assigned_to(n) for n in retiring)


@pytest.mark.parametrize(
    ("partitions", "size", "new_size", "round_robin", "sticky"),
    [
        (9, 3, 4, (9, 6), (4, 2)),
        (9, 3, 5, (10, 6), (6, 3)),
        (9, 5, 2, (11, 7), (10, 5)),
        (18, 3, 4, (16, 12), (9, 4)),
        (18, 3, 5, (19, 12), (14, 6)),
        (18, 5, 2, (21, 14), (21, 10)),
    ],
)
def test_moves_against_round_robin(
    partitions: int,
    size: int,
    new_size: int,
    round_robin: tuple[int, int],
    sticky: tuple[int, int],
) -> None:
    """The table in this module's docstring."""
    rr = moves(static(ids(size), partitions, 2), static(ids(new_size), partitions, 2))
    assert (len(rr.added), len(rr.actives)) == round_robin
    before = cold(ids(size), partitions, 2)
    after, copied = settle(before, ids(new_size), retiring=ids(size)[new_size:])
    ours = moves(before, after)
    assert (len(ours.added), len(ours.actives), copied) == (*sticky, sticky[0])


def test_a_drained_active_serves_until_its_replacement_caught_up() -> None:
    a = cold(["n1"], 1, 1)
    a = plan(a, ["n2"], ["n1"], 1, 1)
    assert (a.serving, a.warming, a.target) == ((("n1",),), (("n2",),), (("n2",),))
    assert plan(a, ["n2"], ["n1"], 1, 1, {(0, "n1")}) is a  # not a warm-up: ignored
    a = plan(a, ["n2"], ["n1"], 1, 1, {(0, "n2")})
    assert (a.serving, a.warming, a.version) == ((("n2",),), ((),), 3)


def test_a_drain_never_lowers_a_partitions_serving_replicas() -> None:
    a = cold(ids(3), 9, 2)
    members, retiring = ids(2), ["n3"]
    a = plan(a, members, retiring, 9, 2, max_warmups=1)
    [(p, node)] = warmups(a)
    assert "n3" in a.serving[p] and node not in a.serving[p]
    a = plan(a, members, retiring, 9, 2, {(p, node)}, max_warmups=1)
    assert node in a.serving[p] and "n3" not in a.serving[p]
    while a.assigned_to("n3"):
        a = plan(a, members, retiring, 9, 2, warmups(a), max_warmups=1)
        assert all(len(nodes) == 2 for nodes in a.serving)
    assert a.serving == a.target


def test_lost_replicas_warm_up_before_balance_moves() -> None:
    a = plan(cold(ids(4), 8, 2), ids(5), (), 8, 2, max_warmups=1)
    [balance] = warmups(a)  # n5 takes its share one replica at a time
    a = plan(a, ["n1", "n2", "n3", "n5"], (), 8, 2, {balance}, max_warmups=1)
    assert not a.assigned_to("n4")  # gone: dropped at once
    [(p, _)] = warmups(a)
    assert len(a.serving[p]) == 1


def test_a_partitions_last_replicas_lost_serve_until_a_replacement_caught_up() -> None:
    """n2 serves partition 0 alone while n1 warms it up; n2's lease expires (it may still
    answer: cut off from the coordinator only). n1 has no data yet: n2 stays serving, and
    n1 serves once caught up."""
    a = Assignment(4, 2, (("n2",),), (("n1",),), (("n2", "n1"),))
    kept = plan(a, ["n1"], (), 1, 2)
    assert (kept.serving, kept.warming, kept.target) == ((("n2",),), (("n1",),), (("n1",),))
    assert plan(kept, ["n1"], (), 1, 2) is kept
    done = plan(kept, ["n1"], (), 1, 2, {(0, "n1")})
    assert (done.serving, done.warming) == ((("n1",),), ((),))


def test_a_lost_partitions_warm_up_starts_first() -> None:
    """Partition 0's only replica is gone, partition 1 has one left: within a budget of one
    warm-up, partition 0's starts."""
    a = Assignment(1, 2, (("n3",), ("n1",)), ((), ()), (("n3",), ("n1",)))
    after = plan(a, ["n1", "n2"], (), 2, 2, max_warmups=1)
    assert after.serving == (("n3",), ("n1",))
    assert warmups(after) == {(0, after.target[0][0])}


def test_a_warm_up_on_a_node_that_starts_draining_is_called_off() -> None:
    a = plan(cold(ids(2), 4, 2), ids(3), (), 4, 2, max_warmups=1)
    [(p, node)] = warmups(a)
    after = plan(a, ["n1", "n2"], [node], 4, 2, {(p, node)})
    assert not after.assigned_to(node)


def test_losing_every_node_and_starting_again() -> None:
    a = cold(ids(2), 4, 2)
    empty = plan(a, [], (), 4, 2)
    assert empty.serving == empty.target == ((),) * 4
    assert plan(empty, ["n7"], (), 4, 2).serving == (("n7",),) * 4  # a cold start again


def test_the_last_replicas_stay_while_no_member_could_take_them() -> None:
    after = plan(cold(ids(2), 4, 2), [], ids(2), 4, 2)
    assert all(len(nodes) == 1 for nodes in after.serving)


def test_drain_check() -> None:
    a = cold(ids(3), 6, 2)
    drain_check(a, "n2", ids(3))
    drain_check(a, "n2", ["n1", "n3"])  # draining already: nothing to refuse
    with pytest.raises(PlacementError, match=r"unknown node 'n9'; nodes are \['n1', 'n2', 'n3'\]"):
        drain_check(a, "n9", ids(3))
    with pytest.raises(PlacementError, match="'n1' would leave every partition without a replica"):
        drain_check(cold(["n1"], 6, 2), "n1", ["n1"])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"retiring": ["n1"]}, r"nodes both members and retiring: \['n1'\]"),
        ({"retiring": ["n3", "n3"]}, r"retiring: \['n3'\] given more than once"),
        ({"max_warmups": 0}, "max_warmups must be a whole number of at least 1, not 0"),
        ({"members": ["n1", "n1"]}, r"members: \['n1'\] given more than once"),
    ],
)
def test_plan_refuses(kwargs: dict[str, object], message: str) -> None:
    args = {"previous": None, "members": ["n1", "n2"], "retiring": (), "partitions": 4}
    with pytest.raises(PlacementError, match=message):
        plan(**(args | {"replicas": 2} | kwargs))  # type: ignore[arg-type]


class Elastic(RuleBasedStateMachine):
    """Joins, losses, returns, drains and catch-ups in any order, from a cold start: every
    assignment checked, and everything caught up at the end settles balanced."""

    def __init__(self) -> None:
        super().__init__()
        self.next_id = 0
        self.members: list[str] = []
        self.retiring: list[str] = []
        self.lost: list[str] = []
        self.kept: set[Replica] = set()  # what lost nodes served: they keep its files

    @initialize(shape=layout(), max_warmups=st.integers(1, 4))
    def start(self, shape: tuple[int, int, int], max_warmups: int) -> None:
        size, self.partitions, self.replicas = shape
        self.max_warmups = max_warmups
        self.members = [self.fresh() for _ in range(size)]
        self.a = cold(self.members, self.partitions, self.replicas)

    def fresh(self) -> str:
        self.next_id += 1
        return f"n{self.next_id}"

    def holding(self, a: Assignment) -> set[Replica]:
        """What members hold, as they tell the leader: what they serve, and kept files."""
        return {(p, n) for p, n in replicas_of(a) | self.kept if n in self.members}

    def step(self, caught_up: Collection[Replica] = ()) -> None:
        before, args = self.a, (self.members, self.retiring, self.partitions, self.replicas)
        after = plan(before, *args, caught_up, self.max_warmups, self.holding(before))
        assert after is before or after.version == before.version + 1
        again = plan(after, *args, (), self.max_warmups, self.holding(after))
        assert again is after  # one step does it all
        assert not needless(before.target, after.target, self.members)
        present = {*self.members, *self.retiring}
        for p, (was, now) in enumerate(zip(before.serving, after.serving, strict=True)):
            alive = [n for n in was if n in present]
            assert len(now) >= min(len(alive), max(len(after.target[p]), 1)), (p, was, now)
            # A replica serves once caught up; only a partition nobody served starts cold.
            new = set(now) - set(was) - {n for q, n in caught_up if q == p}
            assert not new or not was, (p, was, now)
        self.a = after

    @rule()
    def join(self) -> None:
        self.members.append(self.fresh())
        self.step()

    @precondition(lambda self: len(self.members + self.retiring) > 1)  # all lost: tested apart
    @rule(data=st.data())
    def lose(self, data: st.DataObject) -> None:
        node = data.draw(st.sampled_from(sorted(self.members + self.retiring)))
        for group in (self.members, self.retiring):
            if node in group:
                group.remove(node)
        self.lost.append(node)
        self.kept |= {(p, node) for p in self.a.hosted_by(node)}
        self.step()

    @precondition(lambda self: self.lost)
    @rule(data=st.data())
    def come_back(self, data: st.DataObject) -> None:
        """A lost node registers again (a drain ends with its run), with the files it kept."""
        node = data.draw(st.sampled_from(self.lost))
        self.lost.remove(node)
        self.members.append(node)
        self.step()

    @precondition(lambda self: self.members)
    @rule(data=st.data())
    def drain(self, data: st.DataObject) -> None:
        node = data.draw(st.sampled_from(sorted(self.members)))
        if self.members == [node]:
            with pytest.raises(PlacementError):
                drain_check(self.a, node, self.members)
            return
        drain_check(self.a, node, self.members)
        self.members.remove(node)
        self.retiring.append(node)
        self.step()

    @precondition(lambda self: warmups(self.a))
    @rule(data=st.data())
    def catch_up(self, data: st.DataObject) -> None:
        self.step(data.draw(st.sets(st.sampled_from(sorted(warmups(self.a))), min_size=1)))

    @rule()
    def retire_the_drained(self) -> None:
        self.retiring = [n for n in self.retiring if self.a.assigned_to(n)]
        self.step()

    @invariant()
    def consistent(self) -> None:
        a = self.a
        assert Assignment.from_json(a.to_json()) == a
        assert len(warmups(a)) <= self.max_warmups
        present = set(self.members + self.retiring)
        for nodes in a.serving:  # lost replicas serve only while no present one does
            assert set(nodes) <= present or not present.intersection(nodes), a.serving
        assert set().union(*a.target) <= set(self.members)
        assert_balanced(a.target, self.members, self.replicas)
        assert all(a.serving) or not self.members

    def teardown(self) -> None:
        if not self.members:
            return
        holding = self.holding(self.a)
        a, _ = settle(self.a, self.members, self.retiring, self.max_warmups, holding)
        assert a.serving == a.target and not warmups(a)
        assert not any(a.assigned_to(n) for n in self.retiring)
        assert_balanced(a.serving, self.members, self.replicas)


TestElastic = Elastic.TestCase
TestElastic.settings = settings(REPRODUCIBLE, max_examples=150, stateful_step_count=30)


# --- what members hold -----------------------------------------------------------------------


def replicas_of(a: Assignment) -> set[Replica]:
    return {(p, n) for p, nodes in enumerate(a.serving) for n in nodes}


def test_a_member_back_takes_back_what_it_holds_from_warm_ups() -> None:
    """n3 is lost and its replicas warm up on n1 and n2; it comes back holding them (its
    files kept): it is given them back, and the warm-ups are called off."""
    a = cold(ids(3), 9, 2)
    lost = plan(a, ids(2), (), 9, 2, max_warmups=9)
    assert {n for _, n in warmups(lost)} == {"n1", "n2"}
    back = plan(lost, ids(3), (), 9, 2, max_warmups=9, holding=replicas_of(a))
    assert [set(nodes) for nodes in back.target] == [set(nodes) for nodes in a.target]
    assert warmups(back) == {(p, "n3") for p in a.hosted_by("n3")}  # to catch up


def test_a_member_back_after_its_replicas_moved_is_given_what_it_holds() -> None:
    """n3's replicas moved and caught up elsewhere; n3 comes back with their files: its
    share is made of partitions it holds, and nothing else moves."""
    a = cold(ids(3), 9, 2)
    moved, _ = settle(plan(a, ids(2), (), 9, 2), ids(2))
    holding = replicas_of(moved) | {(p, "n3") for p in a.hosted_by("n3")}
    back = target(moved, ids(3), 9, 2, holding)
    share = {p for p, nodes in enumerate(back) if "n3" in nodes}
    assert len(share) == 6 and share <= set(a.hosted_by("n3"))
    assert len(moves(moved, settled(back, 2)).added) == 6


@REPRODUCIBLE
@given(layout(), st.data())
def test_what_members_hold_keeps_the_target_balanced_and_moves_nothing_settled(
    shape: tuple[int, int, int], data: st.DataObject
) -> None:
    size, partitions, replicas = shape
    members = ids(size)
    pairs = st.tuples(st.integers(0, partitions - 1), st.sampled_from(members))
    holding = data.draw(st.sets(pairs, max_size=partitions * size))
    first = target(None, members, partitions, replicas, holding)
    assert_balanced(first, members, replicas)
    assert target(settled(first, replicas), members, partitions, replicas, holding) == first
    plain = settled(target(None, members, partitions, replicas), replicas)
    assert target(plain, members, partitions, replicas, holding) == plain.target


def test_a_first_target_places_partitions_where_their_data_is() -> None:
    """The assignment lost (a coordinator started empty), members holding a balanced share
    (round-robin's, not the one a first target picks): each keeps its own."""
    a = static(ids(3), 9, 2)
    assert [set(nodes) for nodes in target(None, ids(3), 9, 2)] != [set(n) for n in a.target]
    again = target(None, ids(3), 9, 2, replicas_of(a))
    assert [set(nodes) for nodes in again] == [set(nodes) for nodes in a.target]
