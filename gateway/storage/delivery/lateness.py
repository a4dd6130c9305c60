"""A replica late to serve what the pipeline published says so, whatever the cause: a
partition served at a version older than one the manifest has named for more than
LATE_WARN_S, and a sync that has not finished a round for that long (then the manifest it
compares with is old too). Each is one WARNING when it starts, naming the partition, the
version and position served and those published, and one INFO line when it ends; the
seconds late are a gauge per partition (gateway/cluster/metrics.py).

The watch runs beside the sync, not in it: a sync stuck in a download or a thread still
lets it speak.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from contracts.clock import now_ms
from contracts.manifest import Manifest

log = logging.getLogger(__name__)
# A version published this long ago and still not served here is a stall: ~3x the p99 of
# append -> installed that the freshness targets allow (README: Freshness).
LATE_WARN_S = 10.0
WATCH_INTERVAL_S = 1.0


@dataclass(frozen=True)
class Late:
    """A partition served at a version older than the newest one published."""

    partition: int
    serving: int
    serving_position: dict[str, int]
    published: int
    published_position: dict[str, int]
    seconds: float  # since the first version this node has not served was published

    def describe(self) -> str:
        return (
            f"partition {self.partition} serves version {self.serving} "
            f"(position {self.serving_position}) {self.seconds:.0f} s after the pipeline "
            f"published version {self.published} (position {self.published_position})"
        )


def late(manifest: Manifest, serving: Mapping[int, int], at_ms: int) -> dict[int, Late]:
    """The partitions of `serving` (partition -> version served) older than the manifest's,
    by how long the first version they lack has been published (a layer without its
    publication time: since the manifest was written)."""
    found = {}
    for partition, version in serving.items():
        entry = manifest.partitions.get(partition)
        if entry is None or entry.version <= version:
            continue
        lacking = [layer for layer in entry.layers if layer.version > version]
        served = [layer for layer in entry.layers if layer.version == version]
        since = lacking[0].published_ms or manifest.updated_ms
        found[partition] = Late(
            partition,
            version,
            served[0].position if served else {},
            entry.version,
            entry.position,
            max(0.0, (at_ms - since) / 1000),
        )
    return found


class LatenessWatch:
    """Compares what the node serves with the manifest its sync read last, every
    WATCH_INTERVAL_S, and says when a partition or the sync itself falls behind."""

    def __init__(
        self,
        manifest: Callable[[], Manifest],
        serving: Callable[[], Mapping[int, int]],
        synced_at: Callable[[], float],
        warn_s: float = LATE_WARN_S,
    ) -> None:
        self.manifest = manifest
        self.serving = serving
        self.synced_at = synced_at  # time.monotonic() of the sync's last finished round
        self.warn_s = warn_s
        self.current: dict[int, Late] = {}
        self._stalled: set[int] = set()
        self._sync_stalled = False

    def check(self) -> None:
        self.current = late(self.manifest(), self.serving(), now_ms())
        stalled = {p for p, b in self.current.items() if b.seconds > self.warn_s}
        for partition in sorted(stalled - self._stalled):
            log.warning("%s: this replica is behind", self.current[partition].describe())
        for partition in sorted(self._stalled - stalled):
            log.info("partition %s caught up with what the pipeline published", partition)
        self._stalled = stalled
        idle = time.monotonic() - self.synced_at()
        if idle > self.warn_s and not self._sync_stalled:
            log.warning(
                "the snapshot sync has not finished a round for %.0f s: this node installs "
                "nothing new until it does", idle
            )  # fmt: skip
        elif idle <= self.warn_s and self._sync_stalled:
            log.info("the snapshot sync finished a round again")
        self._sync_stalled = idle > self.warn_s

    def seconds(self) -> dict[int, float]:
        """Each served partition's seconds behind the manifest (0: current)."""
        return {p: b.seconds for p, b in self.current.items()}

    async def watch_forever(self) -> None:
        while True:
            await asyncio.sleep(WATCH_INTERVAL_S)
            try:
                self.check()
            except Exception:  # a bug must not end the watch for good
                log.exception("checking how late this node is failed")
