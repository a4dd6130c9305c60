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
from dataclasses import dataclass, field
from pathlib import Path

import orjson
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from contracts.durable import locked
from contracts.manifest import Manifest, read_manifest, write_manifest
from contracts.project import Project
from spark_pipeline import compaction
from spark_pipeline.batch import publish
from spark_pipeline.job import run, snapshot_dir
from spark_pipeline.log_source import NAME, LogSource, offsets_json
from spark_pipeline.plan import OffsetRange, RunPlan, stores_digest
from spark_pipeline.publish import notify_nodes, prune
from spark_pipeline.source import KEY_TYPES

log = logging.getLogger(__name__)
CRASH_AT = "STATEGATE_CRASH_AT"  # tests: die at this point of a micro-batch (see _crash_point)


class GapError(RuntimeError):
    """A micro-batch starts past a partition's published position: records would be lost."""


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

    def start(self) -> None:
        """Follow the log from the checkpoint; without one (a first start, or new store
        declarations), catch up with a one-shot run first, a rebuild when the stores changed."""
        if not self.checkpoint.exists():
            run(self.project, self.spark, notify=self.notify)
        manifest = read_manifest(self.store_dir)
        key_types = {name: topic.key_type for name, topic in self.project.topics.items()}
        self.spark.dataSource.register(LogSource)
        settings = self.project.settings
        records = (
            self.spark.readStream.format(NAME)
            .option("log_dir", str(self.project.log_dir))
            .option("topics", orjson.dumps(key_types).decode())
            .option("partitions", str(self.project.cluster.partitions))
            .option("start", offsets_json(_positions(manifest, self.project)))
            .option("max_records", str(settings.max_records_per_batch))
            .load()
        )
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

    def _publish(self, batch: DataFrame, batch_id: int) -> None:
        batch = batch.persist()
        try:
            with locked(self.store_dir):
                manifest = read_manifest(self.store_dir)
                fresh = batch.where(_unpublished(manifest, self.project))
                plan = _plan(self.project, manifest, fresh)
                frames = {
                    name: _typed(fresh, name, topic.key_type)
                    if any(e > s for s, e in plan.ranges[name].values())
                    else None
                    for name, topic in self.project.topics.items()
                }
                published = publish(
                    self.project, self.spark, self.store_dir, manifest, plan, frames, compact=False
                )
                if published.layers:
                    _crash_point("layers-written")
                    write_manifest(self.store_dir, published.manifest)
                    _crash_point("manifest-written")
                    prune(self.store_dir, published.manifest)
        finally:
            batch.unpersist()
        if published.layers and self.notify:
            notify_nodes(self.project, set(published.layers))
        self._report(batch_id, plan, len(published.layers))

    def _report(self, batch_id: int, plan: RunPlan, layers: int) -> None:
        topics = set(self.project.topics)
        records = plan.records(topics)
        progress = self.progress
        progress.batches += 1
        progress.records += records
        progress.layers += layers
        progress.last = {"batch": batch_id, "records": records, "partitions": plan.changed}
        log.info(
            "micro-batch %s: %s records, %s partitions changed (total %s records, %s layers)",
            batch_id,
            records,
            len(plan.changed),
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
        if self.notify:
            notify_nodes(self.project, set(bases))


def _positions(manifest: Manifest, project: Project) -> dict[str, dict[int, int]]:
    """Published position per topic and partition (0 where nothing is published)."""
    return {
        topic: {
            p: (manifest.partitions[p].position.get(topic, 0) if p in manifest.partitions else 0)
            for p in range(project.cluster.partitions)
        }
        for topic in project.topics
    }


def _unpublished(manifest: Manifest, project: Project) -> Column:
    """Records at or past their partition's published position."""
    keep = F.lit(False)
    for topic, by_p in _positions(manifest, project).items():
        for partition, offset in by_p.items():
            here = (F.col("topic") == topic) & (F.col("partition") == partition)
            keep = keep | (here & (F.col("offset") >= offset))
    return keep


def _plan(project: Project, manifest: Manifest, fresh: DataFrame) -> RunPlan:
    """The ranges a batch's fresh records cover; a range must start at the published position."""
    spans = fresh.groupBy("topic", "partition").agg(
        F.min("offset").alias("first"), F.max("offset").alias("last")
    )
    positions = _positions(manifest, project)
    ranges: dict[str, dict[int, OffsetRange]] = {
        t: {p: (o, o) for p, o in by_p.items()} for t, by_p in positions.items()
    }
    for row in spans.collect():
        start = positions[row["topic"]][row["partition"]]
        if row["first"] != start:
            raise GapError(
                f"{row['topic']}-{row['partition']}: the micro-batch starts at offset "
                f"{row['first']}, the snapshots are at {start}; the checkpoint "
                f"does not belong to this snapshot store: delete it"
            )
        ranges[row["topic"]][row["partition"]] = (start, row["last"] + 1)
    changed = sorted({p for by_p in ranges.values() for p, (s, e) in by_p.items() if e > s})
    return RunPlan(ranges=ranges, changed=changed, rebuild=False)


def _typed(fresh: DataFrame, topic: str, key_type: str) -> DataFrame:
    """A topic's records with the key in its declared type, as the one-shot source reads them."""
    return fresh.where(F.col("topic") == topic).select(
        "partition",
        "offset",
        "timestamp",
        F.col("key").cast(KEY_TYPES[key_type]).alias("key"),
        "value",
    )


def _crash_point(name: str) -> None:
    """Die here, as a killed driver would, when the environment asks (crash-recovery tests)."""
    if os.environ.get(CRASH_AT) == name:
        os._exit(86)
