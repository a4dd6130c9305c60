"""The topology a node holds now (contracts/topology.py), and who is told when it changes:
a node's routing, delivery and live queries read `current` at each use, so a new assignment
takes effect for the next sub-query without a restart."""

from __future__ import annotations

import logging
from collections.abc import Callable

from contracts.topology import Topology

log = logging.getLogger(__name__)
Listener = Callable[[Topology, Topology], None]  # (before, after)


class TopologyView:
    def __init__(self, current: Topology) -> None:
        self.current = current
        self._listeners: list[Listener] = []

    def listen(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def update(self, topology: Topology) -> None:
        """Hold `topology` from now on, unless it is older than the one held."""
        before = self.current
        if topology.version < before.version:
            return
        self.current = topology
        for listener in self._listeners:
            try:
                listener(before, topology)
            except Exception:
                log.exception("a topology listener failed")
