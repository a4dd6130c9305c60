"""Stopping on SIGTERM or SIGINT, the same way in every long-running stategate process.

A process asked to stop finishes or abandons its current step cleanly, stops its children,
and then ends by the signal it got, as uvicorn does for the nodes and the snapshot store
server: a shell sees status 143 after SIGTERM (130 after Ctrl-C), a supervisor sees that the
process was stopped by the signal (systemd counts that as a clean exit). A process that
finishes its work on its own exits 0. Further signals while it stops are ignored: the stop
is bounded, and SIGKILL is there to force it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import NoReturn

SIGNALS = (signal.SIGTERM, signal.SIGINT)
log = logging.getLogger(__name__)


class Stopped(BaseException):
    """Raised in the main thread by the first stop signal, when asked to (raising=True):
    unwinds whatever it waits in, through the `finally` blocks that stop the children."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class StopRequest:
    """The first SIGTERM or SIGINT: an event, the signal, and what to do at once."""

    def __init__(self, raising: bool = False) -> None:
        self.event = threading.Event()
        self.signum: int | None = None
        self.raising = raising
        self._callbacks: list[Callable[[], None]] = []

    def install(self) -> StopRequest:
        """Handle both signals from now on (again after a library took one for itself, as
        PySpark's context does SIGINT)."""
        for signum in SIGNALS:
            signal.signal(signum, self._handle)
        return self

    def on_stop(self, callback: Callable[[], None]) -> None:
        """Call `callback` (from the handler: it must be quick) when the stop comes, or at
        once if it came already."""
        self._callbacks.append(callback)
        if self.requested:
            callback()

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def exit(self) -> NoReturn:
        """End the process by the signal that asked it to stop."""
        assert self.signum is not None
        die_by(self.signum)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is not None:
            return  # stopping already
        self.signum = signum
        log.info("%s: stopping", signal.Signals(signum).name)
        self.event.set()
        for callback in self._callbacks:
            callback()
        if self.raising:
            raise Stopped(signum)


def die_by(signum: int) -> NoReturn:
    """End this process by `signum`, its default action, once everything is flushed."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    logging.shutdown()
    signal.signal(signum, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signum})
    signal.raise_signal(signum)
    os._exit(128 + signum)  # not reached: the signal's default action ends the process
