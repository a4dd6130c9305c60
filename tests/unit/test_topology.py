"""A node's topology: the static file's is today's round-robin placement, and a view holds
the newest one it was given and tells its listeners."""

from __future__ import annotations

from pathlib import Path

from contracts import placement
from contracts.project import load
from contracts.topology import Topology
from gateway.model.topology_view import TopologyView
from tests.projects import write_project


def test_the_static_topology_places_partitions_round_robin(tmp_path: Path) -> None:
    cluster = load(write_project(tmp_path, [7001, 7002, 7003], partitions=9, replicas=2)).cluster
    topology = Topology.static(cluster)
    assert [topology.replicas(p) for p in range(9)] == [
        (f"node{p % 3 + 1}", f"node{(p + 1) % 3 + 1}") for p in range(9)
    ]
    assert topology.hosted_by("node1") == [0, 2, 3, 5, 6, 8]
    assert topology.url("node2") == "http://127.0.0.1:7002"
    assert (topology.active(4), topology.replicas(9), topology.active(9)) == ("node2", (), None)


def test_a_view_holds_the_newest_and_tells_its_listeners(tmp_path: Path) -> None:
    cluster = load(write_project(tmp_path, [7001, 7002], partitions=4, replicas=1)).cluster
    first = Topology.static(cluster)
    moved = placement.plan(first.assignment, ["node1", "node2", "node3"], (), 4, 1)
    second = Topology(moved, {**first.addresses, "node3": "127.0.0.1:7003"})
    view = TopologyView(first)
    heard: list[tuple[int, int]] = []
    view.listen(lambda before, after: heard.append((before.version, after.version)))
    view.update(second)
    view.update(first)  # older: ignored
    assert view.current is second and heard == [(0, 1)]
