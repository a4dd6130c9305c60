"""Placement as versioned data (contracts/placement.py): the assignment and its JSON form."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contracts.placement import (
    Assignment,
    Placement,
    PlacementError,
    moves,
    static,
)
from contracts.project import Cluster, Node

REPRODUCIBLE = settings(
    derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
DELETE = object()  # with_edit: remove the field instead


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
