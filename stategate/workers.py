"""A node's worker processes (README: Workers): the process `stategate node` starts is the
keeper; it starts its followers, the same command with `--follow` and its pid, each with its
lifeline to the keeper (gateway/workers/lifeline.py). Each worker binds the node's port with
SO_REUSEPORT, and the kernel spreads new connections over the workers listening. A worker
listens only once it serves (uvicorn binds, then listens after its start-up), so no
connection waits on one still loading. A follower that dies is started again; one that
stops, because it was asked to or because its keeper stopped or is gone, is not. A stopping
keeper starts none again, and waits for them all (gateway/workers/keeper.py).
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


class FollowerProcesses:
    """A keeper's followers: its own command, following it, each run by a thread of its own
    (`_keep`) until `stop`. Each holds the read end of the keeper's lifeline
    (gateway/workers/lifeline.py), whose write end this process alone holds: os.pipe's ends
    are not inherited by what it starts, and each follower is passed its read end only."""

    def __init__(self, args: argparse.Namespace, count: int) -> None:
        self.count = count
        self._lifeline, self._keeper_end = os.pipe()
        command = [sys.executable, "-m", "stategate.cli", "node", "--config", args.config]
        command += ["--node", args.node, "--follow", str(os.getpid())]
        command += ["--lifeline", str(self._lifeline)]
        if args.address is not None:
            command += ["--address", args.address]
        if args.data_dir is not None:
            command += ["--data-dir", args.data_dir]
        self._command = command
        self._running: dict[int, subprocess.Popen[bytes]] = {}
        self._stopping = False
        self._lock = threading.Lock()

    def start(self) -> None:
        for _ in range(self.count):
            threading.Thread(target=self._keep, name="follower", daemon=True).start()

    def running(self) -> list[int]:
        with self._lock:
            return list(self._running)

    def stop(self) -> None:
        """Start none again, and close the keeper's end of the lifeline: each follower,
        serving or still starting, hears it and stops."""
        with self._lock:
            if not self._stopping:
                self._stopping = True
                os.close(self._keeper_end)

    def signal(self, signum: int) -> None:
        """Pass a signal on to every follower running (SIGHUP: read the certificate again)."""
        with self._lock:
            for process in self._running.values():
                process.send_signal(signum)

    def kill(self, pid: int) -> None:
        with self._lock:
            process = self._running.get(pid)
            if process is not None:
                process.kill()  # not once reaped: never a pid reused meanwhile

    def _keep(self) -> None:
        """Run a follower, and start it again when it ends otherwise than asked (a stop, or
        its keeper's end, end it by SIGTERM or SIGINT: those stay ended). One that ends
        within RESTART_AFTER_S of its start waits twice as long as the last before the
        next, up to MAX_RESTART_DELAY_S: a follower that cannot start does not spin."""
        delay = RESTART_DELAY_S
        while True:
            started = time.monotonic()
            with self._lock:
                if self._stopping:
                    return
                process = subprocess.Popen(self._command, pass_fds=(self._lifeline,))
                self._running[process.pid] = process
            code = process.wait()
            with self._lock:
                del self._running[process.pid]
            if code in STOPPED or self._stopping:
                log.info("worker %s stopped", process.pid)
                return
            quick = time.monotonic() - started < RESTART_AFTER_S
            delay = min(delay * 2, MAX_RESTART_DELAY_S) if quick else RESTART_DELAY_S
            log.warning("worker %s ended (%s): started again in %g s", process.pid, code, delay)
            time.sleep(delay)
