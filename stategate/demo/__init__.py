"""The demo: a railway operator's bookings on a 3-node loopback cluster.

Its project file and example query ship with the package; `stategate demo` writes the
project file into a working folder (default .demo/), generates the bookings there, runs the
pipeline, starts the nodes and prints how to query them.
"""

from __future__ import annotations

import json
import shutil
import signal
from datetime import UTC, datetime
from pathlib import Path

import httpx

from contracts import project as projects
from contracts.project import Project
from stategate.launcher import Processes

HERE = Path(__file__).resolve().parent
PROJECT_TEMPLATE = HERE / "stategate.toml"
# The demo's bookings span the week before this instant, so the example queries find them.
END_MS = int(datetime(2026, 11, 1, tzinfo=UTC).timestamp() * 1000)


def example_query() -> str:
    return (HERE / "example.graphql").read_text()


def prepare(folder: Path, fresh: bool) -> Project:
    """The demo project in `folder` (written from the template; emptied first if fresh)."""
    if fresh and folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "stategate.toml"
    header = "# Written by `stategate demo` from stategate/demo/stategate.toml.\n"
    path.write_text(header + PROJECT_TEMPLATE.read_text())
    return projects.load(path)


def run(folder: Path, customers: int, events: int, fresh: bool, check: bool) -> int:
    from spark_pipeline.job import run as run_pipeline
    from spark_pipeline.session import spark_session
    from stategate.demo import bookings

    project = prepare(folder, fresh)
    if not project.log_dir.exists():
        print(f"generating {events} bookings of {customers} customers ...", flush=True)
        bookings.generate(project, customers=customers, events=events, end_ms=END_MS)
    print("running the pipeline (Spark, local mode) ...", flush=True)
    report = run_pipeline(project, spark_session(None), notify=False)
    print(f"published: {report.to_json().decode()}", flush=True)
    nodes = Processes(logs=None)
    try:
        nodes.start_nodes(project)
        print(_instructions(project), flush=True)
        if check:
            return _check(project)
        signal.sigwait({signal.SIGINT, signal.SIGTERM})
    finally:
        nodes.stop_all()
    return 0


def _instructions(project: Project) -> str:
    url = project.cluster.nodes[0].url
    query = (
        '{ latestBooking(key: "C000001") { record { trip price } meta { partitions { node } } } }'
    )
    payload = json.dumps({"query": query})
    lines = [
        "",
        "The cluster is up: " + ", ".join(f"{n.id} {n.url}" for n in project.cluster.nodes),
        f"GraphQL playground: {url}/graphql   (any node answers any query)",
        f"Partition map:      {url}/cluster",
        f"Project file:       {project.path}",
        "",
        "Try this in the playground:",
        example_query(),
        "",
        "or with curl:",
        f"  curl -s {url}/graphql -H 'content-type: application/json' -d '{payload}'",
        "",
        "Ctrl-C stops the nodes.",
    ]
    return "\n".join(lines)


def _check(project: Project) -> int:
    """Ask the example queries of every node; fail loudly on any error."""
    query = example_query()
    for node in project.cluster.nodes:
        response = httpx.post(f"{node.url}/graphql", json={"query": query}, timeout=30)
        body = response.json()
        if response.status_code != 200 or body.get("errors"):
            print(f"{node.id}: {json.dumps(body)[:2000]}")
            return 1
        data = body["data"]
        empty = [name for name, value in data.items() if not _has_rows(value)]
        if empty:
            print(f"{node.id}: no rows from {empty}")
            return 1
        print(f"{node.id}: ok, {json.dumps(data['latestBooking']['record'], ensure_ascii=False)}")
    return 0


def _has_rows(value: dict[str, object]) -> bool:
    rows = value.get("record") or value.get("entries") or value.get("records")
    return bool(rows or value.get("windows"))
