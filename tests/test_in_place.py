"""A store's rows declared otherwise while clients read it (README: Changing stores): the
pipeline builds the new declaration as a table of its own beside the one the nodes read
(contracts/generations.py); every node reads the old one until every node has the new one
built, then the new one; subscriptions carry over; once no node reads the old table, the
pipeline's next run leaves it out. No read fails meanwhile, and every answer is one
declaration's whole: the old declaration's oracle, or the new one's."""

from __future__ import annotations

import itertools
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from contracts import project as projects
from contracts.generations import generation
from contracts.manifest import read_manifest
from contracts.project import Project
from contracts.snapshot_file import rows_as
from spark_pipeline import job
from spark_pipeline.job import snapshot_dir
from spark_pipeline.spark import LazySpark
from tests import oracle
from tests.live import Socket
from tests.nodes import Nodes, serve
from tests.projects import HOUR_MS, START_MS
from tests.wire import as_row, iso, selection

STORE = "hourlyRevenue"
HOURLY = f'name = "{STORE}"\nkind = "window"\ntopic = "bookings"\nsize = "1h"\n'
KEYS = ["C000014", "C000021", "Zoë", "gone"]
SPAN = {"from": iso(START_MS - 2 * HOUR_MS), "to": iso(START_MS + 8 * HOUR_MS)}
SWITCH_S = 90
STATEGATE = [sys.executable, "-m", "stategate.cli"]


def query(project: Project, kind: str = "query") -> str:
    store = project.stores[STORE]
    return (
        f"{kind}($key: String!, $from: DateTime!, $to: DateTime!) {{ "
        f"{STORE}(key: $key, from: $from, to: $to) {{ meta {{ partial }} "
        f"windows {{ {selection(store)} }} }} }}"
    )


def expected(project: Project) -> dict[str, list[tuple[Any, ...]]]:
    """Each key's windows within SPAN, by the project's declaration of the store."""
    rows = [r for part in oracle.expected_store(project, STORE).values() for r in part]
    low, high = START_MS - 2 * HOUR_MS, START_MS + 8 * HOUR_MS
    return {k: sorted(r for r in rows if r[0] == k and low <= r[1] <= high) for k in KEYS}


class Reader(threading.Thread):
    """A client reading the store on every node in turn: which declaration each answer
    is (its oracle's whole), and any answer that is neither, an error or partial."""

    def __init__(self, nodes: Nodes, by: dict[str, Project]) -> None:
        super().__init__()
        self.nodes = nodes
        self.oracles = {name: expected(p) for name, p in by.items()}
        self.stores = {name: p.stores[STORE] for name, p in by.items()}
        self.document = query(next(iter(by.values())))
        self.stopping = threading.Event()
        self.seen: list[str] = []
        self.problems: list[str] = []

    def run(self) -> None:
        for i in itertools.count():
            if self.stopping.is_set():
                return
            node, key = self.nodes.ids[i % 3], KEYS[i % len(KEYS)]
            body = self.nodes.gql(node, self.document, {"key": key, **SPAN})
            self.seen.append(self._which(key, body) or "")
            if not self.seen[-1]:
                self.problems.append(f"{node} {key}: {str(body)[:600]}")

    def _which(self, key: str, body: dict[str, Any]) -> str | None:
        if body.get("errors") or body["data"][STORE]["meta"]["partial"]:
            return None
        return which(self, key, body["data"][STORE]["windows"])


def which(reader: Reader, key: str, windows: list[dict[str, Any]]) -> str | None:
    """The declaration whose oracle `windows` are, whole ("either": a key with none in
    both); None when neither's."""
    found = []
    for name, store in reader.stores.items():
        try:
            rows = sorted(as_row(store, w) for w in windows)
        except AssertionError:  # a window of the other declaration's size
            continue
        if rows == reader.oracles[name][key]:
            found.append(name)
    return None if not found else found[0] if len(found) == 1 else "either"


def test_a_window_resized_in_place_is_read_whole_before_and_after_every_node_switched(
    spark: LazySpark, tmp_path: Path
) -> None:
    """Three nodes of two workers each read `hourlyRevenue` with one-hour windows; its file
    makes them two-hour windows, and `apply` has each node read it. The pipeline's run builds
    the new declaration beside the old; the nodes switch once all have it; a subscription on
    the store carries over and is pushed the new windows; the next run leaves the old table
    out."""
    served = serve(tmp_path, spark, settings="workers = 2")
    nodes, before = served.nodes, served.project
    text = before.path.read_text()
    assert HOURLY in text
    resized = projects.load(write(before.path.with_name("resized.toml"), text.replace(
        HOURLY, HOURLY.replace('size = "1h"', 'size = "2h"')
    )))  # fmt: skip
    new_table = generation(resized.stores[STORE]).name
    reader = Reader(nodes, {"old": before, "new": resized})
    applying: subprocess.Popen[str] | None = None
    dashboard = Socket(nodes.url("node2"))
    try:
        dashboard.subscribe("1", query(before, "subscription"), {"key": KEYS[0], **SPAN})
        first = dashboard.next_of("1")["data"][STORE]["windows"]
        assert which(reader, KEYS[0], first) == "old", first
        reader.start()
        planned = subprocess.run(
            [*STATEGATE, "apply", "--config", str(resized.path), "--dry-run"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert planned.returncode == 0, planned
        assert f"stores to change in place: {STORE}\n" in planned.stdout, planned.stdout
        assert f"building: the pipeline builds {new_table} from the log" in planned.stdout

        before.path.write_text(resized.path.read_text())  # every node's file: they share it
        applying = subprocess.Popen(
            [*STATEGATE, "apply", "--config", str(before.path), "--wait", str(SWITCH_S)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        declared = rows_as(resized.stores[STORE])
        for node in nodes.ids:  # declared, not built: still read from the old table
            wait_until(lambda n=node: nodes.status(n)["declared"][STORE] == declared, nodes)
            assert nodes.status(node)["pending"] == [STORE]  # its new declaration: not built
        time.sleep(2 * before.settings.health_interval_s)
        assert set(reader.seen) <= {"old", "either"}, reader.problems[:3]
        job.run(resized, spark)  # the new declaration built beside the old one
        rest, _ = applying.communicate(timeout=SWITCH_S + 30)
        assert applying.returncode == 0, rest
        assert f"{STORE} declared on 3 of 3, built on 3 of 3, read on 3 of 3" in rest, rest
        for node in nodes.ids:
            assert nodes.status(node)["pending"] == []
            assert new_table in nodes.status(node)["serving"], nodes.status(node)
            assert STORE not in nodes.status(node)["serving"]
        pushed = dashboard.next_of("1", timeout=30)["data"][STORE]["windows"]
        assert which(reader, KEYS[0], pushed) == "new", pushed
        time.sleep(4 * before.settings.health_interval_s)  # every worker switched since
        settled = len(reader.seen)

        job.run(resized, spark)  # no node reads the old table: left out of the next bases
        built = read_manifest(snapshot_dir(resized)).built
        assert built is not None and new_table in built.stores and STORE not in built.stores
        for node in nodes.ids:
            wait_until(lambda n=node: STORE not in nodes.status(n)["stores"], nodes)
        time.sleep(1)
    finally:
        if applying is not None and applying.poll() is None:
            applying.kill()
        reader.stopping.set()
        reader.join(30)
        dashboard.close()
        nodes.stop_all()
    assert reader.problems == [], (len(reader.seen), reader.problems[:3])
    late = reader.seen[settled:]
    assert "old" in reader.seen and late and set(late) <= {"new", "either"}, late[-20:]


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def wait_until(done: Any, nodes: Nodes) -> None:
    deadline = time.monotonic() + SWITCH_S
    while not done():
        assert time.monotonic() < deadline, nodes.logs_tail()
        time.sleep(0.2)
