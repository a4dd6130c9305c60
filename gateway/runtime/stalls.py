"""Stalls: stretches in which this process's event loop did not run.

A process that was stopped (SIGSTOP, a frozen VM), swapped out, paused by a long garbage
collection or blocked in a callback runs none of its callbacks meanwhile. When it resumes,
every timer that expired in the stall fires at once, with the replies that arrived in the
stall still unread: a call's timeout then says nothing of the peer it called
(gateway/cluster/health.py asks `since` before it holds one against a peer).

A task wakes every TICK_S; a wake-up late by STALL_S or more ends a stall that began at
the previous wake-up. A stall the task has not yet seen, because the loop has just resumed
and runs other callbacks first, counts as well: from the last wake-up until now.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable

log = logging.getLogger(__name__)
TICK_S = 0.25
STALL_S = 0.25  # far beyond a loop's usual lateness (ms), well within any call's timeout
REMEMBERED = 64  # stalls kept: far more than a call's window can overlap
WARN_S = 1.0  # a stall this long is logged at WARNING; a shorter one, at DEBUG (a busy host's)


class Stalls:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.woke: float | None = None  # the task's last wake-up; None: not watching
        self.stalls: deque[tuple[float, float]] = deque(maxlen=REMEMBERED)

    async def watch_forever(self) -> None:
        self.woke = self.clock()
        while True:
            await asyncio.sleep(TICK_S)
            self.tick()

    def tick(self) -> None:
        """The task woke: record a stall if it woke that late."""
        now = self.clock()
        began = self._stalled_from(now)
        if began is not None:
            level = logging.WARNING if now - began >= WARN_S else logging.DEBUG
            log.log(level, "this node did not run for %.2f s", now - began)
            self.stalls.append((began, now))
        self.woke = now

    def since(self, start: float) -> float:
        """Seconds this process was stalled since `start` (on its clock); 0.0 when it ran
        throughout."""
        now = self.clock()
        ongoing = self._stalled_from(now)
        stalls = [*self.stalls, *([] if ongoing is None else [(ongoing, now)])]
        return sum(max(0.0, end - max(begin, start)) for begin, end in stalls)

    def _stalled_from(self, now: float) -> float | None:
        """When the stall going on at `now` began, if the loop is in one."""
        if self.woke is None or now - self.woke < TICK_S + STALL_S:
            return None
        return self.woke
