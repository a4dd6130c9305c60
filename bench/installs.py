"""What the pipeline pays to write one delta and a node to install it, along a chain.

- Writing: the delta built from the base and the rows the worker kept warm
  (spark_pipeline/kept.py, what the pipeline does), against the same delta built by a worker
  that kept nothing (a fresh worker reads every layer: its cost grows with the chain).
- Installing: the delta read into a level of its own (what a node does now), the levels
  merged after it (`settle`, off the install's path), and, measured in the same run on the
  same levels, merging the whole overlay at every delta (what a node did before: its cost
  grows with the chain until a compaction).

    python -m bench.installs --workload main --deltas 24 --records 400

It copies one partition of a built workload (log and base) to a folder of its own, appends
`records` bookings a round to it, writes each round's delta with the pipeline's own writer
(spark_pipeline/snapshot.py, without Spark) and installs it in a node's catalog in-process.
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from bench.workload import NAMES, Workload
from contracts import chains, eventlog
from contracts.eventlog import Record
from contracts.manifest import Layer, read_manifest
from contracts.partitioner import partition_for
from contracts.project import Project, load
from contracts.snapshot_file import partition_folder, relative_path
from gateway.storage.catalog.layers import LocalLayer, merged
from gateway.storage.catalog.snapshots import SnapshotCatalog
from spark_pipeline import kept as kept_rows
from spark_pipeline.snapshot import LayerTask, build_layer
from stategate.demo.bookings import _fares, _values

PARTITION = 0
TOPIC = "bookings"


@dataclass
class Installs:
    deltas: int
    records: int  # appended per delta
    install_ms: list[float] = field(default_factory=list)  # a delta as a level of its own
    settle_ms: list[float] = field(default_factory=list)  # the merges after it
    whole_ms: list[float] = field(default_factory=list)  # the whole overlay merged at it
    levels: list[int] = field(default_factory=list)  # after settling
    write_ms: list[float] = field(default_factory=list)  # the delta written, warm
    cold_write_ms: list[float] = field(default_factory=list)  # the same, by a fresh worker

    @staticmethod
    def halves(values: list[float]) -> tuple[float, float]:
        """The medians of the chain's first and second half of deltas."""
        half = len(values) // 2
        return (
            round(statistics.median(values[:half]), 1),
            round(statistics.median(values[half:]), 1),
        )

    def as_dict(self) -> dict[str, object]:
        level, whole = self.halves(self.install_ms), self.halves(self.whole_ms)
        write, cold = self.halves(self.write_ms), self.halves(self.cold_write_ms)
        return {
            "deltas": self.deltas,
            "records_per_delta": self.records,
            "write_ms": {"first_half": write[0], "second_half": write[1]},
            "cold_write_ms": {"first_half": cold[0], "second_half": cold[1]},
            "level_install_ms": {"first_half": level[0], "second_half": level[1]},
            "settle_ms": {"mean": round(statistics.fmean(self.settle_ms), 1)},
            "whole_overlay_ms": {"first_half": whole[0], "second_half": whole[1]},
            "max_levels": max(self.levels),
        }


def measure(workload: Workload, deltas: int, records: int) -> Installs:
    with tempfile.TemporaryDirectory(prefix="stategate-installs-") as folder:
        root = Path(folder)
        project = _copy(workload, root)
        catalog = SnapshotCatalog(root / "node", project, 1, "1GB")
        try:
            return _run(project, catalog, deltas, records)
        finally:
            catalog.close()


def _copy(workload: Workload, root: Path) -> Project:
    """The workload's project with one partition's log and chain copied under `root`."""
    project = load(workload.project_path, serving=False)
    shutil.copy(workload.project_path, root / workload.project_path.name)
    log = eventlog.partition_dir(project.log_dir, TOPIC, PARTITION)
    shutil.copytree(log, eventlog.partition_dir(root / "log", TOPIC, PARTITION))
    store = Path(project.snapshot_url)
    folder = partition_folder(PARTITION)
    shutil.copytree(store / folder, root / "snapshots" / folder)
    shutil.copy(store / "manifest.json", root / "snapshots" / "manifest.json")
    return load(root / workload.project_path.name, serving=False)


def _run(project: Project, catalog: SnapshotCatalog, deltas: int, records: int) -> Installs:
    entry = read_manifest(Path(project.snapshot_url)).partitions[PARTITION]
    chain: list[Layer] = list(entry.layers)
    catalog.install(PARTITION, [_local(project, catalog, layer) for layer in chain])
    rng = random.Random(5)
    fares = _fares(rng)
    customers = 1_000_000
    measured = Installs(deltas, records)
    stores = list(chains.stores(project, PARTITION))
    hub = duckdb.connect()  # the old way's, apart from the node's
    for _ in range(deltas):
        chain.append(_next_delta(project, chain, rng, fares, customers, records, measured))
        local = [_local(project, catalog, layer) for layer in chain]
        started = time.perf_counter()
        snapshot = catalog.install(PARTITION, local)
        measured.install_ms.append((time.perf_counter() - started) * 1000)
        overlay = snapshot.overlay if snapshot else None
        assert overlay is not None
        started = time.perf_counter()  # the old way: the whole overlay, merged and installed
        whole = merged("whole", overlay.levels, stores)
        whole.index(stores)
        for store in stores:  # into DuckDB, as installs once copied what no lookup serves
            if store.name not in whole.tables:
                whole.copy(hub.cursor(), store.name)
        measured.whole_ms.append((time.perf_counter() - started) * 1000)
        whole.drop(hub)
        started = time.perf_counter()
        catalog.settle()
        measured.settle_ms.append((time.perf_counter() - started) * 1000)
        settled = catalog.get(PARTITION)
        assert settled is not None and settled.overlay is not None
        measured.levels.append(len(settled.overlay.levels))
    return measured


def _next_delta(
    project: Project,
    chain: list[Layer],
    rng: random.Random,
    fares: list[tuple[str, float]],
    customers: int,
    records: int,
    measured: Installs,
) -> Layer:
    """Append `records` bookings of the partition's customers and write their delta: first
    as a worker that kept nothing does, then (over it) as the warm worker does."""
    topic = project.topics[TOPIC]
    partitions = project.cluster.partitions
    stamp = int(time.time() * 1000)
    batch: list[Record] = []
    while len(batch) < records:
        key = f"C{rng.randrange(customers):06d}"
        if partition_for(key, "string", partitions) == PARTITION:
            batch.append(Record(key, _values(rng, fares, 1)[0], stamp))
    start = chain[-1].position[TOPIC]
    eventlog.append(project.log_dir, topic, PARTITION, batch)
    paths = eventlog.segments_from(project.log_dir, TOPIC, PARTITION, start)
    table = pa.concat_tables([eventlog.read_segment(p) for p in paths])
    table = table.filter(pc.greater_equal(table.column("offset"), start))
    fresh = table.select(["offset", "timestamp", "key", "value"])
    task = LayerTask(
        partition=PARTITION,
        version=chain[-1].version + 1,
        kind="delta",
        store_root=project.snapshot_url,
        below=tuple(chain),
        positions={TOPIC: start + len(fresh)},
        topics=tuple(project.topics.values()),
        stores=chains.stores(project, PARTITION),
    )
    kept = kept_rows.kept(task.store_root, PARTITION)
    kept_rows.forget()
    started = time.perf_counter()
    build_layer(task, {TOPIC: fresh})
    measured.cold_write_ms.append((time.perf_counter() - started) * 1000)
    if kept is not None:
        kept_rows.keep(task.store_root, PARTITION, kept)
    started = time.perf_counter()
    _, layer = build_layer(task, {TOPIC: fresh})
    measured.write_ms.append((time.perf_counter() - started) * 1000)
    return layer


def _local(project: Project, catalog: SnapshotCatalog, layer: Layer) -> LocalLayer:
    """The layer in the node's folder (copied there once), as the catalog takes it."""
    path = catalog.folder / relative_path(PARTITION, layer.version, layer.kind)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(Path(project.snapshot_url) / layer.path, path)
    return LocalLayer(layer.version, layer.kind, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", default="main", choices=NAMES)
    parser.add_argument("--deltas", type=int, default=24)
    parser.add_argument("--records", type=int, default=400, help="bookings per delta")
    args = parser.parse_args(argv)
    workload = Workload.built(args.workload)
    if workload is None:
        parser.error(f"build the {args.workload} workload first: python -m bench.run")
    measured = measure(workload, args.deltas, args.records)
    for i, (a, w, s, n, wr, c) in enumerate(
        zip(
            measured.install_ms,
            measured.whole_ms,
            measured.settle_ms,
            measured.levels,
            measured.write_ms,
            measured.cold_write_ms,
            strict=True,
        )
    ):
        print(
            f"delta {i + 1}: written {wr:.1f} ms (fresh worker {c:.1f} ms); installed: level "
            f"{a:.1f} ms, whole overlay {w:.1f} ms, settle {s:.1f} ms, {n} levels"
        )
    print(measured.as_dict())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
