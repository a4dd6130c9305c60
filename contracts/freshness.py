"""How fresh the served state is (README: Freshness).

The log stamps each record with the time it appended it (contracts/eventlog.py, Kafka's
LogAppendTime; on a Kafka topic that keeps CreateTime, its producer's time: topics/kafka.py).
A layer carries its new records counted by append time (`AppendTimes`), the times of the
stages it passed in the pipeline, and the append time of the newest record in the state up
to it. From these, the pipeline and every node count records by their delay
from append to each STAGE in one Prometheus histogram, `stategate_freshness_seconds`.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterator, Mapping
from typing import Final

import pyarrow as pa
import pyarrow.compute as pc
from prometheus_client.core import HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

# read: a pipeline task read the record from the log; written: its layer file was written;
# published: the manifest named the layer; installed: this node serves it.
STAGES: Final = ("read", "written", "published", "installed")
MAX_APPEND_TIMES = 64  # (append_ms, records) pairs a layer keeps; more are coarsened
DELAY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0, 60.0, 300.0)

AppendTimes = tuple[tuple[int, int], ...]  # (append_ms, records), oldest first


def counted(times: pa.Array | pa.ChunkedArray) -> AppendTimes:
    """Records counted by append time; those without one (another producer's) are left
    out. At most MAX_APPEND_TIMES pairs."""
    known = pc.drop_null(times)
    if len(known) == 0:
        return ()
    counts = pc.value_counts(known)
    pairs = zip(counts.field("values").to_pylist(), counts.field("counts").to_pylist(), strict=True)
    return coarsened(tuple(sorted((int(ms), int(n)) for ms, n in pairs)))


def coarsened(pairs: AppendTimes, limit: int = MAX_APPEND_TIMES) -> AppendTimes:
    """At most `limit` pairs: append times rounded down to ever coarser steps of 2^k ms until
    they fit (a delay is then off by less than the step)."""
    step = 1
    while len(pairs) > limit:
        step *= 2
        merged: dict[int, int] = {}
        for ms, n in pairs:
            merged[ms - ms % step] = merged.get(ms - ms % step, 0) + n
        pairs = tuple(sorted(merged.items()))
    return pairs


def newest(pairs: AppendTimes, below: int | None) -> int | None:
    """The newest append time of a layer's records, or of the state below it."""
    return pairs[-1][0] if pairs else below


class Delays(Collector):
    """`stategate_freshness_seconds{stage}`: records by their delay from append to a stage.
    A layer's records are counted at once, weighted, which prometheus-client's Histogram
    cannot do (one observation per call)."""

    NAME = "stategate_freshness_seconds"

    def __init__(self, stages: tuple[str, ...] = STAGES) -> None:
        self._buckets = {stage: [0] * (len(DELAY_BUCKETS) + 1) for stage in stages}
        self._sums = dict.fromkeys(stages, 0.0)
        self._lock = threading.Lock()

    def observe(self, stage: str, appended: AppendTimes, at_ms: int | None) -> None:
        """Count `appended` records as reaching `stage` at `at_ms` (nothing when unknown)."""
        if at_ms is None or not appended:
            return
        with self._lock:
            buckets = self._buckets[stage]
            for ms, n in appended:
                delay = max(0, at_ms - ms) / 1000
                buckets[bisect.bisect_left(DELAY_BUCKETS, delay)] += n
                self._sums[stage] += delay * n

    def observe_all(self, appended: AppendTimes, at: Mapping[str, int | None]) -> None:
        for stage, at_ms in at.items():
            self.observe(stage, appended, at_ms)

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(
            self.NAME,
            "records by their delay from append to the log to a stage: read by the pipeline, "
            "written into a layer, published in the manifest, installed on this node",
            labels=["stage"],
        )
        with self._lock:
            for stage, counts in self._buckets.items():
                total, cumulative = 0, []
                for bound, n in zip((*DELAY_BUCKETS, float("inf")), counts, strict=True):
                    total += n
                    cumulative.append(("+Inf" if bound == float("inf") else str(bound), total))
                family.add_metric([stage], cumulative, sum_value=self._sums[stage])
        yield family
