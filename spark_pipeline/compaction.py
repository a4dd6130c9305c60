"""Compaction: fold a partition's chain into a new base at the same version.

The state does not change, only how many layers hold it, so the version and positions stay;
nodes see a newer base (contracts/snapshot_file.py) and switch to it like to any version. A
compaction reads the chain as it was when it started and runs beside the micro-batches; the
deltas published meanwhile stay on top of the new base (rebase).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from pyspark.sql import SparkSession

from contracts.chains import stores as stores_of
from contracts.chains import topics as topics_of
from contracts.eventlog import now_ms
from contracts.manifest import Layer, Manifest, PartitionEntry
from contracts.project import Project
from spark_pipeline.batch import due_for_compaction
from spark_pipeline.snapshot import LayerTask, build_layer


def due(project: Project, manifest: Manifest) -> list[int]:
    """The partitions whose chains are due, longest chain first."""
    entries = manifest.partitions
    ready = [p for p, e in entries.items() if due_for_compaction(e, project.settings)]
    return sorted(ready, key=lambda p: -len(entries[p].layers))


def small(project: Project, chains: dict[int, PartitionEntry]) -> bool:
    """Whether the chains hold few enough records (at most `driver_batch_records`, every
    topic's from offset 0) to be folded in the driver, where it costs less than a Spark
    stage, and less than Spark's start when the pipeline has not needed it yet."""
    records = sum(sum(entry.position.values()) for entry in chains.values())
    return project.settings.in_driver(records)


def compact(
    project: Project, spark: SparkSession, store_dir: Path, chains: dict[int, PartitionEntry]
) -> dict[int, Layer]:
    """Write a base folding each chain, a Spark task each; returns partition -> the new base
    (not published)."""
    if not chains:
        return {}
    tasks = _tasks(project, store_dir, chains)
    folded = spark.sparkContext.parallelize(tasks, len(tasks)).map(lambda t: build_layer(t, {}))
    return dict(folded.collect())


def compact_here(
    project: Project, store_dir: Path, chains: dict[int, PartitionEntry]
) -> dict[int, Layer]:
    """The same bases as `compact`, written in this process (small chains)."""
    return dict(build_layer(task, {}) for task in _tasks(project, store_dir, chains))


def _tasks(project: Project, store_dir: Path, chains: dict[int, PartitionEntry]) -> list[LayerTask]:
    return [
        LayerTask(
            partition=partition,
            version=entry.version,
            kind="base",
            store_root=str(store_dir),
            below=entry.layers,
            positions=dict(entry.position),
            topics=tuple(project.topics[t] for t in topics_of(project, partition)),
            stores=stores_of(project, partition),
            newest_append_ms=entry.top.newest_append_ms,
        )
        for partition, entry in sorted(chains.items())
    ]


def rebase(
    manifest: Manifest, folded: dict[int, PartitionEntry], bases: dict[int, Layer]
) -> Manifest:
    """The manifest with each new base replacing the layers it folded, when the chain still
    starts with them (deltas published since stay above it); other chains are left alone."""
    partitions, stamp = dict(manifest.partitions), now_ms()
    for partition, base in bases.items():
        entry = partitions.get(partition)
        before = folded[partition].layers
        if entry is None or entry.layers[: len(before)] != before:
            continue  # rebuilt or rebased meanwhile: this base folds a chain no longer served
        published = replace(base, published_ms=stamp)
        partitions[partition] = PartitionEntry((published, *entry.layers[len(before) :]))
    return Manifest(partitions, manifest.log_end, manifest.stores_digest, stamp)
