"""Stores declared while the cluster runs (README: Changing stores): a node whose project
declares a store the pipeline has not built yet serves every other store and keeps the
schema it had; once every node has the store built on every chain it serves, each node's
schema has it, and it answers as the oracle computes it from the log. A node takes a store
declared since it started on SIGHUP, in every worker, with no restart; no read fails
meanwhile."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from contracts import project as projects
from contracts.eventlog import Record
from contracts.manifest import read_manifest
from contracts.project import Project, Store
from spark_pipeline import job
from spark_pipeline.job import snapshot_dir
from spark_pipeline.spark import LazySpark
from stategate.launcher import node_command
from tests import oracle
from tests.appends import append
from tests.live import Socket
from tests.nodes import Nodes, following, serve
from tests.projects import SEATS_BY_CUSTOMER, START_MS, with_seats_by_customer
from tests.wire import as_row, selection

NEW = SEATS_BY_CUSTOMER
KEYS = ["C000014", "C000021", "Zoë", "gone"]
SWITCH_S = 30
STATEGATE = [sys.executable, "-m", "stategate.cli"]


def document(*stores: Store) -> str:
    fields = " ".join(
        f"{s.name}(key: $key) {{ meta {{ partial }} record {{ {selection(s)} }} }}" for s in stores
    )
    return f"query($key: String!) {{ {fields} }}"


class Reader(threading.Thread):
    """A client asking a store of the project before the change of every node in turn,
    and, once the nodes serve it, the new store too: every answer whole, none an error."""

    def __init__(self, nodes: Nodes, grown: Project) -> None:
        super().__init__()
        self.nodes, self.grown = nodes, grown
        self.stopping = threading.Event()
        self.new_served = threading.Event()
        self.problems: list[str] = []
        self.answers = 0

    def run(self) -> None:
        totals, seats = self.grown.stores["customerTotals"], self.grown.stores[NEW]
        for i in itertools.count():
            if self.stopping.is_set():
                return
            asked = (totals, seats) if self.new_served.is_set() else (totals,)
            node, key = self.nodes.ids[i % 2], KEYS[i % len(KEYS)]  # node3 is restarted
            body = self.nodes.gql(node, document(*asked), {"key": key})
            self.answers += 1
            if body.get("errors") or any(a["meta"]["partial"] for a in body["data"].values()):
                self.problems.append(f"{node} {key}: {body}")


def test_a_store_is_served_once_every_node_has_it_built_and_never_before(
    spark: LazySpark, tmp_path: Path
) -> None:
    """node1 and node2 declare the new store, node3 still runs the file before it: the
    pipeline builds it, and no node serves it until node3 has it too."""
    served = serve(tmp_path, spark, start=False)
    before = served.project
    text = before.path.read_text()
    old = before.path.with_name("before.toml")
    old.write_text(text)
    before.path.write_text(with_seats_by_customer(text))
    grown = projects.load(before.path)
    nodes = Nodes(grown, tmp_path)
    reader = Reader(nodes, grown)
    applying: subprocess.Popen[str] | None = None
    try:
        nodes.start("node1")
        nodes.start("node2")
        start_node3(nodes, projects.load(old))
        for node in nodes.ids:  # the new store is not built: not in the schema
            assert NEW not in schema_stores(nodes, node) | listed_stores(nodes, node)
            assert NEW not in nodes.status(node)["stores"]
        building = {"node1": [NEW], "node2": [NEW], "node3": []}  # as GET /cluster says it
        wait_until(lambda: pending_said(nodes, "node3") == building, nodes)
        assert_oracle(nodes, grown, "customerTotals")
        reader.start()
        planned = nodes.cli("apply", "--dry-run")  # what the grown file will do
        assert (
            f"stores to add: {NEW}\nstores to change in place: none\nstores to remove: none\n"
            in planned
        ), planned
        building = f"building: the pipeline builds {NEW} from the log ("
        assert building in planned and " records of bookings read again) and folds" in planned
        applying = subprocess.Popen(
            [*STATEGATE, "apply", "--config", str(grown.path), "--wait", "60"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        first = first_progress(applying)  # before the pipeline runs, however slow its start

        job.run(grown, spark)  # its stores changed: every chain built again, the nodes told
        for node in ("node1", "node2"):
            wait_until(lambda n=node: NEW in nodes.status(n)["stores"], nodes)
        time.sleep(2 * grown.settings.health_interval_s)  # a round of polls: still not served
        assert all(NEW not in schema_stores(nodes, n) for n in ("node1", "node2"))

        nodes.processes.stop("node3")  # node3 restarts on the project that declares it
        nodes.start("node3")
        for node in nodes.ids:
            wait_until(lambda n=node: NEW in schema_stores(nodes, n), nodes)
            assert schema_stores(nodes, node) == listed_stores(nodes, node) == set(grown.stores)
        reader.new_served.set()
        rest, _ = applying.communicate(timeout=30)
        said = first + rest
        assert applying.returncode == 0, said
        progress = [line for line in said.splitlines() if line.startswith("progress: ")]
        assert f"{NEW} declared on 2 of 3, built on 0 of 3" in progress[0], said
        assert f"{NEW} declared on 3 of 3, built on 3 of 3; 3 of 3 nodes serve" in progress[-1]
        assert said.splitlines()[-1].startswith("applied in "), said
        assert_oracle(nodes, grown, NEW)
        assert_oracle(nodes, grown, "customerTotals")
        time.sleep(1)
    finally:
        if applying is not None and applying.poll() is None:
            applying.kill()
        reader.stopping.set()
        reader.join(30)
        nodes.stop_all()
    assert reader.problems == [] and reader.answers > 10, (reader.answers, reader.problems[:3])


def first_progress(applying: subprocess.Popen[str]) -> str:
    """What `stategate apply` printed up to its first progress line (all of it, if it ended
    before one)."""
    assert applying.stdout is not None
    said = ""
    while line := applying.stdout.readline():
        said += line
        if line.startswith("progress: "):
            break
    return said


def pending_said(nodes: Nodes, node: str) -> dict[str, list[str] | None]:
    """Each node's stores declared and not built yet, as `node`'s partition map says."""
    said = nodes.client.get(f"{nodes.url(node)}/cluster").json()["nodes"]
    return {n["id"]: n["pending"] for n in said}


def start_node3(nodes: Nodes, project: Project) -> None:
    url = nodes.url("node3")
    nodes.processes.start("node3", node_command(project, "node3"), url, tls=project.tls)


def schema_stores(nodes: Nodes, node: str) -> set[str]:
    """The stores the node's schema serves, as its Query type has them."""
    fields = nodes.data(node, '{ __type(name: "Query") { fields { name } } }')["__type"]
    return {f["name"] for f in fields["fields"]} & set(nodes.project.stores)


def listed_stores(nodes: Nodes, node: str) -> set[str]:
    """The stores its `stores` field lists."""
    return {s["name"] for s in nodes.data(node, "{ stores { name } }")["stores"]}


def assert_oracle(nodes: Nodes, project: Project, name: str) -> None:
    store = project.stores[name]
    rows = [r for rows in oracle.expected_store(project, name).values() for r in rows]
    for i, key in enumerate(KEYS):
        data = nodes.data(nodes.ids[i % 3], document(store), {"key": key})
        record = data[name]["record"]
        got = None if record is None else as_row(store, record)
        assert got == next((r for r in rows if r[0] == key), None), (name, key, got)


def wait_until(done: Any, nodes: Nodes) -> None:
    deadline = time.monotonic() + SWITCH_S
    while not done():
        assert time.monotonic() < deadline, nodes.logs_tail()
        time.sleep(0.2)


def test_a_store_declared_since_is_taken_on_sighup_with_no_restart(
    spark: LazySpark, tmp_path: Path
) -> None:
    """The pipeline builds a store no node declares yet; each node in turn (node1 with two
    workers) reads its file again on SIGHUP (node3 as `apply` asks it) and opens its chains
    again with the store; once the last did, every node (every worker) serves it as the
    oracle computes it."""
    served = serve(tmp_path, spark, start=False)
    before = served.project
    text = before.path.read_text()
    two_workers = before.path.with_name("node1.toml")  # node1's own file: two workers
    two_workers.write_text(text.replace("workers = 1", "workers = 2", 1))
    grown_text = with_seats_by_customer(text)
    grown = projects.load(write(before.path.with_name("grown.toml"), grown_text))
    nodes = Nodes(before, tmp_path)
    reader = Reader(nodes, grown)
    try:
        nodes.processes.start(
            "node1",
            node_command(projects.load(two_workers), "node1"),
            nodes.url("node1"),
        )
        nodes.start("node2")
        nodes.start("node3")
        for node in nodes.ids:
            wait_until(lambda n=node: set(nodes.status(n)["stores"]) == set(before.stores), nodes)
        reader.start()
        before.path.write_text(grown_text)
        two_workers.write_text(grown_text.replace("workers = 1", "workers = 2", 1))
        nodes.project = grown
        report = job.run(grown, spark)  # built from the log: the new store alone
        assert report.from_start == [NEW], report
        for node in nodes.ids:  # installed, not declared: not served, not said to be built
            wait_until(lambda n=node: chains_at(nodes, n, report.versions), nodes)
            assert NEW not in nodes.status(node)["stores"]
        for node in ("node1", "node2"):
            os.kill(nodes.processes.pid(node), signal.SIGHUP)
            wait_until(lambda n=node: NEW in nodes.status(n)["stores"], nodes)
            said = nodes.processes.tail(node, 200)
            assert f"SIGHUP: the project file read again: stores added: {NEW}" in said, said
            time.sleep(2 * grown.settings.health_interval_s)  # node3 lacks it: no schema has it
            assert all(NEW not in schema_stores(nodes, n) for n in nodes.ids)
        # node3 is asked by `apply`, as every node is (POST /internal/reload)
        command = [*STATEGATE, "apply", "--config", str(grown.path), "--wait", "60"]
        applied = subprocess.run(command, capture_output=True, text=True, timeout=90)
        assert applied.returncode == 0, applied
        asked = "asked each node to read its project file again: node1 ok, node2 ok, node3 ok"
        assert asked in applied.stdout, applied.stdout
        assert f"SIGHUP: the project file read again: stores added: {NEW}" in (
            nodes.processes.tail("node3", 200)
        )
        for node in nodes.ids:
            wait_until(lambda n=node: NEW in schema_stores(nodes, n), nodes)
        reader.new_served.set()
        for _ in range(4):  # node1's two workers, each asked by the kernel's turn
            assert_oracle(nodes, grown, NEW)
        assert_oracle(nodes, grown, "customerTotals")
        time.sleep(1)
    finally:
        reader.stopping.set()
        reader.join(30)
        nodes.stop_all()
    assert reader.problems == [] and reader.answers > 10, (reader.answers, reader.problems[:3])


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def chains_at(nodes: Nodes, node: str, versions: dict[int, tuple[int | None, int]]) -> bool:
    """Whether the node serves the runs' new versions of each chain it holds."""
    held = {int(chain): state for chain, state in nodes.status(node)["partitions"].items()}
    return all(held[c]["version"] == new for c, (_, new) in versions.items() if c in held)


def test_a_store_read_by_a_subscription_or_an_operation_is_not_removed_unless_forced(
    spark: LazySpark, tmp_path: Path
) -> None:
    """`apply` refuses a file that removes a store an open subscription reads (at any node,
    in any worker), unless --force; and one whose operations file reads a store it
    removes, which a node would refuse to start with. Forced, the removal is taken with no
    restart, and ends only the subscriptions that read the store."""
    served = serve(tmp_path, spark, settings="workers = 2")
    nodes, project = served.nodes, served.project
    shrunk = project.path.with_name("shrunk.toml")
    removed = project.path.read_text().index('[[stores]]\nname = "trainStatus"')
    text = project.path.read_text()
    shrunk.write_text(text[:removed] + text[text.index("[[stores]]", removed + 1) :])
    apply = [*STATEGATE, "apply", "--config", str(shrunk), "--dry-run"]
    try:
        plan = subprocess.run(apply, capture_output=True, text=True, timeout=60)
        assert plan.returncode == 0 and "stores to remove: trainStatus\n" in plan.stdout, plan
        dashboard = Socket(nodes.url("node2"))
        dashboard.subscribe("1", "subscription { trainStatus(key: 7) { meta { partial } } }")
        assert not dashboard.next_of("1")["data"]["trainStatus"]["meta"]["partial"]
        refused = subprocess.run(apply, capture_output=True, text=True, timeout=60)
        assert refused.returncode == 2, refused
        assert "read by open subscriptions: trainStatus by 1;" in refused.stderr, refused.stderr
        forced = subprocess.run([*apply, "--force"], capture_output=True, text=True, timeout=60)
        assert forced.returncode == 0 and "stores to remove: trainStatus" in forced.stdout, forced
        remove_for_real(served, dashboard, shrunk, spark)
        operations = shrunk.with_name("operations.graphql")
        operations.write_text("query Trains { trainStatus(key: 7) { record { key } } }\n")
        shrunk.write_text(
            shrunk.read_text().replace(
                "[settings]", '[settings]\noperations = "operations.graphql"', 1
            )
        )
        refused = subprocess.run(apply, capture_output=True, text=True, timeout=60)
        assert refused.returncode == 2, refused
        assert "operation 'Trains':" in refused.stderr and "trainStatus" in refused.stderr, refused
        assert "change the operations file first" in refused.stderr, refused.stderr
    finally:
        nodes.stop_all()


def remove_for_real(served: Any, dashboard: Socket, shrunk: Path, spark: LazySpark) -> None:
    """`apply --force` of the file without trainStatus, for real: every node (two workers
    each) takes it with no restart; the subscription on trainStatus ends with
    SCHEMA_CHANGED; one on customerTotals on the same connection carries on, and is pushed
    its key's next booking once the pipeline published it."""
    nodes, project = served.nodes, served.project
    watched = 'subscription { customerTotals(key: "C000014") { record { bookings } } }'
    dashboard.subscribe("2", watched)
    bookings = dashboard.next_of("2")["data"]["customerTotals"]["record"]["bookings"]
    project.path.write_text(shrunk.read_text())
    apply = [*STATEGATE, "apply", "--config", str(project.path), "--force", "--wait", "60"]
    applied = subprocess.run(apply, capture_output=True, text=True, timeout=90)
    assert applied.returncode == 0 and "applied in" in applied.stdout, applied
    ended = dashboard.message_of("1")
    assert ended["type"] == "error", ended
    (error,) = ended["payload"]
    assert error["extensions"]["code"] == "SCHEMA_CHANGED" and "trainStatus" in error["message"]
    for node in nodes.ids:
        assert "trainStatus" not in schema_stores(nodes, node), node
        said = nodes.processes.tail(node, 200)
        assert "SIGHUP: the project file read again: stores removed: trainStatus" in said, said
    append(project, [Record("C000014", {"price": 1.0}, START_MS)])
    job.run(projects.load(project.path), spark, notify=False)
    pushed = dashboard.next_of("2", timeout=60)["data"]["customerTotals"]["record"]
    assert int(pushed["bookings"]) == int(bookings) + 1, pushed
    dashboard.close()


def test_the_pipeline_takes_a_store_declared_since_on_sighup_in_the_same_process(
    spark: LazySpark, tmp_path: Path
) -> None:
    """`stategate pipeline --follow` reads its file again on SIGHUP: its loop stops as at a
    stop, builds the new store from the log (a one-shot run, in the same process), and
    follows again; `apply` then has the nodes take it. Nothing was restarted, and the store
    answers as the oracle computes it."""
    served = serve(tmp_path, spark)
    nodes, project = served.nodes, served.project
    said = tmp_path / "pipeline.log"
    pipeline = following(project, said)
    try:
        project.path.write_text(with_seats_by_customer(project.path.read_text()))
        pipeline.send_signal(signal.SIGHUP)
        wait_until(lambda: said.read_text().count("spark_pipeline.loop: following ") == 2, nodes)
        took = f"SIGHUP: the project file read again (stores added: {NEW}): following it from here"
        assert took in said.read_text() and pipeline.poll() is None, said.read_text()[-3000:]
        built = read_manifest(snapshot_dir(project)).built
        assert built is not None and NEW in built.stores, built
        grown = nodes.project = projects.load(project.path)
        command = [*STATEGATE, "apply", "--config", str(project.path), "--wait", "60"]
        applied = subprocess.run(command, capture_output=True, text=True, timeout=90)
        assert applied.returncode == 0, applied
        assert_oracle(nodes, grown, NEW)
    finally:
        pipeline.send_signal(signal.SIGTERM)
        pipeline.wait(60)
        nodes.stop_all()
