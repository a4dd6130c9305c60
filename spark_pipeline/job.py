"""The one-shot pipeline job: read the log's records since the published positions, publish
them as one new layer per changed partition (spark_pipeline/batch.py), tell the nodes.

    spark-submit spark_pipeline/job.py --config path/to/stategate.toml

A run of at most `driver_batch_records` new records is built in the driver, as a small
micro-batch is, and Spark is not started for it (its start costs 15-25 CPU-s); a larger one
(a first build or rebuild of a big log, a catch-up after a long stop) runs on the executors.

The continuous pipeline (spark_pipeline/loop.py) publishes the same way, micro-batch by
micro-batch.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import logging
import sys
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

# spark-submit of this file from a source checkout: make the packages importable here and in
# the Python workers.
_CHECKOUT = (
    None if importlib.util.find_spec("contracts") else str(Path(__file__).resolve().parents[1])
)
if _CHECKOUT:
    sys.path.insert(0, _CHECKOUT)

import orjson  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402

from contracts import chains  # noqa: E402
from contracts.durable import locked  # noqa: E402
from contracts.generations import kept, of_tables  # noqa: E402
from contracts.manifest import (  # noqa: E402
    Layer,
    Manifest,
    PartitionEntry,
)
from contracts.project import Project, load  # noqa: E402
from spark_pipeline.batch import Published, publish, publish_here  # noqa: E402
from spark_pipeline.log_source import read_log, task_groups  # noqa: E402
from spark_pipeline.manifests import Manifests  # noqa: E402
from spark_pipeline.plan import Rebuild, RunPlan, built_by, plan_run  # noqa: E402
from spark_pipeline.progress import log_bad_records, positions, size, stage_progress  # noqa: E402
from spark_pipeline.publish import (  # noqa: E402
    mirror,
    nodes_reading,
    notify_nodes,
    prune,
    sweep_temporaries,
)
from spark_pipeline.spark import LazySpark, cancelled_on, spark_session  # noqa: E402
from topics import Log, open_log  # noqa: E402

log = logging.getLogger(__name__)


class StopRequested(RuntimeError):
    """A stop came before the run's Spark job started: nothing was written."""


@dataclass
class RunReport:
    """What one run did."""

    records: int  # new records read
    rebuild: bool  # the stores changed, so every chain got a base
    from_start: list[str] = field(default_factory=list)  # the stores built from offset 0
    versions: dict[int, tuple[int | None, int]] = field(default_factory=dict)  # p -> old, new
    layers: dict[int, str] = field(default_factory=dict)  # p -> "base" or "delta"
    notify: dict[str, str] = field(default_factory=dict)  # node -> "ok" or what went wrong
    bad_records: dict[str, dict[str, int]] = field(default_factory=dict)  # topic -> reason -> n
    seconds: float = 0.0

    def add(self, before: dict[int, PartitionEntry], layers: dict[int, Layer]) -> None:
        for partition, layer in sorted(layers.items()):
            old = before.get(partition)
            self.versions[partition] = (old.version if old else None, layer.version)
            self.layers[partition] = layer.kind

    def to_json(self) -> bytes:
        body = {
            **asdict(self),
            "versions": {p: {"old": o, "new": n} for p, (o, n) in sorted(self.versions.items())},
        }
        return orjson.dumps(body, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS)


def run(
    project: Project,
    spark: SparkSession | LazySpark,
    notify: bool = True,
    stopping: threading.Event | None = None,
) -> RunReport:
    """One incremental run; returns what it changed (partitions not listed kept their version).
    Logs each step as it goes (spark_pipeline/progress.py). Once `stopping` is set, the layers
    not built yet are not (StopRequested, or the cancelled job's error, is raised): nothing of
    the run is published, since the manifest is written once every layer is."""
    started = time.monotonic()
    store_dir = snapshot_dir(project)
    topics = {s.topic.name for s in project.stores.values()}
    stopping = stopping or threading.Event()
    events = open_log(project)
    events.check()
    manifests = Manifests(project, store_dir)
    with locked(store_dir), contextlib.closing(events):
        _sweep(store_dir)
        manifest = manifests.read()
        project = tables_of(project, manifest)
        plan = plan_run(project, manifest, events)
        from_start = sorted(plan.rebuild.stores) if plan.rebuild else []
        report = RunReport(plan.records(topics), plan.rebuild is not None, from_start)
        _log_plan(project, events, plan, report.records)
        published = Published(manifest)
        if plan.changed:
            building = time.monotonic()
            _unless(stopping)
            if project.settings.in_driver(report.records):
                log.info("building %d layers in the driver", len(plan.changed))
                published = publish_here(
                    project,
                    store_dir,
                    manifest,
                    events,
                    plan.until(),
                    rebuild=plan.rebuild,
                    compact=True,
                )
                _unless(stopping)
            else:
                lazy = spark if isinstance(spark, LazySpark) else LazySpark.of(spark)
                published = _publish_on_executors(
                    project, store_dir, lazy.get(), manifest, plan, stopping
                )
            _log_layers(project, published, time.monotonic() - building)
            log_bad_records(published.bad, store_dir)
            report.bad_records = published.bad
        if published.layers:
            manifests.write(published.manifest)
            mirror(project, published.manifest, events)
            prune(store_dir, published.manifest, object_store=manifests.object_store)
            log.info(
                "published: the manifest names %d new layers (partitions %s)",
                len(published.layers),
                sorted(published.layers),
            )
        elif manifest.partitions and manifest.built is None and plan.rebuild is None:
            # chains of a release before `built`: said, so that a change builds only itself
            manifests.write(replace(manifest, built=built_by(project)))
        report.add(manifest.partitions, published.layers)
    if published.layers and notify:
        telling = time.monotonic()
        report.notify = notify_nodes(project, set(published.layers))
        told = ", ".join(f"{node} {outcome}" for node, outcome in report.notify.items())
        log.info(
            "told the nodes: %s (%.1f s)", told or "none hosts them", time.monotonic() - telling
        )
    report.seconds = round(time.monotonic() - started, 3)
    log.info(
        "run done in %.1f s: %d records, %d new layers",
        report.seconds,
        report.records,
        len(published.layers),
    )
    return report


def tables_of(project: Project, manifest: Manifest) -> Project:
    """The project of tables a run builds and extends (contracts/generations.py): a store
    changed in place as a generation beside the one built before it, which is kept while a
    node reads it. The nodes are asked only when there is one to leave out."""
    built = manifest.built
    every = kept(project, built)
    if every.stores == of_tables(project, built, ()).stores:
        return every
    reading = nodes_reading(project)
    return every if reading is None else of_tables(project, built, reading)


def _publish_on_executors(
    project: Project,
    store_dir: Path,
    spark: SparkSession,
    manifest: Manifest,
    plan: RunPlan,
    stopping: threading.Event,
) -> Published:
    """The run's layers, built by Spark's tasks; the caller holds the store's lock."""
    log.info(
        "building %d layers: each Spark task reads the records of its partitions and "
        "writes their layers",
        len(plan.changed),
    )
    with stage_progress(spark, "building layers"), cancelled_on(stopping, spark):
        _unless(stopping)
        groups = task_groups(spark, project.cluster.partitions)
        records = read_log(spark, project, plan, groups)
        _unless(stopping)
        return publish(
            project, spark, store_dir, manifest, records, groups, plan.ends, plan.rebuild
        )


def _sweep(store_dir: Path) -> None:
    """Remove what a writer killed while writing a layer left behind (publish.py)."""
    swept = sweep_temporaries(store_dir)
    if swept:
        log.info("removed %d temporary layer files left by a stopped writer", len(swept))


def _unless(stopping: threading.Event) -> None:
    if stopping.is_set():
        raise StopRequested("stopped before the layers were built: nothing was published")


def _log_plan(project: Project, events: Log, plan: RunPlan, records: int) -> None:
    """What the run reads: the offset range and record count of each topic partition."""
    log.info(
        "reading %s: %d new records, %d of %d partitions get a new layer%s",
        events.where,
        records,
        len(plan.changed),
        project.cluster.partitions,
        _rebuilding(plan.rebuild),
    )
    for partition in plan.changed:
        ranges = [
            f"{topic} [{start}, {end}) {end - start} records"
            for topic, by_p in sorted(plan.ranges.items())
            for start, end in [by_p[partition]]
        ]
        log.info("partition %d: %s", partition, ", ".join(ranges))


def _rebuilding(rebuild: Rebuild | None) -> str:
    if rebuild is None:
        return ""
    built = ", ".join(sorted(rebuild.stores)) or "none"
    return f" (the stores changed: every chain gets a base; built from offset 0: {built})"


def _log_layers(project: Project, published: Published, seconds: float) -> None:
    """One line per chain's new layer, then the stage's total."""
    for chain, layer in sorted(published.layers.items()):
        task = published.tasks[chain]
        partition = chains.partition(project, chain)
        log.info(
            "partition %d%s: wrote v%d %s, %d records, %s in %.1f s; rows %s; positions %s",
            partition,
            "'s global stores" if chains.is_global(project, chain) else "",
            layer.version,
            layer.kind,
            task.records,
            size(layer.size),
            task.seconds,
            " ".join(f"{store}:{n}" for store, n in task.rows.items()),
            positions({partition: layer.position}),
        )
    log.info(
        "built %d layers from %d records in %.1f s",
        len(published.layers),
        published.records,
        seconds,
    )


def snapshot_dir(project: Project) -> Path:
    if "://" in project.snapshot_store:
        raise ValueError(f"the pipeline writes to a folder, not {project.snapshot_store}")
    return Path(project.snapshot_store)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build and publish the state snapshots.")
    parser.add_argument("--config", required=True, help="the project file (stategate.toml)")
    parser.add_argument("--master", help="Spark master; default: spark-submit's, else local[2]")
    parser.add_argument("--no-notify", action="store_true", help="do not tell the nodes")
    args = parser.parse_args(argv)
    project = load(args.config)
    logging.basicConfig(  # as `stategate pipeline` logs in text (stategate/logs.py)
        level=project.settings.log_level.upper(),
        format="%(asctime)s %(levelname)s pipeline %(name)s: %(message)s",
    )
    conf = {"spark.executorEnv.PYTHONPATH": _CHECKOUT} if _CHECKOUT else None
    report = run(project, spark_session(args.master, conf), notify=not args.no_notify)
    print(report.to_json().decode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
