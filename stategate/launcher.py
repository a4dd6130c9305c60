"""Local processes of a cluster: its nodes, or any other server that answers GET /health.
What the demo, the tests and the benchmark share (on real machines each node is started with
`stategate node` by its own supervisor).

A start waits as long as the server makes progress: it fails once the server (with the
processes it started, a node's workers) neither wrote to its log nor used a sixtieth of a
core for `quiet_s` (QUIET_S: 1 CPU-second of 60 s; a node loading on a machine 30 times
overloaded still does), or after `ceiling_s` whatever it did. A start that fails stops what
it started, and so does a start of several nodes one of which fails. Whatever a caller left
running is stopped when its process exits.
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
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import httpx

from contracts import chains
from contracts.cluster_secret import secret_headers
from contracts.project import Project
from contracts.tls import Tls, verify

STOP_TIMEOUT_S = 15.0
QUIET_S = 60.0  # a start that showed no progress this long has hung
CEILING_S = 900.0  # the longest a start may take, however it progresses
BUSY_SHARE = 1 / 60  # of a core over quiet_s: a server that used as much CPU is working
POLL_S = 0.1
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")  # /proc's unit of CPU time


@functools.cache
def probes(tls: Tls | None = None) -> httpx.Client:
    """One client for the process's probes of its servers, shared by its threads: a client per
    probe made a TLS context each time, ~50 ms of CPU ten times a second while a node starts."""
    return httpx.Client(verify=verify(tls))


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

    def start(
        self,
        name: str,
        command: list[str],
        url: str,
        quiet_s: float = QUIET_S,
        ceiling_s: float = CEILING_S,
        tls: Tls | None = None,
        cwd: Path | None = None,
    ) -> None:
        """Start a server and wait until GET {url}/health answers 200 (checked by `tls`'s CA
        when given), as long as it makes progress; stop it if it does not come up. `cwd`:
        where it runs, whose packages `python -m` imports first (another release's tree)."""
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
            cwd=cwd,
        )
        try:
            wait_healthy(url, self.procs[name], quiet_s, ceiling_s, path, tls)
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
                self.start(node_id, node_command(project, node_id), url, tls=project.tls)
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


class Patience:
    """A deadline that progress moves: it passes once nothing progressed for `quiet_s`, or
    `ceiling_s` after it began, whatever progressed."""

    def __init__(
        self, quiet_s: float, ceiling_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.quiet_s = quiet_s
        self.ceiling_s = ceiling_s
        self.clock = clock
        self.began = self.moved = clock()

    def progressed(self) -> None:
        self.moved = self.clock()

    def passed(self) -> str | None:
        """Why the wait is over (how the deadline passed), or None while it is not."""
        now = self.clock()
        if now - self.began >= self.ceiling_s:
            return f"in {self.ceiling_s:g} s"
        if now - self.moved >= self.quiet_s:
            return f"and showed no progress for {self.quiet_s:g} s"
        return None


class StartProgress:
    """What a starting server shows of its progress: its log growing, or the CPU time it
    and the processes it started use."""

    def __init__(self, pid: int, log: Path | None, busy_s: float) -> None:
        self.pid = pid
        self.log = log
        self.busy_s = busy_s  # the CPU time that counts as progress
        self._size, self._cpu = self._now()

    def made(self) -> bool:
        """Whether the server progressed since it last did."""
        size, cpu = self._now()
        if size == self._size and cpu < self._cpu + self.busy_s:
            return False
        self._size, self._cpu = size, cpu
        return True

    def _now(self) -> tuple[int, float]:
        size = 0
        if self.log is not None:
            with contextlib.suppress(OSError):
                size = self.log.stat().st_size
        return size, sum(map(cpu_s, [self.pid, *children(self.pid)]))


def cpu_s(pid: int) -> float:
    """The CPU time a process used so far (0 once it is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat.rsplit(")", 1)[1].split()  # after its name, which may hold anything
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime


def wait_healthy(
    url: str,
    proc: subprocess.Popen[bytes] | None = None,
    quiet_s: float = QUIET_S,
    ceiling_s: float = CEILING_S,
    log: Path | None = None,
    tls: Tls | None = None,
) -> None:
    """Wait until GET {url}/health answers 200, as long as the process makes progress
    (`log` growing, or its work); fail early if it exits."""
    patience = Patience(quiet_s, ceiling_s)
    progress = None if proc is None else StartProgress(proc.pid, log, quiet_s * BUSY_SHARE)
    while (why := patience.passed()) is None:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the process serving {url} exited with {proc.returncode}")
        try:
            if probes(tls).get(f"{url}/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if progress is not None and progress.made():
            patience.progressed()
        time.sleep(POLL_S)
    raise RuntimeError(f"{url} did not come up {why}")


def wait_serving(
    project: Project, node_ids: list[str], quiet_s: float = QUIET_S, ceiling_s: float = CEILING_S
) -> None:
    """Wait until every node serves every partition it hosts and every global one, as long
    as one more partition is served every `quiet_s`; then one membership poll, so that each
    has seen its peers' positions."""
    patience = Patience(quiet_s, ceiling_s)
    pending = {node_id: set(chains.held(project, project.cluster.hosted_by(node_id)))
               for node_id in node_ids}  # fmt: skip
    while pending and patience.passed() is None:
        for node_id, held in sorted(pending.items()):
            missing = held - serving(project, project.cluster.node(node_id).url)
            if len(missing) < len(held):
                patience.progressed()
            pending[node_id] = missing
            if not missing:
                del pending[node_id]
        time.sleep(0.2)
    if pending:
        raise RuntimeError(f"nodes {sorted(pending)} do not serve all their partitions")
    time.sleep(1.5 * project.settings.health_interval_s)


def wait_ready(
    project: Project,
    node_ids: list[str],
    told: Callable[[str, dict[str, Any]], None] = lambda node_id, ready: None,
    quiet_s: float = QUIET_S,
    ceiling_s: float = CEILING_S,
) -> None:
    """Wait until every node answers /ready with every worker process serving, as long as
    one more node or worker is every `quiet_s`; `told` hears each node's /ready answer
    once it is whole."""
    patience = Patience(quiet_s, ceiling_s)
    shown: dict[str, tuple[int, int] | None] = dict.fromkeys(node_ids)
    while (why := patience.passed()) is None:
        for node_id in [n for n in node_ids if n in shown]:
            ready = _ready(project.cluster.node(node_id).url, project.tls)
            seen = None if ready is None else _serving(ready)
            if seen != shown[node_id]:
                patience.progressed()
                shown[node_id] = seen
            if ready is not None and seen is not None and seen[0] == seen[1]:
                told(node_id, ready)
                del shown[node_id]
        if not shown:
            return
        time.sleep(POLL_S)
    raise RuntimeError(f"nodes {sorted(shown)} are not ready {why}")


def _ready(url: str, tls: Tls | None) -> dict[str, Any] | None:
    """The node's /ready answer, or None while it is not ready."""
    try:
        answer = probes(tls).get(f"{url}/ready", timeout=5)
    except httpx.HTTPError:
        return None
    return answer.json() if answer.status_code == 200 else None


def _serving(ready: dict[str, Any]) -> tuple[int, int]:
    workers = ready["workers"]
    return int(workers["serving"]), int(workers["of"])


def serving(project: Project, url: str) -> set[int]:
    """The partitions the node at `url` serves now (its /internal/status)."""
    headers = secret_headers(project.cluster.secret)
    status = probes(project.tls).get(f"{url}/internal/status", headers=headers, timeout=5)
    status = status.json()
    return {int(p) for p in status["partitions"]}
