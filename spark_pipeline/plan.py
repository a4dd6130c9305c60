"""What a run must do: the offset range to read per topic and partition, and which partitions
get a new snapshot version."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable
from dataclasses import dataclass

import orjson

from contracts import chains
from contracts.manifest import Built, Manifest
from contracts.project import Project
from contracts.snapshot_file import declaration, rows_as, shape
from topics import Log

OffsetRange = tuple[int, int]  # [start, end)
# Where a partition's read of a topic stops, asked when the partition's task starts.
Until = Callable[[str, int], int]


class LogBehindError(RuntimeError):
    """The log ends before an offset already published: it was reset under the snapshot store."""


@dataclass(frozen=True)
class Rebuild:
    """The stores changed: every chain gets a new base, in which the `stores` not built yet
    (new, or declared otherwise) are built from each partition's first record and every
    other store is folded from its chain, as a compaction does."""

    stores: frozenset[str]  # built from offset 0
    topics: frozenset[str]  # read from offset 0: those `stores` read

    def reads(self, topic: str) -> bool:
        return topic in self.topics


@dataclass(frozen=True)
class RunPlan:
    ranges: dict[str, dict[int, OffsetRange]]  # topic -> partition -> new records
    changed: list[int]  # partitions that get a new version
    rebuild: Rebuild | None  # None: the published chains hold the declared stores

    def records(self, topics: set[str]) -> int:
        return sum(e - s for t in topics for s, e in self.ranges[t].values())

    @property
    def ends(self) -> dict[str, dict[int, int]]:
        """topic -> partition -> where the read stops."""
        return {t: {p: end for p, (_, end) in by_p.items()} for t, by_p in self.ranges.items()}

    def until(self) -> Until:
        """Every read stopping at the plan's end."""
        ends = self.ends
        return lambda topic, partition: ends[topic][partition]

    def until_now(self, log: Log, spare: int) -> Until:
        """Every read stopping at the log's end when the partition's task starts, at most
        `spare` records past the plan's end: a record appended while the batch builds the
        partitions before it is read at once, not a whole batch later."""
        ends = self.ends

        def until(topic: str, partition: int) -> int:
            planned = ends[topic][partition]
            return min(log.end_offset(topic, partition), planned + spare)

        return until

    def capped(self, budget: int) -> RunPlan:
        """The plan reading at most `budget` records, shared by the partitions in proportion
        to what each has waiting (every partition with records moves)."""
        total = self.records(set(self.ranges))
        if total <= budget:
            return self
        ranges = {
            t: {
                p: (s, e if e == s else s + max(1, (e - s) * budget // total))
                for p, (s, e) in by_p.items()
            }
            for t, by_p in self.ranges.items()
        }
        return dataclasses.replace(self, ranges=ranges)


def plan_run(project: Project, manifest: Manifest, log: Log) -> RunPlan:
    """Read from each partition's published position to the log's end now (from offset 0
    for a topic a store to build reads). A partition gets a new layer when it has new
    records, has never been published, or the stores changed."""
    published = manifest.partitions
    rebuild = to_rebuild(project, manifest)
    ranges: dict[str, dict[int, OffsetRange]] = {}
    starts = {p: chains.position(project, manifest, p) for p in range(project.cluster.partitions)}
    ends = log.end_offsets()
    for topic in project.topics:
        ranges[topic] = {}
        for partition in range(project.cluster.partitions):
            entry = published.get(partition)
            start = 0 if rebuild and rebuild.reads(topic) else starts[partition][topic]
            end = ends[topic][partition]
            if end < start:
                raise LogBehindError(
                    f"{topic}-{partition} ends at offset {end} but snapshot "
                    f"v{entry and entry.version} reflects offset {start}: the log was reset; "
                    f"delete {project.snapshot_store} to rebuild it"
                )
            ranges[topic][partition] = (start, end)
    changed = [
        p
        for p in range(project.cluster.partitions)
        if rebuild or p not in published or any(by_p[p][1] > by_p[p][0] for by_p in ranges.values())
    ]
    return RunPlan(ranges=ranges, changed=changed, rebuild=rebuild)


def stores_digest(project: Project) -> str:
    """Fingerprint of what the snapshots hold; a change means old state cannot be extended."""
    held = {
        "partitions": project.cluster.partitions,
        "stores": [shape(s) for s in project.stores.values()],
    }
    return hashlib.sha256(orjson.dumps(held, option=orjson.OPT_SORT_KEYS)).hexdigest()


def built_by(project: Project) -> Built:
    """What chains built by the project's declarations hold (the manifest's `built`)."""
    every = chains.every_store(project)
    stores = {store.name: rows_as(store) for store in every}
    declarations = {store.name: declaration(store) for store in every}
    return Built(project.cluster.partitions, stores, declarations)


def to_rebuild(project: Project, manifest: Manifest) -> Rebuild | None:
    """What a change of the stores since the published chains asks (None when there was
    none): the new and changed stores built from offset 0, or every store when the
    partitions changed or the manifest does not say what built its chains."""
    if not manifest.partitions or manifest.stores_digest == stores_digest(project):
        return None
    now = built_by(project)
    stores = frozenset(now.stores) if manifest.built is None else manifest.built.changed(now)
    topics = {s.topic.name for s in chains.every_store(project) if s.name in stores}
    return Rebuild(stores, frozenset(topics))
