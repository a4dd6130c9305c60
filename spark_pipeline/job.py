"""The pipeline job: read the log's new records, compute each store's delta with Spark, merge it
into the previous snapshot of every changed partition, publish the manifest, tell the nodes.

    spark-submit spark_pipeline/job.py --config path/to/stategate.toml

Snapshots are built by Spark tasks that write straight into the snapshot store, and the
deltas are staged there too: in local mode every task sees the same disk; on a real cluster
the snapshot store must be a file system shared by the driver and every executor (NFS, a
mounted volume), or tasks would leave their files on whichever machine ran them.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import shutil
import sys
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

# spark-submit of this file from a source checkout: make the packages importable here and in
# the Python workers.
_CHECKOUT = (
    None if importlib.util.find_spec("contracts") else str(Path(__file__).resolve().parents[1])
)
if _CHECKOUT:
    sys.path.insert(0, _CHECKOUT)

import orjson  # noqa: E402
from pyspark import StorageLevel  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402

from contracts.durable import locked  # noqa: E402
from contracts.eventlog import now_ms  # noqa: E402
from contracts.manifest import Manifest, PartitionEntry, read_manifest, write_manifest  # noqa: E402
from contracts.project import Project, load  # noqa: E402
from spark_pipeline.plan import RunPlan, plan_run, stores_digest  # noqa: E402
from spark_pipeline.publish import notify_nodes, prune, versions_on_disk  # noqa: E402
from spark_pipeline.session import spark_session  # noqa: E402
from spark_pipeline.snapshot import SnapshotTask, build_snapshot  # noqa: E402
from spark_pipeline.source import read_records  # noqa: E402
from spark_pipeline.stores import parse_values, store_delta  # noqa: E402


@dataclass
class RunReport:
    """What one run did."""

    records: int  # new records read
    rebuild: bool  # the stores changed, so every partition was rebuilt from offset 0
    versions: dict[int, tuple[int | None, int]] = field(default_factory=dict)  # p -> old, new
    notify: dict[str, str] = field(default_factory=dict)  # node -> "ok" or what went wrong
    seconds: float = 0.0

    def to_json(self) -> bytes:
        body = {
            **asdict(self),
            "versions": {p: {"old": o, "new": n} for p, (o, n) in sorted(self.versions.items())},
        }
        return orjson.dumps(body, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS)


def run(project: Project, spark: SparkSession, notify: bool = True) -> RunReport:
    """One incremental run; returns what it changed (partitions not listed kept their version)."""
    started = time.monotonic()
    store_dir = snapshot_dir(project)
    topics = {s.topic.name for s in project.stores.values()}
    with locked(store_dir):
        manifest = read_manifest(store_dir)
        plan = plan_run(project, manifest)
        report = RunReport(records=plan.records(topics), rebuild=plan.rebuild)
        if plan.changed:
            staging = store_dir / ".staging" / f"{now_ms()}-{uuid.uuid4().hex[:8]}"
            try:
                _stage_deltas(spark, project, plan, staging)
                tasks = _snapshot_tasks(project, manifest, plan, store_dir, staging)
                built = spark.sparkContext.parallelize(tasks, len(tasks))
                entries = built.map(build_snapshot).collect()
            finally:
                shutil.rmtree(staging, ignore_errors=True)
                with contextlib.suppress(OSError):
                    staging.parent.rmdir()
            for partition, entry in entries:
                old = manifest.partitions.get(partition)
                report.versions[partition] = (old.version if old else None, entry.version)
            manifest = _next_manifest(project, manifest, plan, dict(entries))
            write_manifest(store_dir, manifest)
            prune(store_dir, manifest)
    if plan.changed and notify:
        report.notify = notify_nodes(project, set(plan.changed))
    report.seconds = round(time.monotonic() - started, 3)
    return report


def snapshot_dir(project: Project) -> Path:
    if "://" in project.snapshot_store:
        raise ValueError(f"the pipeline writes to a folder, not {project.snapshot_store}")
    return Path(project.snapshot_store)


def _stage_deltas(spark: SparkSession, project: Project, plan: RunPlan, staging: Path) -> None:
    """Write every store's delta to staging/<store>/partition=<p>/*.parquet."""
    for topic in project.topics.values():
        stores = [s for s in project.stores.values() if s.topic.name == topic.name]
        if not stores:
            continue
        records = read_records(spark, project.log_dir, topic, plan.ranges[topic.name])
        if records is None:
            continue
        parsed = parse_values(records, topic)
        if len(stores) > 1:  # parse once, not once per store
            parsed = parsed.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            for store in stores:
                delta = store_delta(store, parsed)
                delta.write.partitionBy("partition").parquet(str(staging / store.name))
        finally:
            parsed.unpersist()


def _snapshot_tasks(
    project: Project, manifest: Manifest, plan: RunPlan, store_dir: Path, staging: Path
) -> list[SnapshotTask]:
    tasks = []
    for partition in plan.changed:
        entry = manifest.partitions.get(partition)
        latest = max([entry.version if entry else 0, *versions_on_disk(store_dir, partition)])
        deltas = {
            name: sorted(
                str(f) for f in (staging / name / f"partition={partition}").glob("*.parquet")
            )
            for name in project.stores
        }
        tasks.append(
            SnapshotTask(
                partition=partition,
                version=latest + 1,
                store_root=str(store_dir),
                previous=None if plan.rebuild or entry is None else entry.path,
                deltas=deltas,
                positions=plan.positions(partition),
                stores=tuple(project.stores.values()),
            )
        )
    return tasks


def _next_manifest(
    project: Project, manifest: Manifest, plan: RunPlan, entries: dict[int, PartitionEntry]
) -> Manifest:
    return Manifest(
        partitions={**manifest.partitions, **entries},
        log_end=plan.log_end(),
        stores_digest=stores_digest(project),
        updated_ms=now_ms(),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build and publish the state snapshots.")
    parser.add_argument("--config", required=True, help="the project file (stategate.toml)")
    parser.add_argument("--master", help="Spark master; default: spark-submit's, else local[2]")
    parser.add_argument("--no-notify", action="store_true", help="do not tell the nodes")
    args = parser.parse_args(argv)
    project = load(args.config)
    conf = {"spark.executorEnv.PYTHONPATH": _CHECKOUT} if _CHECKOUT else None
    report = run(project, spark_session(args.master, conf), notify=not args.no_notify)
    print(report.to_json().decode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
