"""The continuous pipeline: a loop that publishes the records appended since the last
publication as one new layer per changed partition (spark_pipeline/batch.py), a micro-batch
every `trigger_interval_s` at most (the next starts at once when one took longer), and a
compactor beside it.

    stategate pipeline --config stategate.toml --follow

A micro-batch of at most `driver_batch_records` new records is built in the driver
(batch.publish_here); a larger one (a catch-up after a long stop, a burst) is read and built
by Spark's executors, at most `max_records_per_batch` records at a time. The loop replaced a
Spark Structured Streaming query, whose cost per trigger (its offset and commit logs, the
planning: ~0.6 s between back-to-back batches under load) exceeded a small batch's work, and
whose checkpoint only repeated what the manifest's positions say.

Exactly once, end to end: the manifest's positions are the one record of what is published.
A batch reads from them, keeps only the records at or past them, writes at the version above
the published chain, and is visible once the manifest naming its layers is written; so a
crash anywhere in a batch loses and doubles nothing: a restart reads from the same positions.

Stopping (stop(), on SIGTERM or SIGINT in `stategate pipeline`): a catch-up run is cancelled;
a micro-batch under way may finish (up to STOP_GRACE_S), then its Spark job, if any, is
cancelled; so a stop publishes a whole micro-batch or nothing of it. A new project file
(take(), on SIGHUP) stops the loop the same way, then starts it again on the file, in the
same process and Spark: a restart without the JVM's start.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, start_http_server
from pyspark.sql import SparkSession

from contracts import chains
from contracts.durable import locked
from contracts.freshness import Delays
from contracts.generations import of_tables
from contracts.manifest import Manifest
from contracts.project import Project
from snapshot_store import Conflict, StoreError
from spark_pipeline import compaction
from spark_pipeline.batch import Published, publish, publish_here
from spark_pipeline.dead_letter import refusal
from spark_pipeline.job import run, snapshot_dir, tables_of
from spark_pipeline.log_source import read_log, task_groups
from spark_pipeline.manifests import Manifests
from spark_pipeline.plan import plan_run, stores_digest
from spark_pipeline.progress import log_bad_records, positions
from spark_pipeline.publish import Notifier, mirror, prune, sweep_temporaries
from spark_pipeline.spark import LazySpark
from topics import LogUnavailable, open_log

log = logging.getLogger(__name__)
CRASH_AT = "STATEGATE_CRASH_AT"  # tests: die at this point of a micro-batch (see _crash_point)
STOP_GRACE_S = 30.0  # how long a stop waits for the micro-batch under way
TOPICS_CHECK_S = 5.0  # how often the loop checks the topics are still as declared
UNAVAILABLE_RETRY_S = 1.0  # how often the loop tries a log it could not read
# A Spark task's LogUnavailable, as the driver's error quotes it
# what a Spark task's error says when the log or the snapshot store could not be reached
_UNAVAILABLE = re.compile(r"(LogUnavailable|StoreError): ([^\n]*)")
BATCHES = "stategate-batches"  # the loop's Spark job group, cancelled by a stop past the grace


@dataclass
class LoopProgress:
    """What the continuous pipeline has done so far (logged after every micro-batch)."""

    batches: int = 0
    records: int = 0
    layers: int = 0
    compactions: int = 0
    bad_records: dict[str, dict[str, int]] = field(default_factory=dict)  # topic -> reason -> n
    last: dict[str, object] = field(default_factory=dict)


class PipelineLoop:
    def __init__(
        self, project: Project, spark: SparkSession | LazySpark, notify: bool = True
    ) -> None:
        self.file = project  # as declared; `project` is its tables (contracts/generations.py)
        self.project = project
        self._spark = spark if isinstance(spark, LazySpark) else LazySpark.of(spark)
        self.notify = notify
        self.store_dir = snapshot_dir(project)
        self.manifests = Manifests(project, self.store_dir)
        self.progress = LoopProgress()
        self.stopping = threading.Event()
        self.stop_requested = False  # a stop, not a new file: stopping stays set
        self._loop: threading.Thread | None = None
        self._failure: BaseException | None = None  # what ended the loop, if not a stop
        self._compactor: threading.Thread | None = None
        self._notifier = Notifier(project)
        self.events = open_log(project)  # the topics it follows
        self._groups = 0  # the task groups the executors' records come in, once Spark runs
        self._outage: float | None = None  # since when the log could not be read, if it cannot
        self.freshness = Delays(stages=("read", "written", "published"))
        self.registry = CollectorRegistry()
        self.registry.register(self.freshness)

    def serve_metrics(self, address: str) -> None:
        """Serve the pipeline's Prometheus metrics at http://<address>/metrics."""
        host, _, port = address.rpartition(":")
        start_http_server(int(port), host or "127.0.0.1", registry=self.registry)
        log.info("metrics at http://%s/metrics", address)

    def start(self) -> None:
        """Follow the log from the published positions; when a partition was never published
        or the store declarations are new, catch up with a one-shot run first (a rebuild when
        the stores changed). Returns without following when a stop came meanwhile."""
        with locked(self.store_dir):
            sweep_temporaries(self.store_dir)
        self.project = tables_of(self.file, self.manifests.current())
        if not extendable(self.project, self.manifests.current()):
            log.info("catching up with a one-shot run first (new snapshots or new stores)")
            run(self.file, self._spark, notify=self.notify, stopping=self.stopping)
        else:
            self.events.check()  # as the one-shot run does first
        if self.stopping.is_set():
            return
        manifest = self.manifests.current()
        self.project = tables_of(self.file, manifest)  # as the run built them
        self._loop = threading.Thread(target=self._follow, name="follow", daemon=True)
        self._loop.start()
        self._compactor = threading.Thread(target=self._compact_forever, daemon=True)
        self._compactor.start()
        partitions = range(self.project.cluster.partitions)
        log.info(
            "following %s every %s s; published positions %s",
            self.project.kafka.bootstrap if self.project.kafka else self.project.log_dir,
            self.project.settings.trigger_interval_s,
            positions({p: chains.position(self.project, manifest, p) for p in partitions}),
        )

    def wait(self, hangup: threading.Event | None = None) -> bool:
        """Until stop() or the loop fails (re-raised); True when `hangup` came first."""
        if self._loop is None:
            return False  # stopped before following
        asked = time.monotonic()
        while not self.stopping.is_set() and self._loop.is_alive():
            if hangup is not None and hangup.is_set():
                return True
            self._loop.join(0.2)
            if time.monotonic() - asked > self.project.settings.health_interval_s:
                asked = time.monotonic()
                self._leave_out_generations()
        failure = self._failure
        if failure is not None and not self.stopping.is_set():
            raise refusal(failure) or failure
        return False

    def request_stop(self) -> None:
        """Ask for a stop without waiting (from a signal handler): a catch-up run is cancelled
        (spark_pipeline/job.py); a micro-batch under way is left to stop()."""
        self.stop_requested = True
        self.stopping.set()

    def take(self, newer: Project) -> None:
        """Follow `newer` from here on: the loop stops as at a stop (a micro-batch under way
        publishes whole), then starts again on it, a one-shot run first when its stores
        changed, as a start does; Spark and its JVM stay."""
        self._halt(STOP_GRACE_S)
        if self.stop_requested:
            return
        self.stopping.clear()
        self._notifier.close()
        self.events.close()
        self.file = self.project = newer
        self.store_dir = snapshot_dir(newer)
        self.manifests = Manifests(newer, self.store_dir)
        self._notifier = Notifier(newer)
        self.events = open_log(newer)
        self.start()

    def _leave_out_generations(self) -> None:
        """When no node reads a generation kept beside a newer one any more, start again on
        the tables without it: its chains get new bases that leave it out, as a store
        removed (contracts/generations.py)."""
        declared = [store.declared_name for store in self.project.stores.values()]
        if len(declared) == len(set(declared)):
            return  # no generation kept beside another
        manifest = self.manifests.current()
        if of_tables(self.file, manifest.built, ()).stores == self.project.stores:
            return
        if tables_of(self.file, manifest).stores != self.project.stores:
            log.info("no node reads an earlier generation of a store any more: leaving it out")
            self.take(self.file)

    def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        """Stop following: let the micro-batch under way publish (up to `grace_s`, then its
        Spark job is cancelled), let a compaction under way finish, and cancel the
        notifications due."""
        self._halt(grace_s)
        self._notifier.close()
        self.events.close()
        log.info(
            "stopped after %d micro-batches: %d records, %d layers, %d compactions",
            self.progress.batches,
            self.progress.records,
            self.progress.layers,
            self.progress.compactions,
        )

    def _halt(self, grace_s: float) -> None:
        """The loop and the compactor stopped, a micro-batch under way published or
        cancelled."""
        self.stopping.set()
        if self._loop is not None:
            self._loop.join(grace_s)
            if self._loop.is_alive():
                log.warning(
                    "a micro-batch still runs after %s s: stopped; its records are published "
                    "at the next start",
                    grace_s,
                )
                if (spark := self._spark.started) is not None:
                    spark.sparkContext.cancelJobGroup(BATCHES)
                self._loop.join(60)
        if self._compactor is not None:
            self._compactor.join(60)
        self._loop = self._compactor = None

    def _follow(self) -> None:
        """The loop: a micro-batch, then the rest of `trigger_interval_s`, until the stop;
        every TOPICS_CHECK_S, the topics checked again first (a partition added to one maps
        keys elsewhere: the loop ends, refusing, before it publishes past it)."""
        interval = self.project.settings.trigger_interval_s
        checked = time.monotonic()
        try:
            while not self.stopping.is_set():
                started = time.monotonic()
                check = started - checked >= TOPICS_CHECK_S
                if not self._published_unless_unavailable(check):
                    self.stopping.wait(UNAVAILABLE_RETRY_S)
                    continue
                checked = started if check else checked
                self.stopping.wait(max(0.0, interval - (time.monotonic() - started)))
        except Exception as exc:
            if not self.stopping.is_set():
                log.debug("the loop failed", exc_info=True)
                self._failure = exc

    def _published_unless_unavailable(self, check: bool) -> bool:
        """One micro-batch, the topics checked first if `check`; False when the log could not
        be read or the snapshot store not reached (said once per outage: the loop tries
        again, from the published positions, until it can; nothing is published out of
        order, since the manifest it read is the one record of what is)."""
        try:
            if check:
                self.events.check()
            self._publish()
        except Exception as exc:
            unavailable = _unavailable(exc)
            if unavailable is None:
                raise
            if self._outage is None:
                self._outage = time.monotonic()
                log.warning("%s; trying again every %g s", unavailable, UNAVAILABLE_RETRY_S)
            return False
        if self._outage is not None:
            took = time.monotonic() - self._outage
            log.info("the log and the snapshot store answer again after %.1f s", took)
            self._outage = None
        return True

    def _publish(self) -> None:
        """One micro-batch: the records up to the log's end now, in the driver when they are
        few, else on the executors (at most max_records_per_batch); nothing when none came."""
        settings = self.project.settings
        started = time.monotonic()
        with locked(self.store_dir):
            manifest = self.manifests.read()
            plan = plan_run(self.project, manifest, self.events)
            if plan.rebuild:
                raise RuntimeError("the snapshot store's stores changed under the pipeline")
            behind = plan.records(set(self.project.topics))
            if behind == 0:
                return
            if settings.in_driver(behind):
                published = publish_here(
                    self.project,
                    self.store_dir,
                    manifest,
                    self.events,
                    plan.until_now(self.events, self._spare(behind)),
                    commit=self._commit_one,
                )
            else:
                spark = self._spark.get()
                spark.sparkContext.setJobGroup(BATCHES, "micro-batches", interruptOnCancel=True)
                if not self._groups:  # fixed once: the source's groups must not move
                    self._groups = task_groups(spark, self.project.cluster.partitions)
                plan = plan.capped(settings.max_records_per_batch)
                records = read_log(spark, self.project, plan, self._groups)
                published = publish(
                    self.project,
                    spark,
                    self.store_dir,
                    manifest,
                    records,
                    self._groups,
                    plan.ends,
                    compact=False,
                )
                self._commit_one(published)
            if published.layers:
                prune(self.store_dir, published.manifest, object_store=self.manifests.object_store)
        self._report(self.progress.batches, published, time.monotonic() - started)

    def _spare(self, behind: int) -> int:
        """How many records a partition's read in the driver may take past the plan's end, so
        that the whole micro-batch stays within driver_batch_records."""
        reads = self.project.cluster.partitions * len(self.project.topics)
        return max(0, self.project.settings.driver_batch_records - behind) // reads

    def _commit_one(self, published: Published) -> None:
        """Publish new layers (the caller holds the store's lock) and tell the nodes."""
        _commit(self.manifests, published)
        if published.layers:
            mirror(self.project, published.manifest, self.events)
        for layer in published.layers.values():
            self.freshness.observe_all(layer.appended, layer.stages())
        if published.layers:
            self._tell_nodes(set(published.layers))

    def _report(self, batch_id: int, published: Published, seconds: float) -> None:
        """One line per micro-batch: its records, the partitions whose chains it changed, how
        long it took, and where those partitions are now."""
        progress = self.progress
        progress.batches += 1
        progress.records += published.records
        progress.layers += len(published.layers)
        project = self.project
        changed = sorted({chains.partition(project, chain) for chain in published.layers})
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
            positions(_moved(project, published)) or "-",
            progress.records,
            progress.layers,
        )
        log_bad_records(bad, self.store_dir)

    def _compact_forever(self) -> None:
        """Fold one due chain at a time, beside the micro-batches."""
        while not self.stopping.wait(self.project.settings.trigger_interval_s):
            try:
                self._compact_one()
            except Exception:  # a failed compaction leaves the chain as it was
                if not self.stopping.is_set():
                    log.exception("compaction failed")

    def _compact_one(self) -> None:
        manifest = self.manifests.current()
        due = compaction.due(self.project, manifest)
        if not due:
            return
        chains = {due[0]: manifest.partitions[due[0]]}
        bases = compaction.compact(self.project, self.store_dir, chains)
        with locked(self.store_dir):
            rebased = compaction.rebase(self.manifests.read(), chains, bases)
            self.manifests.write(rebased)
        self.progress.compactions += 1
        log.info("compacted partition %s at version %s", due[0], chains[due[0]].version)
        self._tell_nodes(set(bases))

    def _tell_nodes(self, partitions: set[int]) -> None:
        """Notify the hosting nodes without holding up the micro-batch (they answer once they
        have installed the new layers)."""
        if self.notify:
            self._notifier.tell(partitions)


def _moved(project: Project, published: Published) -> dict[int, dict[str, int]]:
    """partition -> where its new layers stand, in the topics of the chains they extend."""
    moved: dict[int, dict[str, int]] = {}
    for chain, layer in published.layers.items():
        moved.setdefault(chains.partition(project, chain), {}).update(layer.position)
    return moved


def extendable(project: Project, manifest: Manifest) -> bool:
    """Whether new records extend the published chains: every partition was published, by
    the current store declarations."""
    complete = len(manifest.partitions) == chains.count(project)
    return complete and manifest.stores_digest == stores_digest(project)


def _commit(manifests: Manifests, published: Published) -> None:
    """Write the manifest naming the new layers: the point where they become visible, with
    the crash points around it that the exactly-once tests use. Nothing when there are no
    new layers. The caller holds the store's lock, and prunes what the manifest no longer
    names once the micro-batch is done."""
    if published.layers:
        _crash_point("layers-written")
        manifests.write(published.manifest)
        _crash_point("manifest-written")


def _crash_point(name: str) -> None:
    """Die here, as a killed driver would, when the environment asks (crash-recovery tests)."""
    if os.environ.get(CRASH_AT) == name:
        os._exit(86)


def _unavailable(exc: BaseException) -> str | None:
    """What could not be reached behind `exc` (the log, or the snapshot store), raised in the
    driver or in a Spark task; None for any other failure (a lost race for the manifest
    among them: that one stops the pipeline)."""
    if isinstance(exc, LogUnavailable):
        return f"the log cannot be read: {exc}"
    if isinstance(exc, StoreError) and not isinstance(exc, Conflict):
        return f"the snapshot store cannot be reached: {exc}"
    found = _UNAVAILABLE.search(str(exc))
    if found is None:
        return None
    what = "the log cannot be read" if found.group(1) == "LogUnavailable" else (
        "the snapshot store cannot be reached")  # fmt: skip
    return f"{what}: {found.group(2)}"
