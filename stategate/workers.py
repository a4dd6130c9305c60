"""A node's worker processes (README: Workers): the process `stategate node` starts is the
keeper; it starts its followers, the same command with `--follow` and its pid, each with its
lifeline to the keeper (gateway/workers/lifeline.py). Each worker binds the node's port with
SO_REUSEPORT, and the kernel spreads new connections over the workers listening. A worker
listens only once it serves (uvicorn binds, then listens after its start-up), so no
connection waits on one still loading. A follower that dies is started again; one that
stops, because it was asked to or because its keeper stopped or is gone, is not. A stopping
keeper starts none again, and waits for them all (gateway/workers/keeper.py).

The first followers are forked from the keeper once it imported the node's modules, before
it runs a thread of its own (`FollowerProcesses.prefork`): they share those pages with it
(copy-on-write, the objects frozen out of the collector so it writes none of them), ~50
MiB a follower, and skip the imports' CPU. A follower started again later, while the
keeper runs threads, is its command started afresh: a fork then would copy locks other
threads hold.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import NoReturn, Protocol

from contracts.settings import Settings

log = logging.getLogger(__name__)
STOPPED = (0, -signal.SIGTERM, -signal.SIGINT)  # how a follower asked to stop ends
RESTART_DELAY_S = 0.5
RESTART_AFTER_S = 30.0  # a follower ending sooner after its start waits longer each time
MAX_RESTART_DELAY_S = 30.0
_GO, _END = b".", b"x"  # what a keeper tells its forked followers waiting to start


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


class FollowerProcess(Protocol):
    """A follower's process: subprocess.Popen's, or a Forked one."""

    pid: int

    def wait(self) -> int: ...
    def send_signal(self, signum: int) -> None: ...
    def kill(self) -> None: ...


class Forked:
    """A follower forked from its keeper (`FollowerProcesses.prefork`), said as Popen says
    a process: signalled through a pidfd, which reaches this process or none, never a pid
    reused once it is reaped."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._pidfd = os.pidfd_open(pid)

    def wait(self) -> int:
        _, status = os.waitpid(self.pid, 0)
        return os.waitstatus_to_exitcode(status)

    def send_signal(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):  # ended already
            signal.pidfd_send_signal(self._pidfd, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def close(self) -> None:
        os.close(self._pidfd)


class FollowerProcesses:
    """A keeper's followers: its own command, following it, each run by a thread of its own
    (`_keep`) until `stop`. Each holds the read end of the keeper's lifeline
    (gateway/workers/lifeline.py), whose write end this process alone holds: os.pipe's ends
    are not inherited by what it starts, and each follower is passed its read end only (a
    forked one closes the keeper's ends first)."""

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
        self._forked: list[Forked] = []  # forked, not let go yet
        self._go: int | None = None  # the write end of the pipe they wait on
        self._running: dict[int, FollowerProcess] = {}
        self._stopping = False
        self._lock = threading.Lock()

    def prefork(self, run: Callable[[list[str]], int]) -> None:
        """Fork the followers now, while this process runs no thread of its own; each
        waits until `start`, then runs `run` on its command's arguments, as the command
        would. Nothing returns here in a follower."""
        wait, self._go = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        gc.freeze()
        for _ in range(self.count):
            pid = os.fork()
            if pid == 0:
                self._forked_run(wait, [self._keeper_end, self._go], run)
            self._forked.append(Forked(pid))
        os.close(wait)

    def _forked_run(
        self, wait: int, keepers: list[int], run: Callable[[list[str]], int]
    ) -> NoReturn:
        """A forked follower: its keeper's ends closed, it waits to be let go and runs as a
        follower, or is told to end (its keeper refused to start) and ends quietly; if its
        keeper ends first, it runs as a follower that reads its lifeline's end at once and
        says why it stops. It ends as a follower started by its command does: by its
        signal, or with `run`'s code."""
        code = 1
        try:
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            for fd in keepers:
                os.close(fd)
            for forked in self._forked:  # the followers forked before this one
                forked.close()
            told = os.read(wait, 1)
            os.close(wait)
            code = 0 if told == _END else run(self._command[3:])
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException:  # noqa: BLE001 - as the interpreter ends a command: its traceback
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)

    def start(self) -> None:
        self._let_go(_GO)
        for _ in range(self.count):
            threading.Thread(target=self._keep, name="follower", daemon=True).start()

    def _let_go(self, told: bytes) -> None:
        """One byte to each forked follower waiting: _GO to run, _END to end quietly (the
        keeper refused to start)."""
        with self._lock:
            if self._go is not None:
                os.write(self._go, told * len(self._forked))
                os.close(self._go)
                self._go = None

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
        self._let_go(_END)

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
                process = self._next()
                self._running[process.pid] = process
            code = process.wait()
            with self._lock:
                del self._running[process.pid]
                if isinstance(process, Forked):
                    process.close()
            if code in STOPPED or self._stopping:
                log.info("worker %s stopped", process.pid)
                return
            quick = time.monotonic() - started < RESTART_AFTER_S
            delay = min(delay * 2, MAX_RESTART_DELAY_S) if quick else RESTART_DELAY_S
            log.warning("worker %s ended (%s): started again in %g s", process.pid, code, delay)
            time.sleep(delay)

    def _next(self) -> FollowerProcess:
        """A forked follower let go, while one waits; else the command, started."""
        if self._forked:
            return self._forked.pop()
        return subprocess.Popen(self._command, pass_fds=(self._lifeline,))
