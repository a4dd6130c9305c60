"""A node's worker processes (README: Workers): the process `stategate node` starts is the
keeper; it starts its followers, the same command with `--follow` and its pid. Each worker
binds the node's port with SO_REUSEPORT, and the kernel spreads new connections over the
workers listening. A worker listens only once it serves (uvicorn binds, then listens after
its start-up), so no connection waits on one still loading.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import subprocess
import sys
import threading

from contracts.settings import Settings

log = logging.getLogger(__name__)


def count(settings: Settings) -> int:
    """The node's workers: the setting, or one per core this process may run on."""
    return settings.workers or len(os.sched_getaffinity(0))


def bound(address: str, shared: bool, first: bool) -> socket.socket:
    """The node's socket, bound and not listening yet; shared: with SO_REUSEPORT. The first
    worker checks that no other process holds the port: one shared with a stray process
    would hand it connections. OSError when the port is taken."""
    host, port = address.rsplit(":", 1)
    family, kind, proto, _, where = socket.getaddrinfo(host.strip("[]"), int(port))[0]
    if shared and first:
        with _socket(family, kind, proto, reuse_port=False) as probe:
            probe.bind(where)
    sock = _socket(family, kind, proto, reuse_port=shared)
    try:
        sock.bind(where)
    except OSError:
        sock.close()
        raise
    return sock


def _socket(family: int, kind: int, proto: int, reuse_port: bool) -> socket.socket:
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    return sock


def start_followers(args: argparse.Namespace, followers: int) -> list[subprocess.Popen[bytes]]:
    """Start the keeper's followers: the keeper's own command, following it. Each is waited
    for by a thread of its own, which logs how it ended."""
    command = [sys.executable, "-m", "stategate.cli", "node", "--config", args.config]
    command += ["--node", args.node, "--follow", str(os.getpid())]
    if args.address is not None:
        command += ["--address", args.address]
    if args.data_dir is not None:
        command += ["--data-dir", args.data_dir]
    started = [subprocess.Popen(command) for _ in range(followers)]
    for process in started:
        threading.Thread(target=_reap, args=(process,), daemon=True).start()
    return started


def _reap(process: subprocess.Popen[bytes]) -> None:
    code = process.wait()
    log.info("worker %s ended (%s)", process.pid, code)
