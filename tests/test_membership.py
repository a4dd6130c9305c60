"""A node's membership on a real etcd, through faults of its calls to it (a link that flaps
at the wrong moment, a member that stops answering): the node registers again whenever its
registration is gone, fences itself the moment its lease may have expired, and a node that
no longer leads cannot publish an assignment."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from contracts import placement
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
FENCE_SLACK_S = 0.5  # an event loop's lateness; a keep-alive's own bound is a third of a TTL


class Faulty(Coordination):
    """The real coordination, but the next `failures` registrations fail as a cut link
    makes them fail (after the lease was granted), and once `hang_after` is set, the
    keep-alives after the next one that lands never answer, as a member cut off by the
    network does not (`landed`: when that one was sent)."""

    failures = 0
    hang_after = False
    landed: float | None = None

    async def register(self, member: Member, lease: int) -> None:
        if self.failures:
            self.failures -= 1
            raise CoordinatorError("the link went down before the registration was written")
        await super().register(member, lease)

    async def refresh(self, lease: int) -> int:
        if self.hang_after and self.landed is not None:
            await asyncio.Event().wait()
        sent = time.monotonic()
        ttl = await super().refresh(lease)
        if self.hang_after:
            self.landed = sent
        return ttl


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


def _node(project: Project) -> tuple[Faulty, TopologyView, ElasticCoordinator]:
    cluster = project.cluster
    coordination = Faulty(cluster.coordinator or "", cluster.name, timeout_s=1.0)
    view = TopologyView(Topology.unassigned(cluster.partitions, cluster.replicas, {}))
    node = ElasticCoordinator(project, coordination, ME, view, _nothing_caught_up)
    return coordination, view, node


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
    coordination, view, node = _node(project)

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


def test_a_node_fences_itself_when_its_lease_may_expire_not_when_a_keep_alive_gives_up(
    etcd: Etcd, tmp_path: Path
) -> None:
    """The keep-alives stop landing (each waits out its whole bound): the node serves as
    nobody's active once `session_ttl_s` has passed since the last one that landed was sent,
    not a third of a TTL later, when the keep-alive under way gives up."""
    project = _project(tmp_path, etcd.url)
    ttl = project.settings.session_ttl_s
    coordination, view, node = _node(project)

    async def scenario() -> float:
        await node.start()
        try:
            await _until_registered(etcd.url, project.cluster.name)
            coordination.hang_after = True
            while ME.id not in view.current.fenced:
                await asyncio.sleep(0.01)
            assert coordination.landed is not None
            return time.monotonic() - coordination.landed
        finally:
            await node.stop()

    fenced_after = asyncio.run(scenario())
    assert ttl - 0.05 <= fenced_after <= ttl + FENCE_SLACK_S, fenced_after


def test_only_the_node_that_leads_publishes_an_assignment(etcd: Etcd) -> None:
    """A leader whose lease expired between reading the state and publishing its plan (the
    leader key gone, or another node's) publishes nothing."""
    first = placement.plan(None, ["node1"], [], partitions=9, replicas=1)

    async def scenario() -> tuple[bool, bool, Assignment | None]:
        coordination = Coordination(etcd.url, "leaders")
        try:
            nobody = await coordination.publish(first, 0, "node1")
            lease = await coordination.lease(10)
            assert await coordination.campaign("node2", lease)
            other = await coordination.publish(first, 0, "node1")
            assert (await coordination.read()).assignment is None
            assert await coordination.publish(first, 0, "node2")
            return nobody, other, (await coordination.read()).assignment
        finally:
            await coordination.close()

    nobody, other, stored = asyncio.run(scenario())
    assert (nobody, other, stored) == (False, False, first)


def test_a_record_that_is_not_utf8_is_a_coordinator_error(etcd: Etcd) -> None:
    """Whatever else lands under the cluster's prefix, reading it fails as the coordinator
    failing does, which every loop of a node survives."""
    import aetcd

    async def scenario() -> None:
        coordination = Coordination(etcd.url, "strays")
        endpoint = coordination.members[0]
        client = aetcd.Client(endpoint.host, endpoint.port)
        try:
            await client.put(coordination.key("leader"), b"\xff\xfe")
            with pytest.raises(CoordinatorError, match="not UTF-8"):
                await coordination.read()
        finally:
            await client.close()
            await coordination.close()

    asyncio.run(scenario())
