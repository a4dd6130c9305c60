"""Compaction: fold a partition's chain into a new base at the same version.

The state does not change, only how many layers hold it, so the version and positions stay;
nodes see a newer base (contracts/snapshot_file.py) and switch to it like to any version. A
compaction reads the chain as it was when it started and runs beside the micro-batches; the
deltas published meanwhile stay on top of the new base (rebase).

It runs in the pipeline's driver, as RocksDB compacts inside a Kafka Streams instance: it
reads layers, not the log, and one chain at a time, so a Spark task would do the same work
after Spark's start (~20 CPU-seconds, when only compaction needs it) and its Python worker's.
Folding partition 0 of the 1M workload (a 21 MB base) takes 1.1-1.9 s in the driver.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

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


def compact(
    project: Project, store_dir: Path, chains: dict[int, PartitionEntry]
) -> dict[int, Layer]:
    """Write a base folding each chain; returns partition -> the new base (not published)."""
    return dict(build_layer(task, {}) for task in _tasks(project, store_dir, chains))


def _tasks(project: Project, store_dir: Path, chains: dict[int, PartitionEntry]) -> list[LayerTask]:
    return [
        LayerTask(
            partition=partition,
            version=entry.version,
            kind="base",
            store_root=str(store_dir),
            store_url=project.object_store,
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
    return replace(manifest, partitions=partitions, updated_ms=stamp)
