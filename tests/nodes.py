"""Real gateway nodes for the tests: one uvicorn process per node on a loopback port."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from pyspark.sql import SparkSession

from gateway import config
from gateway.config import Project
from gateway.protocol import SECRET_HEADER
from spark_pipeline import job
from tests.projects import produce_test_events, write_project


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


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
        self.procs[node_id] = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gateway.cli",
                "node",
                "--config",
                str(self.project.path),
                "--node",
                node_id,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.procs[node_id].poll() is not None:
                raise RuntimeError(
                    f"{node_id} exited: {(self.logs / f'{node_id}.log').read_text()}"
                )
            try:
                if self.client.get(f"{self.url(node_id)}/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.1)
        raise RuntimeError(f"{node_id} did not come up")

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
