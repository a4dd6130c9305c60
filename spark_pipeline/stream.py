"""The continuous pipeline: one Spark Structured Streaming query over the event log
(spark_pipeline/log_source.py) whose every micro-batch is published as one new layer per
changed partition (spark_pipeline/batch.py), and a compactor beside it.

    stategate pipeline --config stategate.toml --follow

Exactly once, end to end: Spark replays a micro-batch it had not committed when the driver
died, and the sink keeps only the records at or past each partition's published position,
so a replay publishes what is missing and nothing twice. The checkpoint lives in the
snapshot store, per stores digest (new declarations start a new one after a rebuild).

Stopping (stop(), on SIGTERM or SIGINT in `stategate pipeline`): a catch-up run is cancelled;
a micro-batch under way may finish (up to STOP_GRACE_S), then the query is stopped; so a stop
publishes a whole micro-batch or nothing of it.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client import CollectorRegistry, start_http_server
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from contracts.durable import locked
from contracts.freshness import Delays
from contracts.manifest import read_manifest, write_manifest
from contracts.project import Project
from spark_pipeline import compaction
from spark_pipeline.batch import Published, pending, publish, publish_here
from spark_pipeline.dead_letter import refusal
from spark_pipeline.job import run, snapshot_dir
from spark_pipeline.log_source import NAME, LogSource, options, task_groups
from spark_pipeline.plan import stores_digest
from spark_pipeline.progress import log_bad_records, positions
from spark_pipeline.publish import notify_nodes, prune, sweep_temporaries

log = logging.getLogger(__name__)
CRASH_AT = "STATEGATE_CRASH_AT"  # tests: die at this point of a micro-batch (see _crash_point)
STOP_GRACE_S = 30.0  # how long a stop waits for the micro-batch under way
COMPACTION = "stategate-compaction"  # the compactor's Spark job group, cancelled by a stop


@dataclass
class Progress:
    """What the continuous pipeline has done so far (logged after every micro-batch)."""

    batches: int = 0
    records: int = 0
    layers: int = 0
    compactions: int = 0
    bad_records: dict[str, dict[str, int]] = field(default_factory=dict)  # topic -> reason -> n
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
        self._publishing = threading.Lock()  # held while a micro-batch publishes
        self._compacting = threading.Event()  # set while a compaction runs
        self._groups = 1  # the source's task groups, fixed when following starts
        self._told: dict[str, str] = {}  # node -> how the last notification went
        self.freshness = Delays(stages=("read", "written", "published"))
        self.registry = CollectorRegistry()
        self.registry.register(self.freshness)

    def serve_metrics(self, address: str) -> None:
        """Serve the pipeline's Prometheus metrics at http://<address>/metrics."""
        host, _, port = address.rpartition(":")
        start_http_server(int(port), host or "127.0.0.1", registry=self.registry)
        log.info("metrics at http://%s/metrics", address)

    def start(self) -> None:
        """Follow the log from the checkpoint; without one (a first start, or new store
        declarations), catch up with a one-shot run first, a rebuild when the stores changed.
        Returns without following when a stop came meanwhile."""
        with locked(self.store_dir):
            sweep_temporaries(self.store_dir)
        if not self.checkpoint.exists():
            log.info("no checkpoint at %s: catching up with a one-shot run first", self.checkpoint)
            run(self.project, self.spark, notify=self.notify, stopping=self.stopping)
        if self.stopping.is_set():
            return
        manifest = read_manifest(self.store_dir)
        self.spark.dataSource.register(LogSource)
        settings = self.project.settings
        partitions = range(self.project.cluster.partitions)
        start = {
            topic: {p: manifest.published(p, topic) for p in partitions}
            for topic in self.project.topics
        }
        self._groups = task_groups(self.spark, self.project.cluster.partitions)
        source = options(self.project, start, self._groups)
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
        log.info(
            "following %s every %s s; published positions %s",
            self.project.log_dir,
            settings.trigger_interval_s,
            positions({p: {t: by_p[p] for t, by_p in start.items()} for p in partitions}),
        )

    @property
    def checkpoint(self) -> Path:
        return self.store_dir / ".checkpoints" / stores_digest(self.project)[:16]

    def wait(self) -> None:
        """Until stop() or the query fails (re-raised)."""
        if self._query is None:
            return  # stopped before following
        while not self.stopping.is_set():
            if self._query.awaitTermination(1):
                break
        exception = self._query.exception()
        if exception is not None and not self.stopping.is_set():
            raise refusal(exception) or RuntimeError(f"the streaming query failed: {exception}")

    def request_stop(self) -> None:
        """Ask for a stop without waiting (from a signal handler): a catch-up run is cancelled
        (spark_pipeline/job.py); a micro-batch under way is left to stop()."""
        self.stopping.set()

    def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        """Stop following: let the micro-batch under way publish (up to `grace_s`), stop the
        query, cancel a compaction (its base is not published) and the notifications due."""
        self.stopping.set()
        if self._query is not None:
            if self._publishing.acquire(timeout=grace_s):
                self._publishing.release()
            else:
                log.warning(
                    "a micro-batch still runs after %s s: stopped; it is published again at "
                    "the next start",
                    grace_s,
                )
            self._query.stop()
        if self._compactor is not None:
            if self._compacting.is_set():
                self.spark.sparkContext.cancelJobGroup(COMPACTION)
            self._compactor.join(60)
        self._notifier.shutdown(wait=False, cancel_futures=True)
        log.info(
            "stopped after %d micro-batches: %d records, %d layers, %d compactions",
            self.progress.batches,
            self.progress.records,
            self.progress.layers,
            self.progress.compactions,
        )

    def _publish(self, batch: DataFrame, batch_id: int) -> None:
        with self._publishing:
            started = time.monotonic()
            with locked(self.store_dir):
                manifest = read_manifest(self.store_dir)
                ends, behind = pending(self.project, manifest)
                if behind <= self.project.settings.driver_batch_records:
                    # up to the log's end now: records the batch's plan did not see yet are
                    # published too, and left out of the next batch by their positions
                    published = publish_here(
                        self.project, self.store_dir, manifest, ends, self._groups
                    )
                else:
                    published = publish(
                        self.project,
                        self.spark,
                        self.store_dir,
                        manifest,
                        batch,
                        self._groups,
                        compact=False,
                    )
                _commit(self.store_dir, published)
            self._report(batch_id, published, time.monotonic() - started)
            for layer in published.layers.values():
                self.freshness.observe_all(layer.appended, layer.stages())
            if published.layers:
                self._tell_nodes(set(published.layers))

    def _report(self, batch_id: int, published: Published, seconds: float) -> None:
        """One line per micro-batch: its records, the partitions it changed, how long it
        took, and where those partitions are now."""
        progress = self.progress
        progress.batches += 1
        progress.records += published.records
        progress.layers += len(published.layers)
        changed = sorted(published.layers)
        bad = published.bad
        for topic, reasons in bad.items():
            total = progress.bad_records.setdefault(topic, {})
            for reason, n in reasons.items():
                total[reason] = total.get(reason, 0) + n
        progress.last = {
            "batch": batch_id,
            "records": published.records,
            "partitions": changed,
            "bad_records": bad,
            "built_in": published.built_in,
        }
        log.info(
            "micro-batch %s: %s records, partitions %s changed in %.3f s (%s); positions %s "
            "(total %s records, %s layers)",
            batch_id,
            published.records,
            changed,
            seconds,
            published.built_in,
            positions({p: layer.position for p, layer in published.layers.items()}) or "-",
            progress.records,
            progress.layers,
        )
        log_bad_records(bad, self.store_dir)

    def _compact_forever(self) -> None:
        """Fold one due chain at a time, beside the micro-batches."""
        self.spark.sparkContext.setJobGroup(COMPACTION, "compaction", interruptOnCancel=True)
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
        self._compacting.set()
        try:
            bases = compaction.compact(self.project, self.spark, self.store_dir, chains)
        finally:
            self._compacting.clear()
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
            self._notifier.submit(self._notify, partitions)

    def _notify(self, partitions: set[int]) -> None:
        """Tell the nodes; log a node's notifications when they start or stop failing (a
        node down would otherwise log a line per micro-batch)."""
        for node, outcome in notify_nodes(self.project, partitions).items():
            before = self._told.get(node, "ok")
            self._told[node] = outcome
            if outcome != "ok" and before == "ok":
                log.warning("could not tell %s about new layers: %s", node, outcome)
            elif outcome == "ok" and before != "ok":
                log.info("told %s about new layers again", node)


def catch_up_here(project: Project, notify: bool = True) -> None:
    """Publish the records appended since the last publication, in this process, before
    Spark starts (its start costs 15-25 s): a restart after a crash serves the state as of
    the crash within seconds. Safe beside Spark's replay, which keeps only the records past
    the published positions. Nothing to do when nothing was published yet, the store
    declarations are new (a rebuild) or more than driver_batch_records are behind (the
    executors' work)."""
    store_dir = snapshot_dir(project)
    with locked(store_dir):
        manifest = read_manifest(store_dir)
        complete = len(manifest.partitions) == project.cluster.partitions
        if not complete or manifest.stores_digest != stores_digest(project):
            return
        ends, behind = pending(project, manifest)
        if behind == 0 or behind > project.settings.driver_batch_records:
            return
        started = time.monotonic()
        published = publish_here(project, store_dir, manifest, ends, os.cpu_count() or 1)
        _commit(store_dir, published)
    log.info(
        "caught up before Spark's start: %s records, partitions %s in %.3f s (driver); "
        "positions %s",
        published.records,
        sorted(published.layers),
        time.monotonic() - started,
        positions({p: layer.position for p, layer in published.layers.items()}) or "-",
    )
    if notify and published.layers:
        notify_nodes(project, set(published.layers))


def _commit(store_dir: Path, published: Published) -> None:
    """Write the manifest naming the new layers (the point where they become visible, with
    the crash points around it that the exactly-once tests use), then prune what it no
    longer names. Nothing when there are no new layers. The caller holds the store's lock."""
    if published.layers:
        _crash_point("layers-written")
        write_manifest(store_dir, published.manifest)
        _crash_point("manifest-written")
        prune(store_dir, published.manifest)


def _crash_point(name: str) -> None:
    """Die here, as a killed driver would, when the environment asks (crash-recovery tests)."""
    if os.environ.get(CRASH_AT) == name:
        os._exit(86)
