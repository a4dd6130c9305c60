"""`stategate cluster` and an elastic node's start: bad input gets one clear line, exit 2,
and nothing moves."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from contracts import placement
from contracts.coordination import Coordination, Member
from stategate.launcher import free_ports
from tests.coordinator import Etcd
from tests.projects import write_project


@pytest.fixture(scope="module")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Etcd]:
    server = Etcd(tmp_path_factory.mktemp("etcd"))
    server.start()
    yield server
    server.stop()


def project_file(folder: Path, coordinator: str | None) -> Path:
    elastic = (coordinator, "cli") if coordinator is not None else None
    return write_project(folder, free_ports(2), replicas=1, coordinator=elastic)


def stategate(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "stategate.cli", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


def refused(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("stategate: "), done.stderr
    return lines[0]


def test_placement_commands_need_a_coordinator(tmp_path: Path) -> None:
    path = project_file(tmp_path, None)
    done = stategate("cluster", "drain", "node1", "--config", str(path))
    assert "no coordinator" in refused(done)


def test_the_status_of_a_static_cluster_says_which_nodes_do_not_answer(tmp_path: Path) -> None:
    """None runs here: each is unreachable, with why; no release is counted."""
    path = project_file(tmp_path, None)
    done = stategate("cluster", "status", "--config", str(path))
    assert done.returncode == 0, done.stderr
    body = json.loads(done.stdout)
    assert [(n["id"], n["reachable"]) for n in body["nodes"]] == [("node1", False),
                                                                   ("node2", False)]  # fmt: skip
    assert all(n["error"] for n in body["nodes"])
    assert (body["releases"], body["schemas"], body["mixed"]) == ({}, {}, False)


def test_status_of_an_empty_cluster_and_a_drain_of_an_unknown_node(
    etcd: Etcd, tmp_path: Path
) -> None:
    path = str(project_file(tmp_path, etcd.url))
    done = stategate("cluster", "status", "--config", path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["assignmentVersion"] is None
    assert "no assignment yet" in refused(stategate("cluster", "drain", "nodeX", "--config", path))
    assert etcd.read("cli").draining == frozenset()  # nothing asked, nothing moved


def test_a_coordinator_that_does_not_answer_is_one_line(tmp_path: Path) -> None:
    (dead,) = free_ports(1)
    path = str(project_file(tmp_path, f"etcd://127.0.0.1:{dead}"))
    assert "does not answer" in refused(stategate("cluster", "status", "--config", path))
    line = refused(stategate("node", "--config", path, "--node", "node1"))
    assert line.startswith("stategate: the coordinator:")


def test_a_coordinator_address_that_is_not_one_is_refused_at_load(tmp_path: Path) -> None:
    path = str(project_file(tmp_path, "http://127.0.0.1:2379"))
    assert "etcd://host[:port]" in refused(stategate("cluster", "status", "--config", path))


def test_a_drained_node_that_stopped_reads_as_gone_and_a_drain_can_be_called_off(
    etcd: Etcd, tmp_path: Path
) -> None:
    """Issue 47, 7: `cluster status` lists under draining only registered nodes."""
    path = str(write_project(tmp_path, free_ports(2), replicas=1, coordinator=(etcd.url, "gone")))

    async def join(*nodes: str) -> dict[str, int]:
        """Nodes registered, the first leading, and an assignment over them."""
        coordination = Coordination(etcd.url, "gone")
        await coordination.connect()
        try:
            leases = {node: await coordination.lease(60) for node in nodes}
            for port, node in enumerate(nodes, start=9000):
                await coordination.register(Member(node, f"127.0.0.1:{port}"), leases[node])
            assert await coordination.campaign(nodes[0], leases[nodes[0]])
            state = await coordination.read()
            first = placement.plan(None, sorted(nodes), [], 9, 1)
            assert await coordination.publish(first, state.assignment_revision, nodes[0])
        finally:
            await coordination.close()
        return leases

    async def stop(lease: int) -> None:
        """A node's registration goes with its lease when it stops."""
        coordination = Coordination(etcd.url, "gone")
        await coordination.connect()
        try:
            await coordination.revoke(lease)
        finally:
            await coordination.close()

    leases = asyncio.run(join("node1", "node2"))
    done = stategate("cluster", "drain", "node2", "--config", path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["draining"] == ["node2"]
    asyncio.run(stop(leases["node2"]))
    status = json.loads(stategate("cluster", "status", "--config", path).stdout)
    assert status["draining"] == [] and list(status["members"]) == ["node1"]
    assert [(n["id"], n["reachable"]) for n in status["nodes"]] == [("node1", False)]  # no node
    done = stategate("cluster", "undrain", "node2", "--config", path)
    assert done.returncode == 0, done.stderr
    assert etcd.read("gone").draining == frozenset()
    assert "no drain to call off" in refused(
        stategate("cluster", "undrain", "node2", "--config", path)
    )
    assert "needs the node" in refused(stategate("cluster", "undrain", "--config", path))
