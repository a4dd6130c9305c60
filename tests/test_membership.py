"""A node's membership on a real etcd, through faults of its calls to it (a link that flaps
at the wrong moment, a member that stops answering): the node registers again whenever its
registration is gone, fences itself the moment its lease may have expired, and a node that
no longer leads cannot publish an assignment."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from contracts import placement
from contracts import project as projects
from contracts.coordination import Coordination, CoordinatorError, Member
from contracts.placement import Assignment, Replica
from contracts.project import Project
from contracts.tls import CLIENT, Tls
from contracts.topology import Topology
from gateway.cluster.coordinator import ElasticCoordinator
from gateway.model.topology_view import TopologyView
from tests.coordinator import Etcd
from tests.projects import write_project

SETTINGS = "health_interval_s = 0.2\nsession_ttl_s = 2\nlost_node_grace_s = 2"
WITHIN_S = 15  # several TTLs: a node registers again within one after its lease is gone
ME = Member("node1", "127.0.0.1:1")
FENCE_SLACK_S = 0.5  # an event loop's lateness; a keep-alive's own bound is a third of a TTL


class Faulty(Coordination):
    """The real coordination, but the next `failures` registrations fail as a cut link
    makes them fail (after the lease was granted), and once `land` is called, only that many
    more keep-alives land: the others do not answer, as a member cut off by the network does
    not (`landed`: when the last that landed was sent, as the node counts it)."""

    def __init__(self, url: str, cluster: str, timeout_s: float) -> None:
        super().__init__(url, cluster, timeout_s)
        self.failures = 0
        self.landings: int | None = None
        self.landed: float | None = None
        self.more = asyncio.Event()

    def land(self, count: int) -> None:
        self.landings = count
        self.more.set()  # a keep-alive waiting goes now

    async def register(self, member: Member, lease: int) -> None:
        if self.failures:
            self.failures -= 1
            raise CoordinatorError("the link went down before the registration was written")
        await super().register(member, lease)

    async def refresh(self, lease: int) -> int:
        sent = time.monotonic()  # a call held up below may reach etcd any time after
        while self.landings == 0:  # until `land`, or until the keep-alive's own bound gives up
            self.more.clear()
            await self.more.wait()
        ttl = await super().refresh(lease)
        if self.landings is not None:
            self.landings -= 1
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


def _project(root: Path, url: str, settings: str = SETTINGS) -> Project:
    return projects.load(write_project(root, [1], settings=settings, coordinator=(url, "t")))


def _nothing_caught_up(_: Assignment) -> frozenset[Replica]:
    return frozenset()


def _node(project: Project) -> tuple[Faulty, TopologyView, ElasticCoordinator]:
    cluster = project.cluster
    coordination = Faulty(cluster.coordinator or "", cluster.name, timeout_s=1.0)
    view = TopologyView(Topology.unassigned(cluster, {}))
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


async def _until(done: Callable[[], bool], what: str, poll_s: float = 0.1) -> None:
    deadline = time.monotonic() + WITHIN_S
    while not done():
        assert time.monotonic() < deadline, f"not {what} within {WITHIN_S} s"
        await asyncio.sleep(poll_s)


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
            await _until(lambda: ME.id not in view.current.fenced, "serving as assigned")
        finally:
            await node.stop()

    asyncio.run(scenario())


def test_a_node_fences_itself_when_its_lease_may_expire_not_when_a_keep_alive_gives_up(
    etcd: Etcd, tmp_path: Path
) -> None:
    """The keep-alives stop landing (each waits out its whole bound): the node serves as
    nobody's active once `session_ttl_s` has passed since the last one that landed was sent,
    not a third of a TTL later, when the keep-alive under way gives up. Then one lands (the
    node serves as the assignment says again) and the others do not: the TTL counts from
    that one, whatever the node's other intervals (its health interval here is longer). The
    TTL is 2.5 s, so the lease etcd holds (3 s) outlives the fence, and the one keep-alive
    lands on a live lease."""
    settings = "health_interval_s = 5\nsession_ttl_s = 2.5\nlost_node_grace_s = 2"
    project = _project(tmp_path, etcd.url, settings)
    ttl = project.settings.session_ttl_s
    coordination, view, node = _node(project)

    async def fenced_after_landing() -> float:
        coordination.land(1)
        await _until(lambda: ME.id not in view.current.fenced, "serving as assigned")
        await _until(lambda: ME.id in view.current.fenced, "fenced", poll_s=0.01)
        assert coordination.landings == 0 and coordination.landed is not None
        return time.monotonic() - coordination.landed

    async def scenario() -> tuple[float, float]:
        await node.start()
        try:
            await _until(lambda: view.current.version > 0, "an assignment (led by the node)")
            first = await fenced_after_landing()
            second = await fenced_after_landing()
            return first, second
        finally:
            await node.stop()

    for fenced_after in asyncio.run(scenario()):
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


def test_etcd_over_mutual_tls_answers_a_certificate_of_the_ca_only(tmp_path: Path) -> None:
    """A coordinator on TLS (stategate/etcd.py starts etcd with the CA, its certificate and
    client certificates required): the project's client reads and writes through it; a client
    in clear, or with no certificate, gets nothing."""
    path = write_project(tmp_path, [1], coordinator=("etcd://127.0.0.1:1", "t"), tls=True)
    tls = projects.load(path).tls
    assert tls is not None
    server = Etcd(tmp_path / "etcd", tls)
    server.start()
    first = placement.plan(None, ["node1"], [], partitions=9, replicas=1)

    async def publish(
        with_tls: Tls | None, holder: str = CLIENT, cluster: str = "secure"
    ) -> Assignment | None:
        coordination = Coordination(server.url, cluster, 2.0, with_tls, holder)
        try:
            lease = await coordination.lease(10)
            assert await coordination.campaign("node1", lease)
            assert await coordination.publish(first, 0, "node1")
            return (await coordination.read()).assignment
        finally:
            await coordination.close()

    try:
        assert asyncio.run(publish(tls)) == first
        assert server.read("secure").assignment == first
        no_certificate = dataclasses.replace(tls, mutual=False)
        for refused in (None, no_certificate):
            with pytest.raises(CoordinatorError):
                asyncio.run(publish(refused))
        # a node's host holds its own key only (README: TLS): the node presents it
        for held in tls.files(CLIENT):
            held.rename(held.with_name(f"{held.name}.elsewhere"))
        assert asyncio.run(publish(tls, "node1", "secure-node")) == first
        with pytest.raises(CoordinatorError, match=r"^\[tls\]: the coordinator's client \("):
            asyncio.run(publish(tls))
    finally:
        server.stop()
