"""A node's worker processes (README: Workers): the process `stategate node` starts is the
keeper; it starts its followers, the same command with `--follow` and its pid. Each worker
binds the node's port with SO_REUSEPORT, and the kernel spreads new connections over the
workers listening. A worker listens only once it serves (uvicorn binds, then listens after
its start-up), so no connection waits on one still loading. A follower that dies is started
again; one that stops, because it was asked to or because its keeper is gone, is not.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time

from contracts.settings import Settings

log = logging.getLogger(__name__)
STOPPED = (0, -signal.SIGTERM, -signal.SIGINT)  # how a follower asked to stop ends
RESTART_DELAY_S = 0.5
RESTART_AFTER_S = 30.0  # a follower ending sooner after its start waits longer each time
MAX_RESTART_DELAY_S = 30.0


def count(settings: Settings) -> int:
    """The node's workers: the setting, or one per core this process may run on."""
    return settings.workers or len(os.sched_getaffinity(0))


def bound(address: str, shared: bool, first: bool) -> socket.socket:
    """The node's socket, bound and not listening yet; shared: with SO_REUSEPORT. The first
    worker checks that no other process holds the port: one shared with a stray process
    would hand it connections. OSError when the port is taken."""
    host, port = address.rsplit(":", 1)
    found = socket.getaddrinfo(host.strip("[]"), int(port), type=socket.SOCK_STREAM)
    family, kind, proto, _, where = found[0]
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


def start_followers(args: argparse.Namespace, followers: int) -> None:
    """Start the keeper's followers: the keeper's own command, following it. Each is kept
    by a thread of its own (`_keep`)."""
    command = [sys.executable, "-m", "stategate.cli", "node", "--config", args.config]
    command += ["--node", args.node, "--follow", str(os.getpid())]
    if args.address is not None:
        command += ["--address", args.address]
    if args.data_dir is not None:
        command += ["--data-dir", args.data_dir]
    for _ in range(followers):
        threading.Thread(target=_keep, args=(command,), daemon=True).start()


def _keep(command: list[str]) -> None:
    """Run a follower, and start it again when it ends otherwise than asked (a stop, or its
    keeper's channel closing, end it by SIGTERM or SIGINT: those stay ended). One that ends
    within RESTART_AFTER_S of its start waits twice as long as the last before the next,
    up to MAX_RESTART_DELAY_S: a follower that cannot start does not spin."""
    delay = RESTART_DELAY_S
    while True:
        started = time.monotonic()
        process = subprocess.Popen(command)
        code = process.wait()
        if code in STOPPED:
            log.info("worker %s stopped", process.pid)
            return
        quick = time.monotonic() - started < RESTART_AFTER_S
        delay = min(delay * 2, MAX_RESTART_DELAY_S) if quick else RESTART_DELAY_S
        log.warning("worker %s ended (%s): started again in %g s", process.pid, code, delay)
        time.sleep(delay)
