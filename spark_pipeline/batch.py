"""Publishing a batch of new records: compute each store's delta with Spark, write one new
layer per changed partition (a delta, or a base when the chain starts or is due for
compaction), then replace the manifest. The one-shot run and every micro-batch of the
continuous pipeline publish through here.

Publication is idempotent, keyed by positions: records below a partition's published
position are not in the plan (plan.py), a layer is written at the version above the
published chain (a leftover file there, from a run that crashed, is replaced), and nothing
is visible until the manifest names it.

Layers and staged deltas are written by Spark tasks straight into the snapshot store: on a
real cluster it must be a file system shared by the driver and every executor.
"""

from __future__ import annotations

import contextlib
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession

from contracts.eventlog import now_ms
from contracts.manifest import Layer, Manifest, PartitionEntry
from contracts.project import Project
from contracts.settings import Settings
from contracts.snapshot_file import Kind
from spark_pipeline.plan import RunPlan, stores_digest
from spark_pipeline.snapshot import LayerTask, build_layer
from spark_pipeline.stores import parse_values, store_delta


@dataclass
class Published:
    """What one publication changed."""

    manifest: Manifest
    layers: dict[int, Layer] = field(default_factory=dict)  # partition -> its new layer


def publish(
    project: Project,
    spark: SparkSession,
    store_dir: Path,
    manifest: Manifest,
    plan: RunPlan,
    records: dict[str, DataFrame | None],
    compact: bool = True,
) -> Published:
    """Write the plan's changed partitions and return the new manifest (not yet written).
    `records` are each topic's new records, as plan.ranges says; `compact` lets a due chain
    be folded into a base right here (the continuous pipeline compacts in the background)."""
    if not plan.changed:
        return Published(manifest)
    staging = store_dir / ".staging" / f"{now_ms()}-{uuid.uuid4().hex[:8]}"
    try:
        _stage_deltas(project, records, staging)
        tasks = [
            _task(project, store_dir, manifest, plan, p, staging, compact) for p in plan.changed
        ]
        built = spark.sparkContext.parallelize(tasks, len(tasks)).map(build_layer).collect()
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        with contextlib.suppress(OSError):
            staging.parent.rmdir()
    layers = dict(built)
    partitions = dict(manifest.partitions)
    for partition, layer in layers.items():
        below = () if layer.kind == "base" else partitions[partition].layers
        partitions[partition] = PartitionEntry((*below, layer))
    log_end = {t: {**manifest.log_end.get(t, {}), **ends} for t, ends in plan.log_end().items()}
    next_manifest = Manifest(
        partitions=partitions,
        log_end=log_end,
        stores_digest=stores_digest(project),
        updated_ms=now_ms(),
    )
    return Published(next_manifest, layers)


def due_for_compaction(entry: PartitionEntry, settings: Settings) -> bool:
    """Whether a chain's deltas should be folded into a new base: there are many, or they
    weigh a good fraction of the base (reads then cost more than a rewrite saves)."""
    deltas = entry.layers[1:]
    if not deltas:
        return False
    weight = sum(d.size for d in deltas)
    return (
        len(deltas) >= settings.compact_after_deltas
        or weight >= settings.compact_delta_ratio * entry.base.size
    )


def _task(
    project: Project,
    store_dir: Path,
    manifest: Manifest,
    plan: RunPlan,
    partition: int,
    staging: Path,
    compact: bool,
) -> LayerTask:
    entry = manifest.partitions.get(partition)
    kind: Kind = "delta"
    below = () if entry is None or plan.rebuild else entry.layers
    if not below or (compact and entry and due_for_compaction(entry, project.settings)):
        kind = "base"
    deltas = {
        name: sorted(str(f) for f in (staging / name / f"partition={partition}").glob("*.parquet"))
        for name in project.stores
    }
    return LayerTask(
        partition=partition,
        version=(entry.version if entry else 0) + 1,
        kind=kind,
        store_root=str(store_dir),
        below=below,
        deltas=deltas,
        positions=plan.positions(partition),
        stores=tuple(project.stores.values()),
    )


def _stage_deltas(project: Project, records: dict[str, DataFrame | None], staging: Path) -> None:
    """Write every store's delta to staging/<store>/partition=<p>/*.parquet."""
    for topic in project.topics.values():
        stores = [s for s in project.stores.values() if s.topic.name == topic.name]
        frame = records.get(topic.name)
        if not stores or frame is None:
            continue
        parsed = parse_values(frame, topic)
        if len(stores) > 1:  # parse once, not once per store
            parsed = parsed.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            for store in stores:
                delta = store_delta(store, parsed)
                delta.write.partitionBy("partition").parquet(str(staging / store.name))
        finally:
            parsed.unpersist()
