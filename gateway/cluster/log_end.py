"""Where a node reads the log end that `maxLag` counts offsets behind, as the `log_end`
setting says; never by whether a folder happens to exist.

- `published` (the default, for a node anywhere): the end of what the pipeline has published
  for the partition: the log end its newest manifest records, raised to any replica's
  position this node knows past it (its own, its peers' from their status). So `maxLag: 0`
  asks for a replica as fresh as the freshest published one, as ksqlDB counts lag against
  the active's position.
- `log`: the log's own end, read from `[log] dir` at most once per `health_interval_s`, for
  nodes on the log's machine: records not yet processed count as lag too.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from pathlib import Path

from contracts import eventlog

LogEnd = Callable[[str, int], "int | None"]  # (topic, partition) -> end offset, if known
Positions = Callable[[int], Iterable[dict[str, int]]]  # partition -> the replicas' offsets


class PublishedEnd:
    def __init__(self, manifest_end: LogEnd, positions: Positions) -> None:
        self.manifest_end = manifest_end
        self.positions = positions

    def __call__(self, topic: str, partition: int) -> int | None:
        ends = [self.manifest_end(topic, partition)]
        ends += [offsets.get(topic) for offsets in self.positions(partition)]
        known = [end for end in ends if end is not None]
        return max(known) if known else None


class LogFileEnd:
    def __init__(self, log_dir: Path, max_age_s: float) -> None:
        self.log_dir = log_dir
        self.max_age_s = max_age_s
        self._read: dict[tuple[str, int], tuple[float, int]] = {}

    def __call__(self, topic: str, partition: int) -> int | None:
        now = time.monotonic()
        cached = self._read.get((topic, partition))
        if cached is None or now - cached[0] > self.max_age_s:
            cached = (now, eventlog.end_offset(self.log_dir, topic, partition))
            self._read[(topic, partition)] = cached
        return cached[1]
