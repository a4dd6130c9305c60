"""A node's registration on a real etcd survives the coordinator failing between granting a
new lease and writing the registration under it (a link that flaps at that moment): the node
registers again, instead of keeping alive a lease nobody is registered under while it serves
as if it were a member."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from contracts import project as projects
from contracts.coordination import Coordination, CoordinatorError, Member
from contracts.placement import Assignment, Replica
from contracts.project import Project
from contracts.topology import Topology
from gateway.cluster.coordinator import ElasticCoordinator
from gateway.model.topology import TopologyView
from tests.coordinator import Etcd
from tests.projects import write_project

SETTINGS = "health_interval_s = 0.2\nsession_ttl_s = 2\nlost_node_grace_s = 2"
WITHIN_S = 15  # several TTLs: a node registers again within one after its lease is gone
ME = Member("node1", "127.0.0.1:1")


class FlappingRegistration(Coordination):
    """The real coordination, but the next `failures` registrations fail as a cut link
    makes them fail: after the lease was granted."""

    failures = 0

    async def register(self, member: Member, lease: int) -> None:
        if self.failures:
            self.failures -= 1
            raise CoordinatorError("the link went down before the registration was written")
        await super().register(member, lease)


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[Etcd]:
    server = Etcd(tmp_path / "etcd")
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _project(root: Path, url: str) -> Project:
    path = write_project(root, [1], settings=SETTINGS)
    text = path.read_text().replace("[cluster]\n", f'[cluster]\ncoordinator = "{url}"\n', 1)
    path.write_text(text)
    return projects.load(path)


def _nothing_caught_up(_: Assignment) -> frozenset[Replica]:
    return frozenset()


async def _registration_lease(url: str, cluster: str) -> int | None:
    """The lease the node's registration is written under, None when it is not registered."""
    import aetcd

    coordination = Coordination(url, cluster)
    endpoint = coordination.members[0]
    client = aetcd.Client(endpoint.host, endpoint.port)
    try:
        found = await client.get(coordination.key("members", ME.id))
        return None if found is None else int(found.lease)
    finally:
        await client.close()


async def _until_registered(url: str, cluster: str, other_than: int | None = None) -> int:
    deadline = time.monotonic() + WITHIN_S
    while (lease := await _registration_lease(url, cluster)) in (None, other_than):
        assert time.monotonic() < deadline, "the node is not registered under a live lease"
        await asyncio.sleep(0.2)
    assert lease is not None
    return lease


def test_a_registration_that_fails_after_its_lease_is_granted_is_written_again(
    etcd: Etcd, tmp_path: Path
) -> None:
    project = _project(tmp_path, etcd.url)
    cluster = project.cluster
    coordination = FlappingRegistration(etcd.url, cluster.name, timeout_s=1.0)
    view = TopologyView(Topology.unassigned(cluster.partitions, cluster.replicas, {}))
    node = ElasticCoordinator(project, coordination, ME, view, _nothing_caught_up)

    async def scenario() -> None:
        await node.start()
        try:
            first = await _until_registered(etcd.url, cluster.name)
            coordination.failures = 1
            await coordination.revoke(first)  # the lease expired while the node was away
            again = await _until_registered(etcd.url, cluster.name, other_than=first)
            assert coordination.failures == 0, "no registration failed: the test tested nothing"
            assert again != first
            deadline = time.monotonic() + WITHIN_S
            while ME.id in view.current.fenced:  # and it serves by the assignment again
                assert time.monotonic() < deadline, "the node stayed fenced"
                await asyncio.sleep(0.2)
        finally:
            await node.stop()

    asyncio.run(scenario())
