"""Settings read again while serving (stategate/reloading.py), for real: a node of two
workers, SIGHUP to its keeper after its project file changed. What a reload applies (limits,
CORS origins, the log level) holds from the next request in every worker, on a connection
kept open across it; a file that does not load, or that changes what only a restart
applies, changes nothing and says why in one line."""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from contracts import project as projects
from contracts.project import Project
from spark_pipeline import job
from spark_pipeline.spark import LazySpark
from stategate.launcher import Processes, free_ports, wait_serving
from tests.kafka import shared
from tests.projects import produce_test_events, write_project

SETTINGS = "workers = 2\nmax_aliases = 5"
DASHBOARD = "https://dash.example.com"
FOUR_ALIASES = "{ a: stores { name } b: stores { name } c: stores { name } d: stores { name } }"
WITHIN_S = 10.0


@pytest.fixture(scope="module")
def node(spark: LazySpark, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Project]:
    root = tmp_path_factory.mktemp("reload")
    kafka = (shared().bootstrap, f"{root.name}-")
    project = projects.load(
        write_project(root, free_ports(1), replicas=1, settings=SETTINGS, kafka=kafka)
    )
    produce_test_events(project, seed=3, n_bookings=200, n_trains=50)
    job.run(project, spark, notify=False)
    processes = Processes(root)
    processes.start_nodes(project)
    try:
        wait_serving(project, ["node1"])
        project.path.with_suffix(".pid").write_text(str(processes.pid("node1")))
        yield project
    finally:
        processes.stop_all()


def connection(project: Project) -> http.client.HTTPConnection:
    host, port = project.cluster.node("node1").address.rsplit(":", 1)
    return http.client.HTTPConnection(host, int(port), timeout=10)


def ask(conn: http.client.HTTPConnection, query: str) -> dict:
    conn.request("POST", "/graphql", json.dumps({"query": query}),
                 {"content-type": "application/json"})  # fmt: skip
    answer = conn.getresponse()
    body: dict = json.loads(answer.read())
    return body


def refused_for_aliases(body: dict) -> str | None:
    """The limit an answer was refused with, or None when it was answered."""
    errors = body.get("errors") or []
    found = [re.search(r"max_aliases, (\d+)", e["message"]) for e in errors]
    return next((m.group(1) for m in found if m), None)


def hang_up(project: Project, changes: dict[str, str], said: str) -> None:
    """Rewrite entries of the project file (old text -> new), SIGHUP the keeper, and wait
    until both workers logged `said` once more."""
    log = project.path.parent / "node1.log"
    before = log.read_text().count(said)
    text = project.path.read_text()
    for old, new in changes.items():
        assert old in text, old
        text = text.replace(old, new)
    project.path.write_text(text)
    os.kill(int(project.path.with_suffix(".pid").read_text()), signal.SIGHUP)
    deadline = time.monotonic() + WITHIN_S
    while log.read_text().count(said) < before + 2:  # the keeper and its follower
        assert time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.1)


def preflight(project: Project) -> str | None:
    conn = connection(project)
    headers = {"origin": DASHBOARD, "access-control-request-method": "POST"}
    conn.request("OPTIONS", "/graphql", headers=headers)
    answer = conn.getresponse()
    answer.read()
    conn.close()
    return answer.getheader("access-control-allow-origin")


def test_sighup_applies_limits_origins_and_log_level_in_every_worker(node: Project) -> None:
    kept = connection(node)
    assert refused_for_aliases(ask(kept, FOUR_ALIASES)) is None
    assert preflight(node) is None
    sock = kept.sock
    hang_up(
        node,
        {"max_aliases = 5": 'max_aliases = 3\ncors_origins = ["https://dash.example.com"]\n'
         'log_level = "debug"'},
        "SIGHUP: the project file read again: max_aliases, log_level, cors_origins",
    )  # fmt: skip
    assert refused_for_aliases(ask(kept, FOUR_ALIASES)) == "3"
    assert kept.sock is sock, "the kept connection was dropped"
    kept.close()
    for _ in range(20):  # new connections, spread over both workers by the kernel
        fresh = connection(node)
        assert refused_for_aliases(ask(fresh, FOUR_ALIASES)) == "3"
        fresh.close()
    assert preflight(node) == DASHBOARD


def test_sighup_takes_another_index_with_the_same_answers(node: Project) -> None:
    """An index is the node's own (in memory): taken on SIGHUP, its chains opened again."""
    ordered = "{ customerTotalsList(orderBy: SEATS_DESC, first: 5) { records { key seats } } }"
    kept = connection(node)
    before = ask(kept, ordered)
    assert not before.get("errors") and before["data"]["customerTotalsList"]["records"]
    text = node.path.read_text()
    try:
        hang_up(
            node,
            {'index = ["revenue"]': 'index = ["seats"]'},
            "SIGHUP: the project file read again: index changed: customerTotals",
        )
        log = node.path.parent / "node1.log"
        deadline = time.monotonic() + WITHIN_S
        while log.read_text().rsplit("index changed", 1)[1].count("opened chains") < 2:
            assert time.monotonic() < deadline, log.read_text()[-3000:]  # in both workers
            time.sleep(0.1)
        assert ask(kept, ordered)["data"] == before["data"]
    finally:
        node.path.write_text(text)
        kept.close()


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"max_aliases = 3": "max_aliases = 'many'"}, "max_aliases"),  # does not load
        (
            {"max_aliases = 3": "max_aliases = 2\nmax_document_tokens = 20000"},
            "max_document_tokens",
        ),
        ({"partitions = 9": "partitions = 12"}, "[cluster] differ"),
        (
            {
                'name = "tripTotals"\nkind = "aggregate"\ntopic = "trips"\nglobal = true\n': (
                    'name = "tripTotals"\nkind = "aggregate"\ntopic = "trips"\n'
                )
            },
            "stores made global or partitioned: tripTotals",
        ),
    ],
)
def test_a_file_a_reload_cannot_apply_changes_nothing_and_says_why(
    node: Project, change: dict[str, str], why: str
) -> None:
    text = node.path.read_text()
    try:
        hang_up(node, change, "SIGHUP: nothing changed")
        log = (node.path.parent / "node1.log").read_text()
        assert why in log.rsplit("SIGHUP: nothing changed", 1)[1].splitlines()[0], log[-2000:]
        conn = connection(node)
        assert refused_for_aliases(ask(conn, FOUR_ALIASES)) == "3"  # as before
        conn.close()
    finally:
        node.path.write_text(text)


def test_apply_says_whether_the_node_took_the_file(node: Project) -> None:
    """`stategate apply` asks the node to read its file again, then hears how that went: a
    file that changes a setting only a restart applies ends apply at once, exit 1, naming it
    (nothing changed on the node); one a reload applies is applied once the node read it."""
    text = node.path.read_text()
    apply = [sys.executable, "-m", "stategate.cli", "apply", "--config", str(node.path)]
    try:
        node.path.write_text(text.replace("workers = 2", "workers = 2\nmax_document_tokens = 9999"))
        started = time.monotonic()
        refused = subprocess.run([*apply, "--wait", "60"], capture_output=True, text=True)
        assert refused.returncode == 1, refused.stdout + refused.stderr
        assert time.monotonic() - started < 30, "apply waited for a file the node refused"
        assert "stategate apply: node1 did not take the file: refused: max_document_tokens" in (
            refused.stderr
        ), refused.stderr
        assert "applied" not in refused.stdout
        node.path.write_text(re.sub(r"max_aliases = \d+", "max_aliases = 4", text))
        taken = subprocess.run([*apply, "--wait", "60"], capture_output=True, text=True)
        assert taken.returncode == 0, taken.stdout + taken.stderr
        assert "applied in" in taken.stdout
        conn = connection(node)
        assert refused_for_aliases(ask(conn, FOUR_ALIASES)) is None  # 4 aliases: answered
        conn.close()
    finally:
        node.path.write_text(text)
        hang_up(node, {}, "SIGHUP: the project file read again")
