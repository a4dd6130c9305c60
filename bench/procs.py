"""Node processes for the benchmark: the gateway's or the naive layer's, started with the
project's one launcher (stategate/launcher.py), measured with psutil."""

from __future__ import annotations

import sys
from pathlib import Path

import psutil

from contracts.project import Project
from stategate.launcher import Processes, node_command, wait_serving


class NodeProcesses:
    """One process per node of a project, from `command(node id)`."""

    def __init__(self, project: Project, logs: Path, label: str) -> None:
        self.project = project
        self.label = label
        self.processes_ = Processes(logs)

    @classmethod
    def gateway(cls, project: Project, logs: Path) -> NodeProcesses:
        return cls(project, logs, "gateway")

    @classmethod
    def naive(cls, project: Project, logs: Path) -> NodeProcesses:
        return cls(project, logs, "naive")

    def url(self, node_id: str) -> str:
        return self.project.cluster.node(node_id).url

    @property
    def ids(self) -> list[str]:
        return [n.id for n in self.project.cluster.nodes]

    def start(self, node_ids: list[str] | None = None, timeout_s: float = 120) -> None:
        for node_id in node_ids or self.ids:
            url = self.project.cluster.node(node_id).url
            self.processes_.start(f"{self.label}-{node_id}", self._command(node_id), url, timeout_s)

    def _command(self, node_id: str) -> list[str]:
        if self.label == "gateway":
            return node_command(self.project, node_id)
        config = str(self.project.path)
        return [sys.executable, "-m", "bench.naive", "--config", config, "--node", node_id]

    def wait_serving(self, timeout_s: float = 60) -> None:
        wait_serving(self.project, self.ids, timeout_s)

    def process(self, node_id: str) -> psutil.Process:
        """The node's process: the one started (a gateway node's keeper)."""
        return psutil.Process(self.processes_.pid(f"{self.label}-{node_id}"))

    def workers(self, node_id: str) -> list[psutil.Process]:
        """Every process of the node: the one started, and the workers it started."""
        started = self.process(node_id)
        return [started, *started.children()]

    def processes(self) -> list[psutil.Process]:
        return [p for n in self.ids for p in self.workers(n)]

    def rss_mib(self, node_id: str) -> float:
        """The node's resident memory, its processes' added up (a page they share counts
        once in each)."""
        rss: int = sum(p.memory_info().rss for p in self.workers(node_id))
        return rss / 2**20

    def pss_mib(self, node_id: str) -> float:
        """The node's proportional memory (Linux's PSS): a page shared by k processes counts
        1/k in each, so the node's workers add up to what the node holds."""
        pss: int = sum(p.memory_full_info().pss for p in self.workers(node_id))
        return pss / 2**20

    def stop(self) -> None:
        self.processes_.stop_all()
