"""The one-shot pipeline job: read the log's records since the published positions, publish
them as one new layer per changed partition (spark_pipeline/batch.py), tell the nodes.

    spark-submit spark_pipeline/job.py --config path/to/stategate.toml

The continuous pipeline (spark_pipeline/stream.py) publishes the same way, micro-batch by
micro-batch.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
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
from pyspark.sql import SparkSession  # noqa: E402

from contracts.durable import locked  # noqa: E402
from contracts.manifest import Layer, PartitionEntry, read_manifest, write_manifest  # noqa: E402
from contracts.project import Project, load  # noqa: E402
from spark_pipeline.batch import Published, publish  # noqa: E402
from spark_pipeline.log_source import read_log  # noqa: E402
from spark_pipeline.plan import plan_run  # noqa: E402
from spark_pipeline.publish import notify_nodes, prune  # noqa: E402
from spark_pipeline.session import spark_session  # noqa: E402


@dataclass
class RunReport:
    """What one run did."""

    records: int  # new records read
    rebuild: bool  # the stores changed, so every partition was rebuilt from offset 0
    versions: dict[int, tuple[int | None, int]] = field(default_factory=dict)  # p -> old, new
    layers: dict[int, str] = field(default_factory=dict)  # p -> "base" or "delta"
    notify: dict[str, str] = field(default_factory=dict)  # node -> "ok" or what went wrong
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


def run(project: Project, spark: SparkSession, notify: bool = True) -> RunReport:
    """One incremental run; returns what it changed (partitions not listed kept their version)."""
    started = time.monotonic()
    store_dir = snapshot_dir(project)
    topics = {s.topic.name for s in project.stores.values()}
    with locked(store_dir):
        manifest = read_manifest(store_dir)
        plan = plan_run(project, manifest)
        report = RunReport(records=plan.records(topics), rebuild=plan.rebuild)
        published = Published(manifest)
        if plan.changed:
            records = read_log(spark, project, plan)
            published = publish(project, spark, store_dir, manifest, records, plan.rebuild)
        if published.layers:
            write_manifest(store_dir, published.manifest)
            prune(store_dir, published.manifest)
        report.add(manifest.partitions, published.layers)
    if published.layers and notify:
        report.notify = notify_nodes(project, set(published.layers))
    report.seconds = round(time.monotonic() - started, 3)
    return report


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
    conf = {"spark.executorEnv.PYTHONPATH": _CHECKOUT} if _CHECKOUT else None
    report = run(project, spark_session(args.master, conf), notify=not args.no_notify)
    print(report.to_json().decode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
