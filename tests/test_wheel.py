"""The built wheel, installed as a user installs it: `pip install stategate-*.whl` into a fresh
venv (a node's install: no Spark) serves a node from a snapshot store the pipeline built, with
its playground and static assets, and the commands that need Spark say which extra to add."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from contracts import project as projects
from stategate.launcher import free_ports, wait_healthy, wait_serving
from tests import oracle
from tests.nodes import Served
from tests.projects import reading, write_project

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("wheel")
    dist, venv = root / "dist", root / "venv"
    pip_wheel = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist)]
    subprocess.run([*pip_wheel, str(ROOT)], check=True)
    (wheel,) = dist.glob("stategate-*.whl")
    # A fresh venv, and the same pip installing into it (`--python`): seeding the venv with a
    # pip of its own, and byte-compiling every dependency at install time (Python compiles
    # what a node imports when it imports it), took most of this fixture's time.
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    install = [sys.executable, "-m", "pip", "--python", str(venv / "bin/python"), "install"]
    install += ["-q", "--no-compile", "-c", str(ROOT / "constraints.txt")]
    # without the checkout on PYTHONPATH: its stategate.egg-info would pass for the wheel
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    subprocess.run([*install, str(wheel)], check=True, env=clean)
    return venv


def run(venv: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(venv / "bin/stategate"), *args], capture_output=True, text=True, timeout=120
    )


@pytest.fixture
def node_project(served: Served, tmp_path: Path) -> Iterator[Path]:
    """One node hosting every partition of the shared cluster's snapshot store."""
    path = write_project(tmp_path, free_ports(1), replicas=1)
    reading(path, served.project)
    yield path


def test_a_node_installed_from_the_wheel_serves_without_spark(
    venv: Path, node_project: Path, served: Served
) -> None:
    python = str(venv / "bin/python")
    no_spark = subprocess.run([python, "-c", "import pyspark"], capture_output=True)
    assert no_spark.returncode != 0, "a node's install pulled in Spark"
    assert run(venv, "--version").stdout.strip() == "0.1.0"
    refused = run(venv, "pipeline", "--config", str(node_project))
    assert refused.returncode == 2
    assert "pip install 'stategate[pipeline]'" in refused.stderr

    project = projects.load(node_project)
    url = project.cluster.nodes[0].url
    command = [str(venv / "bin/stategate"), "node", "--config", str(node_project), "--node"]
    log = node_project.parent / "node1.log"
    with open(log, "wb") as out:
        node = subprocess.Popen(
            [*command, "node1"], cwd=node_project.parent, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        wait_healthy(url, node)
        wait_serving(project, ["node1"])
        expected = oracle.expected_store(served.project, "customerTotals")
        keys = sorted(row[0] for part in expected.values() for row in part)[:50]
        query = (
            "query($k: [String!]!) "
            "{ customerTotalsBatch(keys: $k) { entries { key record { bookings } } } }"
        )
        body = httpx.post(f"{url}/graphql", json={"query": query, "variables": {"k": keys}}).json()
        counts = {row[0]: str(row[1]) for part in expected.values() for row in part}  # a Long
        got = body["data"]["customerTotalsBatch"]["entries"]
        assert [(e["key"], e["record"]["bookings"]) for e in got] == [(k, counts[k]) for k in keys]
        page = httpx.get(f"{url}/graphql", headers={"accept": "text/html"}).text
        assert "/static/graphiql/graphiql.min.js" in page
        assert httpx.get(f"{url}/static/graphiql/graphiql.min.js").status_code == 200
        assert httpx.get(f"{url}/static/graphql-ws/graphql-ws.min.js").status_code == 200
    finally:
        node.send_signal(signal.SIGTERM)
        # uvicorn shuts down cleanly, then exits by the signal it caught.
        assert node.wait(30) in (0, -signal.SIGTERM)
    assert b"Application shutdown complete" in log.read_bytes()
