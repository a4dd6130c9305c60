"""Real gateway nodes for the tests: one uvicorn process per node on a loopback port."""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil
from prometheus_client.parser import text_string_to_metric_families

from contracts import project as projects
from contracts.cluster_secret import secret_headers
from contracts.project import Project
from contracts.tls import verify
from spark_pipeline import job
from spark_pipeline.spark import LazySpark
from stategate.launcher import Processes, free_ports, wait_serving
from tests.kafka import shared
from tests.projects import produce_test_events, write_project

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


class Nodes:
    """Starts, stops and queries the nodes of a project."""

    def __init__(self, project: Project, logs: Path) -> None:
        self.project = project
        self.processes = Processes(logs)
        self.client = httpx.Client(timeout=30, verify=verify(project.tls))

    def url(self, node_id: str) -> str:
        return self.project.cluster.node(node_id).url

    @property
    def ids(self) -> list[str]:
        return [n.id for n in self.project.cluster.nodes]

    def start(self, node_id: str) -> None:
        self.processes.start_nodes(self.project, [node_id])

    def start_all(self, serving: bool = True) -> None:
        """Start every node, and return once each serves every partition it hosts (unless
        not `serving`). If one fails, every node is stopped: a fixture that fails before its
        yield stops none itself."""
        try:
            self.processes.start_nodes(self.project, self.ids)
            if serving:
                wait_serving(self.project, self.ids)
        except BaseException:
            self.stop_all()
            raise

    def kill(self, node_id: str) -> None:
        self.processes.kill(node_id)

    def logs_tail(self, lines: int = 30) -> str:
        """The last lines each node logged: what a failing test shows of the nodes' view."""
        return "\n".join(self.processes.tail(node_id, lines) for node_id in self.ids)

    def stop_all(self) -> None:
        self.processes.stop_all()
        self.client.close()

    def gql(
        self,
        node_id: str,
        query: str,
        variables: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        response = self.client.post(
            f"{self.url(node_id)}/graphql",
            json={"query": query, "variables": variables or {}},
            headers=headers or {},
        )
        assert response.status_code in (200, 400), response.text
        body: dict[str, Any] = response.json()
        return body

    def data(self, node_id: str, query: str, variables: dict[str, Any] | None = None) -> Any:
        body = self.gql(node_id, query, variables)
        assert not body.get("errors"), body["errors"]
        return body["data"]

    def metrics(self, node_id: str) -> Samples:
        """The node's /metrics, parsed: (sample name, sorted labels) -> value."""
        response = self.client.get(f"{self.url(node_id)}/metrics")
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/plain")
        return {
            (sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(response.text)
            for sample in family.samples
        }

    def rss(self, node_id: str) -> int:
        """The node process's resident memory, in bytes."""
        return int(psutil.Process(self.processes.pid(node_id)).memory_info().rss)

    def cli(self, *args: str) -> str:
        """Run `stategate <args> --config <the project>`; its output (it must succeed)."""
        command = [sys.executable, "-m", "stategate.cli", *args, "--config", str(self.project.path)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout

    def status(self, node_id: str) -> dict[str, Any]:
        response = self.client.get(
            f"{self.url(node_id)}/internal/status",
            headers=secret_headers(self.project.cluster.secret),
        )
        response.raise_for_status()
        body: dict[str, Any] = response.json()
        return body


def metric(samples: Samples, name: str, **labels: str) -> float:
    """One sample's value; 0 when the node has not counted it yet."""
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


@dataclass
class Served:
    root: Path
    project: Project
    nodes: Nodes


def serve(
    root: Path,
    spark: LazySpark,
    seed: int = 1,
    snapshot_url: str | None = None,
    start: bool = True,
    settings: str = "",
    kafka: tuple[str, str] | None = None,
    tls: bool = False,
    log: str = "kafka",
) -> Served:
    """A 3-node cluster on loopback serving a freshly built small project (built in the
    driver, as the pipeline builds a run this small; tests/test_pipeline.py builds on
    Spark's executors). Its topics are on the test process's Kafka broker, under a prefix
    of its own, unless `kafka` names another or `log` is "file" (the file log: for tests
    of the file log, or that append to it by hand)."""
    if kafka is None and log == "kafka":
        kafka = (shared().bootstrap, f"{root.name}-")
    path = write_project(
        root, free_ports(3), snapshot_url=snapshot_url, settings=settings, kafka=kafka, tls=tls
    )
    project = projects.load(path)
    produce_test_events(project, seed=seed)
    job.run(project, spark, notify=False)
    nodes = Nodes(project, root)
    if start:
        nodes.start_all(serving=False)
    return Served(root, project, nodes)


FOLLOW_START_S = 180.0  # Spark's start and a catch-up run, on 2 busy cores


def following(project: Project, log: Path) -> subprocess.Popen[bytes]:
    """`stategate pipeline --follow`, logging to `log`, once it follows the log."""
    command = [sys.executable, "-m", "stategate.cli", "pipeline", "--config", str(project.path)]
    with open(log, "wb") as out:
        follow = subprocess.Popen([*command, "--follow"], stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + FOLLOW_START_S
    while b"spark_pipeline.loop: following " not in log.read_bytes():
        if follow.poll() is not None or time.monotonic() > deadline:
            follow.kill()
            raise AssertionError(f"the pipeline did not start:\n{log.read_text()[-3000:]}")
        time.sleep(0.2)
    return follow
