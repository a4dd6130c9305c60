"""An elastic cluster on a real etcd: nodes join, drain, die and hang while clients read and
subscribe, and every answer agrees with the oracle at its stated positions."""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from websockets.exceptions import ConnectionClosed

from clients.python.routing import RoutingTransport
from contracts import chains
from contracts import project as projects
from contracts.coordination import State
from contracts.partitioner import partition_for
from gateway.storage.delivery.sync import LINGER_S
from spark_pipeline import job
from spark_pipeline.loop import PipelineLoop
from spark_pipeline.publish import notify_nodes
from spark_pipeline.spark import LazySpark
from stategate.etcd import serving_settled
from stategate.launcher import free_ports
from tests import appends, live, oracle, positions
from tests.appends import WATCHED
from tests.coordinator import Etcd
from tests.held import held, refetched
from tests.kafka import shared
from tests.nodes import Nodes, metric
from tests.projects import produce_test_events, write_project

SETTINGS = (
    "health_interval_s = 0.2\nsync_interval_s = 0.5\nsession_ttl_s = 2\n"
    "lost_node_grace_s = 2\ninternal_timeout_s = 1.0\ntrigger_interval_s = 0.5\nmax_warmups = 6"
)
SETTLE_S = 60
KEYS = [f"C{i:06d}" for i in range(0, 300, 7)] + ["Zoë", "gone", "日本語"]


class Elastic:
    """etcd, a project of 5 nodes on it, its log and published state; with `follow`, the
    continuous pipeline publishing (and telling the nodes) as a producer appends."""

    def __init__(self, root: Path, spark: LazySpark, follow: bool = False) -> None:
        self.etcd = Etcd(root)
        self.etcd.start()
        kafka = (shared().bootstrap, f"{root.name}-")
        path = write_project(
            root, free_ports(5), settings=SETTINGS, coordinator=(self.etcd.url, "t"), kafka=kafka
        )
        self.project = projects.load(path)
        produce_test_events(self.project, seed=5)
        self.follower = PipelineLoop(self.project, spark) if follow else None
        if self.follower is not None:
            self.follower.start()
        else:
            job.run(self.project, spark, notify=False)
        self.nodes = Nodes(self.project, root)
        self.log = oracle.Log(self.project)

    def close(self) -> None:
        self.nodes.stop_all()
        if self.follower is not None:
            self.follower.stop()
        self.etcd.stop()

    def start(self, *node_ids: str) -> None:
        for node_id in node_ids:
            self.nodes.start(node_id)

    def state(self) -> State:
        return self.etcd.read("t")

    def settled(self, members: set[str]) -> State:
        """Wait until the members serve every partition with its replicas, nothing warming,
        and every member serves what it is assigned."""
        deadline = time.monotonic() + SETTLE_S
        urls = {n: self.nodes.url(n) for n in members}
        state = self.state()
        while time.monotonic() < deadline:
            state = self.state()
            if serving_settled(state, urls, self.project):
                return state
            time.sleep(0.2)
        raise AssertionError(f"not settled: {state}\n{self.nodes.logs_tail()}")

    def caught_up(self, node_id: str, timeout_s: float = 30) -> None:
        """Until the node answers every query kind at the log's end, as the oracle does."""
        end = {p: at["bookings"] for p, at in oracle.expected_positions(self.project).items()}
        deadline = time.monotonic() + timeout_s
        while True:
            client = positions.Client(self.project, self.log)
            body = self.nodes.gql(node_id, positions.document(self.project), variables(client, 0))
            client.check(body["data"], None)
            if client.seen == end:
                assert client.problems == []
                return
            assert time.monotonic() < deadline, (client.seen, end, self.nodes.logs_tail())
            time.sleep(0.5)


@pytest.fixture
def elastic(spark: LazySpark, tmp_path: Path) -> Iterator[Elastic]:
    cluster = Elastic(tmp_path, spark)
    yield cluster
    cluster.close()


def variables(client: positions.Client, i: int) -> dict[str, object]:
    """The i-th request's: one key to look up, all of them as a batch, the last token."""
    return {"key": KEYS[i % len(KEYS)], "keys": KEYS, "token": client.token}


class Routed:
    """A routing client (clients/python/routing.py) seeded with node1, on an event loop of its
    own that outlives each check, so its map lives from one placement to the next."""

    QUERY = "query R($key: String!) { customerTotals(key: $key) { meta { partitions { node } } } }"

    def __init__(self, elastic: Elastic) -> None:
        self.elastic = elastic
        self.loop = asyncio.new_event_loop()
        self.transport = RoutingTransport([elastic.nodes.url("node1")])
        self.client = httpx.AsyncClient(transport=self.transport, timeout=10)

    def check(self, state: State) -> None:
        """After one answer tells it of `state`'s placement, each key goes to its active
        replica there, which answers it from its own state."""
        self.loop.run_until_complete(self._check(state))

    async def _check(self, state: State) -> None:
        url = f"{self.elastic.nodes.url('node1')}/graphql"
        partitions = self.elastic.project.cluster.partitions
        version = state.assignment.version  # type: ignore[union-attr]
        await self.client.post(url, json={"query": self.QUERY, "variables": {"key": KEYS[0]}})
        current = self.transport.map is not None and self.transport.map.version == version
        assert current or self.transport.stale, "an answer told it of the new placement"
        for key in KEYS[:12]:
            answer = await self.client.post(
                url, json={"query": self.QUERY, "variables": {"key": key}}
            )
            (part,) = answer.json()["data"]["customerTotals"]["meta"]["partitions"]
            active = state.assignment.replica_map[partition_for(key, "string", partitions)][0]  # type: ignore[union-attr]
            assert part["node"] == active == answer.headers["stategate-node"], (key, part)
        assert self.transport.map is not None and self.transport.map.version == version

    def close(self) -> None:
        self.loop.run_until_complete(self.client.aclose())
        self.loop.close()


class Reader(threading.Thread):
    """A client asking every query kind of one node in a loop, its last token with each."""

    def __init__(self, elastic: Elastic, node_id: str) -> None:
        super().__init__()
        self.elastic, self.node_id = elastic, node_id
        self.client = positions.Client(elastic.project, elastic.log)
        self.stopping = threading.Event()

    def run(self) -> None:
        with self.client.crashes():
            self._read()

    def _read(self) -> None:
        document = positions.document(self.elastic.project)
        for i in itertools.count():
            if self.stopping.is_set():
                return
            body = self.elastic.nodes.gql(self.node_id, document, variables(self.client, i))
            if body.get("errors"):
                self.client.problems.append(f"errors: {body['errors']}")
                continue
            self.client.check(body["data"], body["extensions"]["consistencyToken"])


class Subscriber(threading.Thread):
    """A dashboard's subscription to one key's totals; when its node goes away, it moves to
    `fallback` with its last token, as the README says a client does."""

    def __init__(self, elastic: Elastic, node_id: str, fallback: str, key: str) -> None:
        super().__init__()
        self.elastic, self.node_ids, self.key = elastic, [node_id, fallback], key
        self.client = positions.Client(elastic.project, elastic.log)
        self.stopping = threading.Event()
        self.moved = 0
        self.pushed: list[int] = []  # the offset of each push, in its key's partition

    def run(self) -> None:
        with self.client.crashes():
            self._subscribe()

    def _subscribe(self) -> None:
        while not self.stopping.is_set():
            url = self.elastic.nodes.url(self.node_ids[min(self.moved, 1)])
            try:
                positions.follow(
                    live.Socket(url), self.client, self.key, self.stopping, self.pushed
                )
            except (ConnectionClosed, OSError):
                self.moved += 1  # its node stopped: on to the next one, token and all


def test_the_cluster_scales_3_5_2_while_every_query_kind_is_read_and_subscribed(
    spark: LazySpark, tmp_path: Path
) -> None:
    """The continuous pipeline publishes and a producer appends throughout; every answer is
    the oracle's at its stated positions, no client's positions go back, every subscription
    still receives at the end, one of them moved to another node, and a routing client
    follows each placement within one answer."""
    elastic = Elastic(tmp_path, spark, follow=True)
    readers: list[Reader] = []
    subscribers: list[Subscriber] = []
    routed = Routed(elastic)
    try:
        elastic.start("node1", "node2", "node3")
        first = elastic.settled({"node1", "node2", "node3"})
        routed.check(first)
        readers += [Reader(elastic, n) for n in ("node1", "node2")]
        subscribers += [
            Subscriber(elastic, node, "node1", key)
            for node, key in zip(("node1", "node2", "node3"), WATCHED, strict=True)
        ]
        with appends.producing(elastic.project):
            for client in readers + subscribers:
                client.start()
            elastic.start("node4", "node5")
            grown = elastic.settled({"node1", "node2", "node3", "node4", "node5"})
            counts = [len(grown.assignment.hosted_by(n)) for n in sorted(grown.members)]  # type: ignore[union-attr]
            assert max(counts) - min(counts) <= 1, counts
            check_visible(elastic, "node5", grown)
            routed.check(grown)
            for node in ("node3", "node4", "node5"):
                elastic.nodes.cli("cluster", "drain", node)
            shrunk = elastic.settled({"node1", "node2", "node3", "node4", "node5"})
            assert set().union(*shrunk.assignment.serving) == {"node1", "node2"}  # type: ignore[union-attr]
            routed.check(shrunk)
            for node in ("node3", "node4", "node5"):  # what a node handed over, it deleted
                # (every node holds every global chain while it runs: contracts/chains.py)
                kept = lambda node=node: layer_files(elastic, node)  # noqa: E731
                wait_until(lambda kept=kept: not kept(), f"{node} kept {kept()}", LINGER_S + 10)
                elastic.nodes.processes.stop(node)
            # each subscription must push its key's new value
            ends = appends.produce_watched(elastic.project)
            elastic.settled({"node1", "node2"})
            elastic.start("node3")  # started again, a drained node is a member like any other
            back = elastic.state()
            assert "node3" in back.members and "node3" not in back.draining
        for subscriber in subscribers:
            end = ends[subscriber.key]
            pushed = lambda s=subscriber, e=end: max(s.pushed, default=-1) >= e  # noqa: E731
            what = f"{subscriber.key} pushed {subscriber.pushed[-3:]}, not {end}"
            wait_until(pushed, what, timeout_s=30)
    finally:
        for client in readers + subscribers:
            client.stopping.set()
            client.join(30)
        routed.close()
        elastic.close()
    assert all(r.client.answers > 5 for r in readers), [r.client.answers for r in readers]
    assert subscribers[2].moved == 1  # node3's subscription moved to node1, and went on
    for checked in [r.client for r in readers] + [s.client for s in subscribers]:
        assert checked.problems == []
    assert grown.assignment.version > first.assignment.version  # type: ignore[union-attr]


def test_a_lost_node_and_a_hung_one_are_replaced_and_serving_outlives_the_coordinator(
    elastic: Elastic, spark: LazySpark
) -> None:
    five = {"node1", "node2", "node3", "node4", "node5"}
    elastic.start(*sorted(five))
    elastic.settled(five)
    readers = [Reader(elastic, n) for n in ("node1", "node2")]
    for reader in readers:
        reader.start()
    try:
        elastic.nodes.kill("node5")  # a machine lost: its lease expires, then its grace
        four = elastic.settled(five - {"node5"})
        hung = elastic.nodes.processes.pid("node4")
        kept = held(elastic.project, "node4")
        os.kill(hung, signal.SIGSTOP)  # a hung machine: alive, silent
        three = elastic.settled(five - {"node4", "node5"})
        os.kill(hung, signal.SIGCONT)  # back: it registers again, given back what it kept
        back = elastic.settled(five - {"node5"})
        again = refetched(kept, held(elastic.project, "node4"))
    finally:
        for reader in readers:
            reader.stopping.set()
            reader.join(30)
    assert all(r.client.answers > 5 for r in readers)
    for reader in readers:  # answered by the other replicas at once, all right
        assert reader.client.problems == []
    for state in (four, three, back):
        assert all(len(s) == 2 for s in state.assignment.serving)  # type: ignore[union-attr]
    share = set(back.assignment.hosted_by("node4"))  # type: ignore[union-attr]
    had = {int(path.parent.name[1:]) for path in kept}
    assert share and len(share & had) == min(len(share), len(had)), (share, had)
    assert again == {}, f"node4 fetched again what it held: {again}"

    told = notify_nodes(elastic.project, {0})  # the pipeline reads the assignment
    elastic.etcd.stop()  # nodes keep serving their last assignment, and new versions
    assert notify_nodes(elastic.project, {0}) == told == dict.fromkeys(told, "ok") != {}
    produce_test_events(elastic.project, seed=6, n_bookings=50, start_ms=1_767_400_000_000)
    job.run(elastic.project, spark, notify=True)
    elastic.caught_up("node1")

    elastic.etcd.start()
    elastic.start("node5")
    elastic.settled(five)
    elastic.caught_up("node5")


def layer_files(elastic: Elastic, node_id: str) -> list[Path]:
    """The layer files a node holds of its partitions' chains (not the global ones)."""
    files = sorted(elastic.project.cluster.node(node_id).data_dir.rglob("v[0-9]*"))
    return [f for f in files if not chains.is_global(elastic.project, int(f.parent.name[1:]))]


def wait_until(done: Callable[[], bool], what: str, timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def check_visible(elastic: Elastic, node_id: str, state: State) -> None:
    """The node's cluster field, /cluster and metrics say what the coordinator holds."""
    assert state.assignment is not None
    query = "{ cluster { assignmentVersion coordinator leader partitions { warming { node } } } }"
    shown = elastic.nodes.data(node_id, query)["cluster"]
    assert shown["assignmentVersion"] == state.assignment.version
    assert (shown["coordinator"], shown["leader"]) == (elastic.etcd.url, state.leader)
    assert all(p["warming"] == [] for p in shown["partitions"])
    mapped = elastic.nodes.client.get(f"{elastic.nodes.url(node_id)}/cluster").json()
    assert mapped["assignment_version"] == state.assignment.version
    samples = elastic.nodes.metrics(node_id)
    assert metric(samples, "stategate_assignment_version") == state.assignment.version
    held = len(state.assignment.assigned_to(node_id))
    assert metric(samples, "stategate_partition_moves_total", direction="received") >= held
    assert metric(samples, "stategate_warmup_seconds_count") >= 1
