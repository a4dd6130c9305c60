"""Node processes for the benchmark: start them, wait for /health, measure them, stop them."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

import httpx
import psutil

from gateway import launcher
from gateway.config import Project
from gateway.protocol import SECRET_HEADER

ROOT = Path(__file__).resolve().parent.parent


class NodeProcesses:
    """One subprocess per node of a project, running `python -m <module...> --node <id>`."""

    def __init__(self, project: Project, command: list[str], logs: Path, label: str) -> None:
        self.project = project
        self.command = command
        self.logs = logs
        self.label = label
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self._files: list[IO[bytes]] = []

    @classmethod
    def gateway(cls, project: Project, logs: Path) -> NodeProcesses:
        command = ["-m", "gateway.cli", "node", "--config", str(project.path)]
        return cls(project, command, logs, "gateway")

    @classmethod
    def naive(cls, project: Project, logs: Path) -> NodeProcesses:
        return cls(project, ["-m", "bench.naive", "--config", str(project.path)], logs, "naive")

    def url(self, node_id: str) -> str:
        return self.project.cluster.node(node_id).url

    @property
    def ids(self) -> list[str]:
        return [n.id for n in self.project.cluster.nodes]

    def log_path(self, node_id: str) -> Path:
        return self.logs / f"{self.label}-{node_id}.log"

    def start(self, node_ids: list[str] | None = None, timeout_s: float = 120) -> None:
        self.logs.mkdir(parents=True, exist_ok=True)
        for node_id in node_ids or self.ids:
            log = open(self.log_path(node_id), "ab")  # noqa: SIM115 - closed in stop()
            self._files.append(log)
            self.procs[node_id] = subprocess.Popen(
                [sys.executable, *self.command, "--node", node_id],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        for node_id in node_ids or self.ids:
            self._wait_healthy(node_id, timeout_s)

    def _wait_healthy(self, node_id: str, timeout_s: float) -> None:
        try:
            launcher.wait_healthy(self.url(node_id), self.procs[node_id], timeout_s)
        except RuntimeError as exc:
            tail = self.log_path(node_id).read_text()[-3000:]
            raise RuntimeError(f"{self.label} {node_id}: {exc}: {tail}") from exc

    def wait_serving(self, timeout_s: float = 60) -> None:
        """Gateway nodes: every node serves every partition it hosts, and has seen its peers."""
        deadline = time.monotonic() + timeout_s
        secret = {SECRET_HEADER: self.project.cluster.secret}
        pending = set(self.procs)
        while pending and time.monotonic() < deadline:
            for node_id in sorted(pending):
                status = httpx.get(f"{self.url(node_id)}/internal/status", headers=secret).json()
                hosted = set(self.project.cluster.hosted_by(node_id))
                if {int(p) for p in status["partitions"]} >= hosted:
                    pending.discard(node_id)
            time.sleep(0.3)
        if pending:
            raise RuntimeError(f"nodes {sorted(pending)} do not serve all their partitions")
        time.sleep(1.5 * self.project.settings.health_interval_s)  # one membership poll

    def process(self, node_id: str) -> psutil.Process:
        return psutil.Process(self.procs[node_id].pid)

    def processes(self) -> list[psutil.Process]:
        return [self.process(n) for n in self.procs]

    def rss_mib(self, node_id: str) -> float:
        return self.process(node_id).memory_info().rss / 2**20

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        self.procs.clear()
        for log in self._files:
            log.close()
        self._files.clear()
