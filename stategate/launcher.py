"""Local processes of a cluster: its nodes, a snapshot store server, or any other server that
answers GET /health. What the demo, the tests and the benchmark share (on real machines each
node is started with `stategate node` by its own supervisor).

A start that fails stops what it started, and so does a start of several nodes one of which
fails. Whatever a caller left running is stopped when its process exits.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

import httpx

from contracts import chains
from contracts.auth import secret_headers
from contracts.project import Project

STOP_TIMEOUT_S = 15.0


@functools.cache
def probes() -> httpx.Client:
    """One client for the process's probes of its servers, shared by its threads: a client per
    probe made a TLS context each time, ~50 ms of CPU ten times a second while a node starts."""
    return httpx.Client()


def free_ports(count: int) -> list[int]:
    """`count` distinct loopback ports free right now."""
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def node_command(project: Project, node_id: str) -> list[str]:
    return [sys.executable, "-m", "stategate.cli", "node", "--config", str(project.path),
            "--node", node_id]  # fmt: skip


def store_command(project: Project, listen: str) -> list[str]:
    return [sys.executable, "-m", "stategate.cli", "store", "--config", str(project.path),
            "--listen", listen]  # fmt: skip


class Processes:
    """Named server processes, each logging to `<logs>/<name>.log` (or to this terminal when
    logs is None)."""

    def __init__(self, logs: Path | None = None) -> None:
        self.logs = logs
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self._files: dict[str, IO[bytes]] = {}
        # None outlives this process: what a caller that failed left running (a test's
        # fixture that failed before its yield) is stopped at its exit at the latest.
        atexit.register(self.stop_all)

    def log_path(self, name: str) -> Path | None:
        return None if self.logs is None else self.logs / f"{name}.log"

    def start(self, name: str, command: list[str], url: str, timeout_s: float = 60) -> None:
        """Start a server and wait until GET {url}/health answers 200; stop it if it does
        not come up."""
        output = None
        path = self.log_path(name)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            output = self._files[name] = open(path, "ab")  # noqa: SIM115 - closed in stop()
        self.procs[name] = subprocess.Popen(
            command,
            stdout=output,
            stderr=subprocess.STDOUT if output is not None else None,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        try:
            wait_healthy(url, self.procs[name], timeout_s)
        except BaseException as exc:  # a timeout, or a stop (Ctrl-C) while it starts
            self.stop(name)
            if isinstance(exc, RuntimeError):
                raise RuntimeError(f"{name}: {exc}\n{self.tail(name)}") from exc
            raise

    def start_nodes(self, project: Project, node_ids: list[str] | None = None) -> None:
        """Start the nodes one after another; if one does not come up, stop those started
        before it too."""
        started: list[str] = []
        try:
            for node_id in node_ids or [n.id for n in project.cluster.nodes]:
                url = project.cluster.node(node_id).url
                self.start(node_id, node_command(project, node_id), url)
                started.append(node_id)
        except BaseException:
            self.stop_all(started)
            raise

    def pid(self, name: str) -> int:
        return self.procs[name].pid

    def kill(self, name: str, started_too: bool = True) -> None:
        """SIGKILL: the process dies without a word, as a crashed machine would, and so do
        the processes it started (a node's workers), unless not `started_too`."""
        proc = self.procs.pop(name)
        for pid in [proc.pid, *(children(proc.pid) if started_too else ())]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        proc.wait(10)
        self._close(name)

    def stop(self, name: str) -> None:
        """SIGTERM, and SIGKILL to what is still there STOP_TIMEOUT_S later."""
        proc = self.procs.pop(name)
        started = children(proc.pid)
        self._terminate(proc)
        try:
            proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            for pid in [*started, *children(proc.pid)]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            proc.kill()
            proc.wait(5)
        self._close(name)

    def stop_all(self, names: list[str] | None = None) -> None:
        """Stop every server (or those `names`), all at once."""
        names = list(self.procs) if names is None else names
        for name in names:
            self._terminate(self.procs[name])
        for name in names:
            self.stop(name)

    @staticmethod
    def _terminate(proc: subprocess.Popen[bytes]) -> None:
        """SIGTERM to a server and to the processes it started (a node's workers), as a
        supervisor stops a whole service: every worker drains its requests at once, not
        each after its keeper's."""
        if proc.poll() is not None:
            return
        for pid in children(proc.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        proc.terminate()

    def tail(self, name: str, lines: int = 40) -> str:
        path = self.log_path(name)
        if path is None or not path.exists():
            return ""
        text = path.read_text(errors="replace").splitlines()[-lines:]
        return f"--- {path.name}\n" + "\n".join(text)

    def _close(self, name: str) -> None:
        log = self._files.pop(name, None)
        if log is not None:
            log.close()


def children(pid: int) -> list[int]:
    """The processes `pid` started that are still there (Linux: each of its threads'
    /proc children list)."""
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            found += [int(child) for child in (task / "children").read_text().split()]
    return found


def wait_healthy(
    url: str, proc: subprocess.Popen[bytes] | None = None, timeout_s: float = 60
) -> None:
    """Wait until GET {url}/health answers 200; fail early if the process exits."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the process serving {url} exited with {proc.returncode}")
        try:
            if probes().get(f"{url}/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} did not come up in {timeout_s} s")


def wait_serving(project: Project, node_ids: list[str], timeout_s: float = 60) -> None:
    """Wait until every node serves every partition it hosts and every global one, then one
    membership poll, so that each has seen its peers' positions."""
    deadline = time.monotonic() + timeout_s
    pending = set(node_ids)
    while pending and time.monotonic() < deadline:
        for node_id in sorted(pending):
            url = project.cluster.node(node_id).url
            held = chains.held(project, project.cluster.hosted_by(node_id))
            if serving(project, url) >= set(held):
                pending.discard(node_id)
        time.sleep(0.2)
    if pending:
        raise RuntimeError(f"nodes {sorted(pending)} do not serve all their partitions")
    time.sleep(1.5 * project.settings.health_interval_s)


def serving(project: Project, url: str) -> set[int]:
    """The partitions the node at `url` serves now (its /internal/status)."""
    headers = secret_headers(project.cluster.secret)
    status = probes().get(f"{url}/internal/status", headers=headers, timeout=5).json()
    return {int(p) for p in status["partitions"]}
