"""What the pipeline tells its operator as it goes, at INFO: each step with its counts and
elapsed time, from numbers it has anyway (the plan's offset ranges, the tasks' results,
Spark's status tracker), never from an extra pass over the data.

A long Spark stage reports every PROGRESS_EVERY_S how many of its tasks (one per task slot)
are done; the continuous pipeline logs one line per micro-batch (spark_pipeline/loop.py).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from pyspark.sql import SparkSession

from contracts.clock import left
from spark_pipeline.dead_letter import FOLDER
from spark_pipeline.spark import every

PROGRESS_EVERY_S = 10.0
log = logging.getLogger("spark_pipeline")


@contextmanager
def stage_progress(
    spark: SparkSession, what: str, every_s: float = PROGRESS_EVERY_S
) -> Iterator[None]:
    """While the block runs, log every `every_s` how far the Spark stages running are:
    "building layers: 4 of 9 tasks done, 2 running (40 s, about 50 s left)"."""
    started = time.monotonic()
    tracker = spark.sparkContext.statusTracker()

    def report() -> bool:
        try:
            stages = [tracker.getStageInfo(s) for s in tracker.getActiveStageIds()]
        except Exception:  # noqa: BLE001 - the context is going away: nothing to say
            return False
        running = [s for s in stages if s is not None]
        if not running:  # Spark plans the read (its Python workers start)
            log.info("%s: preparing (%.0f s)", what, time.monotonic() - started)
            return True
        done, total = sum(s.numCompletedTasks for s in running), sum(s.numTasks for s in running)
        elapsed = time.monotonic() - started
        log.info(
            "%s: %d of %d tasks done, %d running (%.0f s%s)",
            what,
            done,
            total,
            sum(s.numActiveTasks for s in running),
            elapsed,
            left(done, total, elapsed),
        )
        return True

    with every(every_s, report, "progress"):
        yield


def positions(by_partition: Mapping[int, Mapping[str, int]]) -> str:
    """bookings-0:1234 bookings-3:998 trains-3:17: where each partition's topics are."""
    return " ".join(
        f"{topic}-{partition}:{offset}"
        for partition, by_topic in sorted(by_partition.items())
        for topic, offset in sorted(by_topic.items())
    )


def bad_records(counts: Mapping[str, Mapping[str, int]]) -> str:
    """bookings: not_an_integer 2, unknown_field 1; trains: wrong_type 1"""
    return "; ".join(
        f"{topic}: " + ", ".join(f"{reason} {n}" for reason, n in sorted(reasons.items()))
        for topic, reasons in sorted(counts.items())
    )


def log_bad_records(counts: Mapping[str, Mapping[str, int]], store_dir: Path) -> None:
    """One WARNING line for the bad records a publication left out, if any."""
    total = sum(n for reasons in counts.values() for n in reasons.values())
    if total:
        log.warning(
            "left out %d bad records (%s); each is in %s",
            total,
            bad_records(counts),
            store_dir / FOLDER / "<topic>-<partition>.jsonl",
        )


def size(n: int) -> str:
    """Bytes as a person reads them: 512 B, 3.4 MB."""
    value = float(n)
    for unit in ("B", "kB", "MB", "GB"):
        if value < 1000 or unit == "GB":
            return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    raise AssertionError("unreachable")
