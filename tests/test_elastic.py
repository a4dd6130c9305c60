"""An elastic cluster on a real etcd: nodes join and drain while clients read, and every
answer agrees with the oracle at its stated positions."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from contracts import project as projects
from contracts.coordination import State
from spark_pipeline import job
from stategate.launcher import free_ports
from tests import oracle, wire
from tests.coordinator import Etcd, settled
from tests.nodes import Nodes, metric
from tests.projects import produce_test_events, write_project

SETTINGS = (
    "health_interval_s = 0.2\nsync_interval_s = 0.5\nsession_ttl_s = 2\n"
    "lost_node_grace_s = 2\ninternal_timeout_s = 1.0"
)
SETTLE_S = 60
QUERY = """query($keys: [String!]!) {
  totals: customerTotalsBatch(keys: $keys) {
    entries { key failure record { bookings revenue } }
    meta { partial partitions { partition node failure message } }
  }
}"""


class Elastic:
    def __init__(self, root: Path, spark: SparkSession) -> None:
        self.etcd = Etcd(root)
        self.etcd.start()
        path = write_project(root, free_ports(5), settings=SETTINGS)
        text = path.read_text().replace(
            "[cluster]\n", f'[cluster]\ncoordinator = "{self.etcd.url}"\nname = "t"\n', 1
        )
        path.write_text(text)
        self.project = projects.load(path)
        produce_test_events(self.project, seed=5)
        job.run(self.project, spark, notify=False)
        self.nodes = Nodes(self.project, root)
        parts = oracle.expected_store(self.project, "customerTotals")
        self.expected = {r[0]: r for rows in parts.values() for r in rows}

    def start(self, *node_ids: str) -> None:
        for node_id in node_ids:
            self.nodes.start(node_id)

    def state(self) -> State:
        return self.etcd.read("t")

    def settled(self, members: set[str]) -> State:
        """Wait until the members serve every partition with its replicas, nothing warming,
        and every member serves what it is assigned."""
        deadline = time.monotonic() + SETTLE_S
        state = self.state()
        while time.monotonic() < deadline:
            state = self.state()
            a = state.assignment
            if (
                a is not None
                and settled(state, members, self.project.cluster.replicas)
                and all(self._serves(n, a.hosted_by(n)) for n in members)
            ):
                return state
            time.sleep(0.2)
        raise AssertionError(f"not settled: {state}\n{self.nodes.logs_tail()}")

    def _serves(self, node_id: str, partitions: list[int]) -> bool:
        serving = self.nodes.status(node_id)["partitions"]
        return {int(p) for p in serving} >= set(partitions)

    def ask(self, node_id: str) -> dict[str, Any]:
        return self.nodes.data(node_id, QUERY, {"keys": sorted(self.expected)})


@pytest.fixture
def elastic(spark: SparkSession, tmp_path: Path) -> Iterator[Elastic]:
    cluster = Elastic(tmp_path, spark)
    yield cluster
    cluster.nodes.stop_all()
    cluster.etcd.stop()


class Readers:
    """Clients reading every key on the given nodes, checking each answer."""

    def __init__(self, elastic: Elastic, node_ids: list[str]) -> None:
        self.elastic, self.node_ids = elastic, node_ids
        self.answers, self.problems = 0, []  # type: ignore[var-annotated]
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._read, args=(n,)) for n in node_ids]

    def __enter__(self) -> Readers:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(30)

    def _read(self, node_id: str) -> None:
        while not self._stop.is_set():
            data = self.elastic.ask(node_id)["totals"]
            self.answers += 1
            failed = [p for p in data["meta"]["partitions"] if p["failure"]]
            if failed:
                self.problems.append((node_id, failed))
            for entry in data["entries"]:
                if entry["failure"] is None:
                    got = entry["record"]
                    row = (wire.long(got["bookings"]), got["revenue"])
                    if row != pytest.approx(self.elastic.expected[entry["key"]][1:3]):
                        self.problems.append((node_id, entry))


def test_nodes_join_and_drain_while_clients_read(elastic: Elastic) -> None:
    elastic.start("node1", "node2", "node3")
    first = elastic.settled({"node1", "node2", "node3"})
    with Readers(elastic, ["node1", "node2"]) as readers:
        elastic.start("node4", "node5")
        grown = elastic.settled({"node1", "node2", "node3", "node4", "node5"})
        counts = [len(grown.assignment.hosted_by(n)) for n in sorted(grown.members)]  # type: ignore[union-attr]
        assert max(counts) - min(counts) <= 1, counts
        check_visible(elastic, "node5", grown)
        for node in ("node3", "node4", "node5"):
            elastic.nodes.cli("cluster", "drain", node)
        shrunk = elastic.settled({"node1", "node2", "node3", "node4", "node5"})
        assert set().union(*shrunk.assignment.serving) == {"node1", "node2"}  # type: ignore[union-attr]
        for node in ("node3", "node4", "node5"):  # what a node handed over, it deleted
            wait_until(lambda node=node: not layer_files(elastic, node), f"{node} kept files")
    assert readers.answers > 10
    assert readers.problems == []
    assert first.assignment is not None and grown.assignment is not None
    assert grown.assignment.version > first.assignment.version


def test_a_lost_node_is_replaced_and_serving_outlives_the_coordinator(
    elastic: Elastic, spark: SparkSession
) -> None:
    four = {"node1", "node2", "node3", "node4"}
    elastic.start(*sorted(four))
    elastic.settled(four)
    with Readers(elastic, ["node1", "node2"]) as readers:
        elastic.nodes.kill("node4")  # a machine lost: its lease expires, then its grace
        three = elastic.settled(four - {"node4"})
    assert readers.answers > 5
    assert readers.problems == []  # answered by the other replicas at once, all right
    assert all(len(s) == 2 for s in three.assignment.serving)  # type: ignore[union-attr]

    elastic.etcd.stop()  # nodes keep serving their last assignment, and new versions
    produce_test_events(elastic.project, seed=6, n_bookings=50, start_ms=1_767_400_000_000)
    job.run(elastic.project, spark, notify=True)
    parts = oracle.expected_store(elastic.project, "customerTotals")
    elastic.expected = {r[0]: r for rows in parts.values() for r in rows}
    wait_for_answers(elastic, "node1")

    elastic.etcd.start()
    elastic.start("node5")
    elastic.settled({"node1", "node2", "node3", "node5"})
    wait_for_answers(elastic, "node5")


def layer_files(elastic: Elastic, node_id: str) -> list[Path]:
    return sorted(elastic.project.cluster.node(node_id).data_dir.rglob("*.duckdb"))


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


def wait_for_answers(elastic: Elastic, node_id: str, timeout_s: float = 30) -> None:
    """Until every key's answer on the node agrees with the oracle."""
    deadline = time.monotonic() + timeout_s
    while True:
        totals = elastic.ask(node_id)["totals"]
        got = {
            e["key"]: (wire.long(e["record"]["bookings"]), e["record"]["revenue"])
            for e in totals["entries"]
            if e["record"] is not None
        }
        want = {k: tuple(r[1:3]) for k, r in elastic.expected.items()}
        if got.keys() == want.keys() and all(got[k] == pytest.approx(want[k]) for k in want):
            return
        assert time.monotonic() < deadline, (totals["meta"], elastic.nodes.logs_tail())
        time.sleep(0.5)
