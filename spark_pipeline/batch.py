"""Publishing a batch of new records as one new layer per changed partition: a delta, or a
base when the chain starts, is rebuilt or is due for compaction. The one-shot run and every
micro-batch of the continuous pipeline publish through here.

One Spark stage does it: the records come partitioned as the log is (log_source.py: Spark
partition g holds the records of task group g's Kafka partitions), so each task holds whole
partitions' records and nothing is shuffled (a partition's records only touch its own
state); for each of its partitions it computes every store's delta and writes the
partition's layer (spark_pipeline/snapshot.py). Tasks write
straight into the snapshot store: on a real cluster it must be a file system shared by the
driver and every executor (NFS, a mounted volume). A small micro-batch is built by the same
code in the driver instead (publish_here): a stage's fixed cost exceeds its work.

Publication is idempotent, keyed by positions: a task keeps only the records at or past its
partition's published position, writes at the version above the published chain (replacing
a leftover of a run that crashed there), and nothing is visible until the manifest names it.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc
from pyspark import TaskContext
from pyspark.sql import DataFrame, SparkSession

from contracts import chains, tracing
from contracts.eventlog import APPEND_MS, now_ms
from contracts.freshness import AppendTimes, counted, newest
from contracts.manifest import Layer, Manifest, PartitionEntry, parse_layer
from contracts.project import Project, Topic
from contracts.settings import Settings
from contracts.snapshot_file import Kind
from spark_pipeline import dead_letter
from spark_pipeline.checks import BadRow
from spark_pipeline.layer_files import scratch
from spark_pipeline.log_source import ddl, members
from spark_pipeline.plan import Rebuild, Until, built_by, stores_digest
from spark_pipeline.snapshot import LayerTask, build_layer
from topics import Log
from topics.batches import RECORDS, Span

DRIVER_THREADS = os.cpu_count() or 1  # a batch in the driver builds a partition per thread

# What each task returns: its layer as JSON, how many records it read, the rows it wrote per
# store (JSON), how long it took, the bad records it left out per topic and reason (JSON).
_BUILT = pa.schema(
    [
        ("partition", pa.int32()),
        ("layer", pa.string()),
        ("records", pa.int64()),
        ("rows", pa.string()),
        ("seconds", pa.float64()),
        ("bad", pa.string()),
    ]
)
BadCounts = dict[str, dict[str, int]]  # topic -> reason -> bad records left out


class GapError(RuntimeError):
    """A partition lacks some of its chains in the snapshot store: changed by hand."""


@dataclass
class Published:
    """What one publication changed."""

    manifest: Manifest
    layers: dict[int, Layer] = field(default_factory=dict)  # partition -> its new layer
    records: int = 0  # new records published
    tasks: dict[int, Task] = field(default_factory=dict)  # what each partition's task did
    built_in: str = "executors"  # or "driver" (publish_here)

    def then(self, next_one: Published) -> Published:
        """This publication followed by `next_one`, made over its manifest."""
        return Published(
            next_one.manifest,
            {**self.layers, **next_one.layers},
            self.records + next_one.records,
            {**self.tasks, **next_one.tasks},
            self.built_in,
        )

    @property
    def bad(self) -> BadCounts:
        """The bad records the tasks left out (settings.bad_records = "skip")."""
        total: dict[str, Counter[str]] = {}
        for task in self.tasks.values():
            for topic, reasons in task.bad.items():
                total.setdefault(topic, Counter()).update(reasons)
        return {topic: dict(sorted(reasons.items())) for topic, reasons in sorted(total.items())}


@dataclass(frozen=True)
class Task:
    """What one partition's task did, as the pipeline's progress shows it."""

    records: int  # new records read
    rows: dict[str, int]  # store -> rows written into the layer
    seconds: float
    bad: BadCounts = field(default_factory=dict)


@dataclass(frozen=True)
class Batch:
    """What every task needs to know: the published chains and how to extend them."""

    project: Project
    store_root: str  # the driver's working folder; "": each executor's own (object stores)
    manifest: Manifest
    rebuild: Rebuild | None  # the stores changed: every chain gets a base (plan.py)
    compact: bool  # a due chain is folded into the new layer (else a compactor does it)
    groups: int  # the task groups the records come in (log_source.members)
    # topic -> partition -> where the executors' read stopped (the plan's ends): a partition's
    # new position, whatever its last record's offset (Kafka's offsets have gaps)
    ends: dict[str, dict[int, int]] = field(default_factory=dict)

    def root(self) -> str:
        """Where this process writes layers: the store's folder, the driver's working
        folder, or with an object store an executor's own (layer_files.scratch)."""
        url = self.project.object_store
        if self.store_root or url is None:
            return self.store_root
        return scratch(url)

    def published(self, partition: int) -> dict[str, int]:
        """How far the partition's records are published, per topic (0 before any is)."""
        return chains.position(self.project, self.manifest, partition)

    def reads_from(self, partition: int) -> dict[str, int]:
        """Where the partition's read starts, per topic: where it is published, or offset 0
        for a topic a store to build reads."""
        published = self.published(partition)
        if self.rebuild is None:
            return published
        return {t: 0 if self.rebuild.reads(t) else at for t, at in published.items()}


def publish(
    project: Project,
    spark: SparkSession,
    store_dir: Path,
    manifest: Manifest,
    records: DataFrame,
    groups: int,
    ends: dict[str, dict[int, int]],
    rebuild: Rebuild | None = None,
    compact: bool = True,
) -> Published:
    """Write a layer for each partition with new `records` (rows of log_source.SCHEMA, one
    Spark partition per task group of `groups`, read up to `ends`; records below the
    published positions are ignored), or for every chain when the stores changed or when some
    were never published; returns the new manifest, not yet written."""
    # with an object store, executors share no folder with the driver: each writes its own
    root = "" if project.object_store is not None else str(store_dir)
    batch = Batch(project, root, manifest, rebuild, compact, groups, ends)
    try:
        built = records.mapInArrow(lambda batches: _build(batch, batches), ddl(_BUILT)).collect()
    except Exception as exc:
        refused = dead_letter.refusal(exc)
        if refused is None:
            raise
        raise refused from None
    return _published(batch, [row.asDict() for row in built], "executors")


def publish_here(
    project: Project,
    store_dir: Path,
    manifest: Manifest,
    log: Log,
    until: Until,
    commit: Callable[[Published], None] | None = None,
    rebuild: Rebuild | None = None,
    compact: bool = False,
) -> Published:
    """The same publication as `publish`, built in this process for the records of `log`
    between where the reads start (Batch.reads_from) and `until`, a partition per thread of
    DRIVER_THREADS (DuckDB works outside the GIL): no Spark stage, whose fixed cost (~0.7 s for a
    stage with no work, more on a busy machine) exceeds a small batch's work. With `commit`,
    each partition's layer is handed to it as soon as it is written, in a publication of
    its own over the ones before (a partition's state depends on its own records only): one
    done early is visible without waiting for the batch's last. With `compact`, a due chain
    is folded into its new layer, as `publish` does. Returns the whole batch's publication."""
    batch = Batch(project, str(store_dir), manifest, rebuild, compact, groups=1)

    def build(partition: int) -> list[dict[str, Any]]:
        published = batch.reads_from(partition)
        ends = {topic: until(topic, partition) for topic in sorted(project.topics)}
        spans = [
            Span(partition, topic, published[topic], end)
            for topic, end in ends.items()
            if end > published[topic]
        ]
        table = pa.Table.from_batches(log.read(spans), RECORDS)
        read_ms = now_ms()  # once read: no sooner than the last append read, up to `ends`
        return [
            row
            for built in _build_partition(batch, partition, table, read_ms, ends)
            for row in built.to_pylist()
        ]

    with ThreadPoolExecutor(DRIVER_THREADS, thread_name_prefix="build") as pool:
        building = [pool.submit(build, p) for p in range(project.cluster.partitions)]
        whole = Published(manifest, built_in="driver")
        for future in as_completed(building):
            one = _published(replace(batch, manifest=whole.manifest), future.result(), "driver")
            if one.layers:
                if commit is not None:
                    commit(one)
                whole = whole.then(one)
        return whole


def _published(batch: Batch, built: list[dict[str, Any]], built_in: str) -> Published:
    """The new manifest, not yet written, for the layers the tasks `built` (rows of _BUILT)."""
    project, manifest = batch.project, batch.manifest
    layers = {row["partition"]: parse_layer(orjson.loads(row["layer"])) for row in built}
    tasks = {
        row["partition"]: Task(
            row["records"], orjson.loads(row["rows"]), row["seconds"], orjson.loads(row["bad"])
        )
        for row in built
    }
    if not layers:
        return Published(manifest, built_in=built_in)
    entries = dict(manifest.partitions)
    stamp = now_ms()
    layers = {
        p: replace(layer, published_ms=stamp, traceparent=_traced(project, p, layer))
        for p, layer in layers.items()
    }
    for chain, layer in layers.items():
        below = () if layer.kind == "base" else entries[chain].layers
        entries[chain] = PartitionEntry((*below, layer))
    published = Manifest(entries, {}, stores_digest(project), stamp, built_by(project))
    partitions = [
        p
        for p in range(project.cluster.partitions)
        if any(chain in entries for chain in chains.of_partition(project, p))
    ]
    ends = {p: chains.position(project, published, p) for p in partitions}
    count = 0
    for p in {chains.partition(project, chain) for chain in layers}:
        starts = batch.reads_from(p)
        count += sum(end - starts[t] for t, end in ends[p].items())
    log_end = {t: {p: ends[p][t] for p in partitions} for t in project.topics}
    next_manifest = replace(published, log_end=log_end)
    return Published(next_manifest, layers, count, tasks, built_in)


def _traced(project: Project, chain: int, layer: Layer) -> str | None:
    """The `traceparent` of the layer's publication span: from when its records were read
    until now, as the manifest is about to name it (None when not traced)."""
    if not tracing.on():
        return None
    attributes = {
        "stategate.partition": chains.partition(project, chain),
        "stategate.chain": chain,
        "stategate.version": layer.version,
        "stategate.layer": layer.kind,
        "stategate.position": orjson.dumps(layer.position, option=orjson.OPT_SORT_KEYS).decode(),
    }
    return tracing.finished("publish", attributes, layer.read_ms)


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


def _build(batch: Batch, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """One task: the new layers of its group's partitions, from their records."""
    context = TaskContext.get()
    assert context is not None
    group = context.partitionId()
    held = members(group, batch.project.cluster.partitions, batch.groups)
    received = list(batches)
    read_ms = now_ms()
    table = pa.Table.from_batches(received) if received else RECORDS.empty_table()
    found = set(pc.unique(table.column("partition")).to_pylist())
    if not found <= set(held):
        raise RuntimeError(f"task {group} received records of partitions {found - set(held)}")
    for partition in held:
        ends = {topic: by_p.get(partition, 0) for topic, by_p in batch.ends.items()}
        yield from _build_partition(batch, partition, table, read_ms, ends)


def _build_partition(
    batch: Batch, partition: int, group: pa.Table, read_ms: int, ends: dict[str, int]
) -> Iterator[pa.RecordBatch]:
    """The new layers of one partition: of each of its chains (contracts/chains.py) whose
    topics' positions moved, or that has none yet. A topic's new position is where its read
    stopped (`ends`), not its last record's offset + 1: Kafka's offsets have gaps (a
    transaction's markers, an aborted one's records), and those past the last record
    would otherwise be read again at every batch."""
    started = time.monotonic()
    records, appended = _fresh(batch, partition, group)
    published = batch.published(partition)
    positions = {t: max(at, ends.get(t, at)) for t, at in published.items()}
    ids = chains.of_partition(batch.project, partition)
    _check_chains(batch, partition, ids)
    bad = _BadRecords(batch, partition)
    for chain in ids:
        topics = chains.topics(batch.project, chain)
        entry = batch.manifest.partitions.get(chain)
        moved = {t: positions[t] for t in topics}
        if (
            not batch.rebuild
            and entry is not None
            and all(positions[t] == published[t] for t in topics)
        ):
            continue
        task = _layer_task(batch, chain, entry, moved, appended, read_ms)
        rows: dict[str, int] = {}
        _, layer = build_layer(task, records, rows, bad.handle)
        yield pa.RecordBatch.from_pydict(
            {
                "partition": [chain],
                "layer": [orjson.dumps(vars(layer)).decode()],
                "records": [sum(len(records.get(t, ())) for t in topics)],
                "rows": [orjson.dumps(rows).decode()],
                "seconds": [time.monotonic() - started],
                "bad": [orjson.dumps(bad.counted(topics)).decode()],
            },
            schema=_BUILT,
        )


def _check_chains(batch: Batch, partition: int, ids: list[int]) -> None:
    """A partition has all its chains in the snapshot store, or none (GapError)."""
    present = [c for c in ids if c in batch.manifest.partitions]
    if not batch.rebuild and present and present != ids:
        raise GapError(
            f"partition {partition} has chains {present} of {ids}: the snapshot store was "
            f"changed by hand; delete it to rebuild"
        )


def _layer_task(
    batch: Batch,
    chain: int,
    entry: PartitionEntry | None,
    positions: dict[str, int],
    appended: dict[str, pa.ChunkedArray],
    read_ms: int,
) -> LayerTask:
    """The next layer of `chain` over `entry`, up to `positions` of its topics: a base when
    there is none, when the stores changed, or when it is due for compaction. A chain built
    again goes on above the published one: nodes install only newer versions."""
    topics = tuple(positions)
    stores = chains.stores(batch.project, chain)
    kind: Kind = "delta"
    if (
        entry is None
        or batch.rebuild
        or (batch.compact and due_for_compaction(entry, batch.project.settings))
    ):
        kind = "base"
    from_start = frozenset(s.name for s in stores)  # a new chain: all, from its records
    if entry is not None:  # else those a change of the stores builds, none otherwise
        from_start = from_start & batch.rebuild.stores if batch.rebuild else frozenset()
    # the records of the stores kept start where the chain is, past those read from offset 0
    published = batch.published(chains.partition(batch.project, chain))
    since = {t: published[t] for t in topics if batch.rebuild and batch.rebuild.reads(t)}
    times = _by_append(appended, chains.counted(batch.project, chain))
    newest_ms = newest(_by_append(appended, topics), entry.top.newest_append_ms if entry else None)
    return LayerTask(
        partition=chain,
        version=(entry.version if entry else 0) + 1,
        kind=kind,
        store_root=batch.root(),
        store_url=batch.project.object_store,
        below=() if entry is None or len(from_start) == len(stores) else entry.layers,
        positions=positions,
        topics=tuple(batch.project.topics[t] for t in topics),
        stores=stores,
        appended=times,
        newest_append_ms=newest_ms,
        read_ms=read_ms,
        from_start=from_start,
        since=since,
    )


def _by_append(appended: dict[str, pa.ChunkedArray], topics: tuple[str, ...]) -> AppendTimes:
    """The new records of `topics` counted by append time."""
    return counted(pa.chunked_array([appended[t] for t in topics if t in appended], pa.int64()))


class _BadRecords:
    """A partition's bad records, handled once per topic (the policy of
    settings.bad_records) however many of its chains read the topic."""

    def __init__(self, batch: Batch, partition: int) -> None:
        self.batch, self.partition = batch, partition
        self.handled: set[str] = set()
        self.counts: dict[str, Counter[str]] = {}  # those not reported yet

    def handle(self, topic: Topic, found: list[BadRow]) -> None:
        if topic.name in self.handled:
            return
        self.handled.add(topic.name)
        root = Path(self.batch.root())
        counts = self.counts[topic.name] = Counter()
        dead_letter.handle(self.batch.project, root, topic, self.partition, found, counts)

    def counted(self, topics: tuple[str, ...]) -> BadCounts:
        """Those of `topics` not reported yet (a chain's row of _BUILT reports them)."""
        return {t: dict(self.counts.pop(t)) for t in topics if t in self.counts}


def _fresh(
    batch: Batch, partition: int, group: pa.Table
) -> tuple[dict[str, pa.Table], dict[str, pa.ChunkedArray]]:
    """topic -> the partition's records (of its group's) at or past where its read starts
    (Batch.reads_from), and topic -> their append times. They may start past it: a Kafka
    topic's offsets have gaps (compaction, transactions' markers and aborted records); a log
    that lost records refuses to read them (topics/)."""
    published = batch.reads_from(partition)
    table = group.filter(pc.equal(group.column("partition"), partition))
    if table.num_rows == 0:
        return {}, {}
    fresh, appended = {}, {}
    for topic, start in published.items():
        rows = table.filter(pc.equal(table.column("topic"), topic))
        rows = rows.filter(pc.greater_equal(rows.column("offset"), start))
        fresh[topic] = rows.select(["offset", "timestamp", "key", "value"])
        appended[topic] = rows.column(APPEND_MS)
    return fresh, appended
