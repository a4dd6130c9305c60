"""The continuous pipeline: one Spark Structured Streaming query over the event log
(spark_pipeline/log_source.py) whose every micro-batch is published as one new layer per
changed partition (spark_pipeline/batch.py), and a compactor beside it.

    stategate pipeline --config stategate.toml --follow

Exactly once, end to end: Spark replays a micro-batch it had not committed when the driver
died, and the sink keeps only the records at or past each partition's published position,
so a replay publishes what is missing and nothing twice. The checkpoint lives in the
snapshot store, per stores digest (new declarations start a new one after a rebuild).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from contracts.durable import locked
from contracts.manifest import read_manifest, write_manifest
from contracts.project import Project
from spark_pipeline import compaction
from spark_pipeline.batch import Published, publish
from spark_pipeline.job import run, snapshot_dir
from spark_pipeline.log_source import NAME, LogSource, options
from spark_pipeline.plan import stores_digest
from spark_pipeline.publish import notify_nodes, prune

log = logging.getLogger(__name__)
CRASH_AT = "STATEGATE_CRASH_AT"  # tests: die at this point of a micro-batch (see _crash_point)


@dataclass
class Progress:
    """What the continuous pipeline has done so far (logged after every micro-batch)."""

    batches: int = 0
    records: int = 0
    layers: int = 0
    compactions: int = 0
    last: dict[str, object] = field(default_factory=dict)


class Follower:
    def __init__(self, project: Project, spark: SparkSession, notify: bool = True) -> None:
        self.project = project
        self.spark = spark
        self.notify = notify
        self.store_dir = snapshot_dir(project)
        self.progress = Progress()
        self.stopping = threading.Event()
        self._query: StreamingQuery | None = None
        self._compactor: threading.Thread | None = None
        self._notifier = ThreadPoolExecutor(max_workers=1, thread_name_prefix="notify")

    def start(self) -> None:
        """Follow the log from the checkpoint; without one (a first start, or new store
        declarations), catch up with a one-shot run first, a rebuild when the stores changed."""
        if not self.checkpoint.exists():
            run(self.project, self.spark, notify=self.notify)
        manifest = read_manifest(self.store_dir)
        self.spark.dataSource.register(LogSource)
        settings = self.project.settings
        start = {
            topic: {p: manifest.published(p, topic) for p in range(self.project.cluster.partitions)}
            for topic in self.project.topics
        }
        source = options(self.project, start)
        records = self.spark.readStream.format(NAME).options(**source).load()
        self._query = (
            records.writeStream.foreachBatch(self._publish)
            .trigger(processingTime=f"{int(settings.trigger_interval_s * 1000)} milliseconds")
            .option("checkpointLocation", str(self.checkpoint))
            .queryName("stategate")
            .start()
        )
        self._compactor = threading.Thread(target=self._compact_forever, daemon=True)
        self._compactor.start()
        log.info("following %s every %s s", self.project.log_dir, settings.trigger_interval_s)

    @property
    def checkpoint(self) -> Path:
        return self.store_dir / ".checkpoints" / stores_digest(self.project)[:16]

    def wait(self) -> None:
        """Until stop() or the query fails (re-raised)."""
        assert self._query is not None
        while not self.stopping.is_set():
            if self._query.awaitTermination(1):
                break
        exception = self._query.exception()
        if exception is not None and not self.stopping.is_set():
            raise RuntimeError(f"the streaming query failed: {exception}")

    def stop(self) -> None:
        self.stopping.set()
        if self._query is not None:
            self._query.stop()
        if self._compactor is not None:
            self._compactor.join(60)
        self._notifier.shutdown(wait=True, cancel_futures=True)

    def _publish(self, batch: DataFrame, batch_id: int) -> None:
        started = time.monotonic()
        with locked(self.store_dir):
            manifest = read_manifest(self.store_dir)
            published = publish(
                self.project, self.spark, self.store_dir, manifest, batch, compact=False
            )
            if published.layers:
                _crash_point("layers-written")
                write_manifest(self.store_dir, published.manifest)
                _crash_point("manifest-written")
                prune(self.store_dir, published.manifest)
        self._report(batch_id, published, time.monotonic() - started)
        if published.layers:
            self._tell_nodes(set(published.layers))

    def _report(self, batch_id: int, published: Published, seconds: float) -> None:
        progress = self.progress
        progress.batches += 1
        progress.records += published.records
        progress.layers += len(published.layers)
        changed = sorted(published.layers)
        progress.last = {"batch": batch_id, "records": published.records, "partitions": changed}
        log.info(
            "micro-batch %s: %s records, partitions %s changed in %.3f s "
            "(total %s records, %s layers)",
            batch_id,
            published.records,
            changed,
            seconds,
            progress.records,
            progress.layers,
        )

    def _compact_forever(self) -> None:
        """Fold one due chain at a time, beside the micro-batches."""
        while not self.stopping.wait(self.project.settings.trigger_interval_s):
            try:
                self._compact_one()
            except Exception:  # a failed compaction leaves the chain as it was
                if not self.stopping.is_set():
                    log.exception("compaction failed")

    def _compact_one(self) -> None:
        manifest = read_manifest(self.store_dir)
        due = compaction.due(self.project, manifest)
        if not due:
            return
        chains = {due[0]: manifest.partitions[due[0]]}
        bases = compaction.compact(self.project, self.spark, self.store_dir, chains)
        with locked(self.store_dir):
            rebased = compaction.rebase(read_manifest(self.store_dir), chains, bases)
            write_manifest(self.store_dir, rebased)
        self.progress.compactions += 1
        log.info("compacted partition %s at version %s", due[0], chains[due[0]].version)
        self._tell_nodes(set(bases))

    def _tell_nodes(self, partitions: set[int]) -> None:
        """Notify the hosting nodes without holding up the next micro-batch (they answer once
        they have installed the new layers)."""
        if self.notify:
            self._notifier.submit(notify_nodes, self.project, partitions)


def _crash_point(name: str) -> None:
    """Die here, as a killed driver would, when the environment asks (crash-recovery tests)."""
    if os.environ.get(CRASH_AT) == name:
        os._exit(86)
