"""Real gateway nodes for the tests: one uvicorn process per node on a loopback port."""

from __future__ import annotations

import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from pyspark.sql import SparkSession

from gateway import config, launcher
from gateway.config import Project
from gateway.launcher import free_ports
from gateway.protocol import SECRET_HEADER
from spark_pipeline import job
from tests.projects import produce_test_events, write_project


class Nodes:
    """Starts, stops and queries the nodes of a project."""

    def __init__(self, project: Project, logs: Path) -> None:
        self.project = project
        self.logs = logs
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.client = httpx.Client(timeout=30)

    def url(self, node_id: str) -> str:
        return self.project.cluster.node(node_id).url

    @property
    def ids(self) -> list[str]:
        return [n.id for n in self.project.cluster.nodes]

    def start(self, node_id: str) -> None:
        log = open(self.logs / f"{node_id}.log", "ab")  # noqa: SIM115 - the process owns it
        self.procs[node_id] = launcher.start_node(self.project, node_id, log)
        try:
            launcher.wait_healthy(self.url(node_id), self.procs[node_id])
        except RuntimeError as exc:
            raise RuntimeError(f"{exc}: {(self.logs / f'{node_id}.log').read_text()}") from exc

    def logs_tail(self, lines: int = 30) -> str:
        """The last lines each node logged: what a failing test shows of the nodes' view."""
        parts = []
        for node_id in self.ids:
            path = self.logs / f"{node_id}.log"
            text = path.read_text(errors="replace").splitlines()[-lines:] if path.exists() else []
            parts.append(f"--- {node_id}.log\n" + "\n".join(text))
        return "\n".join(parts)

    def kill(self, node_id: str) -> None:
        proc = self.procs.pop(node_id)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)

    def stop_all(self) -> None:
        for node_id in list(self.procs):
            proc = self.procs.pop(node_id)
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
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
        return response.json()

    def data(self, node_id: str, query: str, variables: dict[str, Any] | None = None) -> Any:
        body = self.gql(node_id, query, variables)
        assert not body.get("errors"), body["errors"]
        return body["data"]

    def status(self, node_id: str) -> dict[str, Any]:
        response = self.client.get(
            f"{self.url(node_id)}/internal/status",
            headers={SECRET_HEADER: self.project.cluster.secret},
        )
        response.raise_for_status()
        return response.json()


@dataclass
class Served:
    root: Path
    project: Project
    nodes: Nodes


def serve(
    root: Path,
    spark: SparkSession,
    seed: int = 1,
    snapshot_url: str | None = None,
    start: bool = True,
) -> Served:
    """A 3-node cluster on loopback serving a freshly built small project."""
    project = config.load(write_project(root, free_ports(3), snapshot_url=snapshot_url))
    produce_test_events(project, seed=seed)
    job.run(project, spark, notify=False)
    nodes = Nodes(project, root)
    if start:
        for node_id in nodes.ids:
            nodes.start(node_id)
    return Served(root, project, nodes)
