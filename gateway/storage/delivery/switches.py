"""Version switches a node knows of, as they happen.

Its own installs bump `changes`, a counter its status carries: a peer that asks for its
status with the `changes` it saw last (gateway/cluster/health.py) waits until the counter moves,
so peers hear of a switch as soon as it is served. Its own switches and those its peers
report are handed to the listeners: the live subscriptions (resolvers/transport/live.py).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable

Listener = Callable[[frozenset[int]], None]


class Switches:
    def __init__(self) -> None:
        self.changes = 0
        self._moved = asyncio.Event()
        self._listeners: list[Listener] = []

    def listen(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def installed(self, partition: int) -> None:
        """This node now serves a new version of `partition`."""
        self._changed(partition)

    def dropped(self, partition: int) -> None:
        """This node no longer serves `partition` (it was handed over)."""
        self._changed(partition)

    def observed(self, partitions: Iterable[int]) -> None:
        """A peer reported new versions of `partitions`."""
        switched = frozenset(partitions)
        if switched:
            self._tell(switched)

    async def wait_past(self, changes: int, timeout: float) -> None:
        """Return once `changes` differs from the counter, or after `timeout` seconds."""
        if changes != self.changes:
            return
        moved = self._moved
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(moved.wait(), timeout)

    def close(self) -> None:
        """Answer every waiting peer now (the node is stopping)."""
        self._wake()

    def _changed(self, partition: int) -> None:
        self.changes += 1
        self._wake()
        self._tell(frozenset((partition,)))

    def _wake(self) -> None:
        moved, self._moved = self._moved, asyncio.Event()
        moved.set()

    def _tell(self, partitions: frozenset[int]) -> None:
        for listener in self._listeners:
            listener(partitions)
