"""A follower's lifeline: the read end of a pipe whose write end its keeper alone holds
(stategate/workers.py). The keeper closes that end when it stops, and the kernel closes it
when the keeper's process ends, however it ends (SIGKILL, a crash), so the follower reads
the pipe's end then, or at once when its keeper ended before it looked: from its start to
its own stop, a follower never outlives its keeper.

Its parent's pid cannot say as much (once the keeper is gone it is init's, or a reused
one), nor can PR_SET_PDEATHSIG (sent when the keeper's thread that started the follower
ends, and lost when the keeper ended before the follower set it).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading

log = logging.getLogger(__name__)


class Lifeline:
    def __init__(self, fd: int, keeper_pid: int) -> None:
        self.fd = fd
        self.keeper_pid = keeper_pid
        self.cut = threading.Event()  # the keeper stopped or is gone: this worker stops
        self._lock = threading.Lock()

    def watch(self) -> None:
        """From now on, the pipe's end stops this worker (`end`)."""
        threading.Thread(target=self._watch, name="lifeline", daemon=True).start()

    def end(self) -> None:
        """Stop this worker as SIGTERM does (before its server runs: at once), saying why
        in one line, however often its keeper's end is heard (the pipe, the channel)."""
        with self._lock:
            if self.cut.is_set():
                return
            self.cut.set()
        gone = os.getppid() != self.keeper_pid  # a stopping keeper waits for its followers
        how, level = ("is gone", logging.WARNING) if gone else ("stops", logging.INFO)
        log.log(level, "the node's keeper (pid %d) %s: this worker stops", self.keeper_pid, how)
        os.kill(os.getpid(), signal.SIGTERM)

    def _watch(self) -> None:
        with contextlib.suppress(OSError):
            while os.read(self.fd, 1):  # the keeper writes nothing: this returns at its end
                pass
        self.end()
