"""Running a cluster's nodes as local processes: what the demo, the tests and the benchmark
share (on real machines each node is started with `stategate node` by its own supervisor)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from typing import IO

import httpx

from gateway.config import Project


def free_ports(count: int) -> list[int]:
    """`count` distinct loopback ports free right now."""
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def start_node(
    project: Project, node_id: str, output: IO[bytes] | None = None
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gateway.cli",
            "node",
            "--config",
            str(project.path),
            "--node",
            node_id,
        ],
        stdout=output,
        stderr=subprocess.STDOUT if output is not None else None,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def wait_healthy(
    url: str, proc: subprocess.Popen[bytes] | None = None, timeout_s: float = 60
) -> None:
    """Wait until GET {url}/health answers 200; fail early if the process exits."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the process serving {url} exited with {proc.returncode}")
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} did not come up in {timeout_s} s")
