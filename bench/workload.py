"""The reference workload: a project file with the demo's stores on a 3-node loopback cluster, a
week of bookings from spark_pipeline.demo_data, the pipeline run, and a plain Spark job over the
same log segments for comparison.

Data lives in .bench/<name>/ (gitignored): log/, snapshots/ (the pipeline's store), node1..3/
(the nodes' data dirs), stategate.toml (rewritten with fresh ports on every run) and
workload.json (parameters and timings, so --reuse can report them again).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import shutil
import statistics
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from contracts import chains, eventlog
from contracts import project as config
from contracts.manifest import read_manifest
from contracts.project import Project, Topic
from contracts.snapshot_file import FormatError
from spark_pipeline import job
from stategate.demo import PROJECT_TEMPLATE
from stategate.demo import bookings as demo_data
from stategate.launcher import free_ports

ROOT = Path(__file__).resolve().parent.parent
BENCH_DIR = ROOT / ".bench"
DEMO = PROJECT_TEMPLATE
PARTITIONS = 9
REPLICAS = 2
NODES = 3
SEED = 1
HOUR_MS = 3_600_000
WEEK_MS = 7 * 24 * HOUR_MS
END_MS = 1_767_830_400_000  # 2026-01-08T00:00:00Z: the generated week ends here
DEFAULT_CUSTOMERS = 1_000_000
DEFAULT_EVENTS = 5_000_000
_NAMES = {(DEFAULT_CUSTOMERS, DEFAULT_EVENTS): "main", (100_000, 500_000): "small"}
NAMES = tuple(_NAMES.values())
PROJECT_FILE = "stategate.toml"


@dataclass
class Workload:
    customers: int
    events: int
    root: Path
    info: dict[str, Any] = field(default_factory=dict)  # workload.json

    @classmethod
    def named(cls, customers: int, events: int) -> Workload:
        name = _NAMES.get((customers, events), f"c{customers}-e{events}")
        return cls(customers, events, BENCH_DIR / name)

    @classmethod
    def called(cls, name: str) -> Workload:
        """The workload `bench.run` builds under that name ("main", "small")."""
        return cls.named(*next(size for size, known in _NAMES.items() if known == name))

    @classmethod
    def built(cls, name: str) -> Workload | None:
        """The same, if built."""
        workload = cls.called(name)
        return workload if workload.is_built() else None

    @property
    def name(self) -> str:
        return self.root.name

    @property
    def project_path(self) -> Path:
        return self.root / PROJECT_FILE

    @property
    def info_path(self) -> Path:
        return self.root / "workload.json"

    def load_info(self) -> dict[str, Any]:
        try:
            self.info = json.loads(self.info_path.read_text())
        except (OSError, ValueError):
            self.info = {}
        return self.info

    def save_info(self) -> None:
        self.info_path.write_text(json.dumps(self.info, indent=2, default=str))

    def is_built(self) -> bool:
        """Generated with these parameters and stores, and published for every partition."""
        info = self.load_info()
        built = (info.get("customers"), info.get("events"), info.get("seed"), info.get("end_ms"))
        if built != (self.customers, self.events, SEED, END_MS):
            return False
        if info.get("stores_sha256") != _stores_sha256():
            return False
        try:
            manifest = read_manifest(self.root / "snapshots")
        except FormatError:  # written by an older version: rebuild
            return False
        return all(p in manifest.partitions for p in range(PARTITIONS))

    def write_project(
        self, ports: list[int] | None = None, file: str = PROJECT_FILE, cluster: str = ""
    ) -> Project:
        """The project file: the demo's topics and stores, 9 partitions, 3 loopback nodes.
        Another `file` beside it (its nodes' data dirs in a folder of its name) and more
        `cluster` entries serve a bench of its own on the same log and snapshots."""
        ports = ports or free_ports(NODES)
        stores = _stores_text()
        data = "" if file == PROJECT_FILE else f"{Path(file).stem}/"
        nodes = "".join(
            f'[[cluster.nodes]]\nid = "node{i}"\naddress = "127.0.0.1:{port}"\n'
            f'data_dir = "{data}node{i}"\n\n'
            for i, port in enumerate(ports, start=1)
        )
        text = (
            "# Written by bench/workload.py: the demo's stores on a 3-node loopback cluster.\n"
            '[log]\ndir = "log"\n\n[snapshots]\nstore = "snapshots"\n\n'
            f"[cluster]\npartitions = {PARTITIONS}\nreplicas = {REPLICAS}\n"
            f'secret = "bench-secret"\n{cluster}\n'
            f"{nodes}{stores}"
        )
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.root / file
        path.write_text(text)
        return config.load(path)

    def reset(self) -> None:
        if self.root.exists():
            shutil.rmtree(self.root)
        self.root.mkdir(parents=True)
        self.info = {}

    def build(self, spark: SparkSession, log: Callable[[str], None] = print) -> None:
        """From nothing: the project, the generated log, and the pipeline's first run (the
        served snapshots), timed into workload.json."""
        self.reset()
        project = self.write_project()
        size = f"{self.events:,} bookings of {self.customers:,} customers"
        log(f"generating {size} in {self.root} ...")
        seconds = self.generate(project)
        log(f"  generated in {seconds:.1f} s; running the pipeline ...")
        seconds, _ = run_pipeline(project, spark)
        self.info["pipeline_first_s"] = round(seconds, 2)
        self.save_info()
        log(f"  pipeline (first run, builds the served snapshots): {seconds:.1f} s")

    def generate(self, project: Project) -> float:
        """Append the week of bookings to the log; returns the seconds it took."""
        started = time.monotonic()
        counts = demo_data.generate(
            project, customers=self.customers, events=self.events, seed=SEED, end_ms=END_MS
        )
        seconds = time.monotonic() - started
        self.info.update(
            customers=self.customers,
            events=self.events,
            seed=SEED,
            end_ms=END_MS,
            stores_sha256=_stores_sha256(),
            records_per_partition=counts,
            generate_s=round(seconds, 2),
        )
        self.save_info()
        return seconds


def _stores_text() -> str:
    """The demo's topics and stores: the part of its project file the workload reuses."""
    demo = DEMO.read_text()
    return demo[demo.index("[[topics]]") :]


def _stores_sha256() -> str:
    return hashlib.sha256(_stores_text().encode()).hexdigest()


def with_workers(project: Project, workers: int) -> Project:
    """The project with each node on `workers` worker processes (README: Workers), as a file
    beside it."""
    return with_settings(project, f"workers-{workers}", workers=workers)


def with_settings(project: Project, name: str, **settings: int) -> Project:
    """The project with `settings` set, as a file beside it named after `name`."""
    text = project.path.read_text()
    lines = "".join(f"{key} = {value}\n" for key, value in settings.items())
    if "[settings]\n" in text:
        text = text.replace("[settings]\n", f"[settings]\n{lines}", 1)
    else:
        text = f"{text}\n[settings]\n{lines}"
    path = project.path.with_name(f"{project.path.stem}.{name}.toml")
    path.write_text(text)
    return config.load(path)


def segment_files(project: Project, topic: str = "bookings") -> list[Path]:
    return [
        path
        for partition in range(project.cluster.partitions)
        for _, path in eventlog.segments(project.log_dir, topic, partition)
    ]


def run_pipeline(project: Project, spark: SparkSession) -> tuple[float, job.RunReport]:
    """One pipeline run (job.run, notify=False); seconds and its report."""
    started = time.monotonic()
    report = job.run(project, spark, notify=False)
    return time.monotonic() - started, report


def run_pipeline_scratch(project: Project, spark: SparkSession, scratch: Path) -> float:
    """A full pipeline build into an empty scratch store (the served store stays as it is)."""
    shutil.rmtree(scratch, ignore_errors=True)
    other = dataclasses.replace(project, snapshot_store=str(scratch), snapshot_url=str(scratch))
    try:
        seconds, report = run_pipeline(other, spark)
        if len(report.versions) != chains.count(project):
            raise RuntimeError(f"scratch pipeline run published {report.versions}")
        return seconds
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def segment_schema(topic: Topic) -> T.StructType:
    keys = {"string": T.StringType(), "int": T.IntegerType(), "long": T.LongType()}
    return T.StructType(
        [
            T.StructField("offset", T.LongType()),
            T.StructField("timestamp", T.LongType()),
            T.StructField("key", keys[topic.key_type]),
            T.StructField("value", T.StringType()),
        ]
    )


def value_schema(topic: Topic) -> T.StructType:
    types = {
        "string": T.StringType(),
        "int": T.IntegerType(),
        "long": T.LongType(),
        "double": T.DoubleType(),
        "boolean": T.BooleanType(),
    }
    return T.StructType([T.StructField(n, types[t]) for n, t in topic.value.items()])


def plain_spark_job(project: Project, spark: SparkSession, out: Path) -> float:
    """The same three results computed the plain way: read every segment (or, on Kafka,
    every partition's records, a task each), parse the JSON, aggregate, write Parquet.
    Returns the seconds it took."""
    topic = project.topics["bookings"]
    shutil.rmtree(out, ignore_errors=True)
    started = time.monotonic()
    if project.kafka is not None:
        records = kafka_records(project, spark)
    else:
        files = [str(p) for p in segment_files(project)]
        records = spark.read.schema(segment_schema(topic)).parquet(*files)
    parsed = records.select(
        "offset", "timestamp", "key", F.from_json("value", value_schema(topic)).alias("v")
    ).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        values = parsed.where(F.col("v").isNotNull())
        price, seats = F.col("v.price"), F.col("v.seats")
        latest = (
            parsed.groupBy("key")
            .agg(F.max_by("v", "offset").alias("v"))
            .where(F.col("v").isNotNull())
            .select("key", "v.trip", "v.price", "v.seats")
        )
        totals = values.groupBy("key").agg(
            F.count(F.lit(1)).alias("bookings"),
            F.sum(price).alias("revenue"),
            F.sum(seats).cast("long").alias("seats"),
            F.min(price).alias("cheapest"),
            F.max(price).alias("dearest"),
        )
        ts = F.col("timestamp")
        hourly = (
            values.withColumn("window_start", ts - F.pmod(ts, F.lit(HOUR_MS)))
            .groupBy("key", "window_start")
            .agg(F.count(F.lit(1)).alias("bookings"), F.sum(price).alias("revenue"))
        )
        for name, frame in (
            ("latestBooking", latest),
            ("customerTotals", totals),
            ("hourlyRevenue", hourly),
        ):
            frame.write.mode("overwrite").parquet(str(out / name))
    finally:
        parsed.unpersist()
    seconds = time.monotonic() - started
    shutil.rmtree(out, ignore_errors=True)
    return seconds


def kafka_records(project: Project, spark: SparkSession) -> DataFrame:
    """The bookings topic's records as the file log's rows (offset, timestamp, key, value),
    read by one Spark task per partition with a plain librdkafka consumer from offset 0 to
    the partition's end: how a Spark job without stategate reads a topic when Spark's own
    Kafka source is not served for this Spark (spark-sql-kafka-0-10 stops at 4.2)."""
    from confluent_kafka import Consumer, TopicPartition

    assert project.kafka is not None
    settings = {"bootstrap.servers": project.kafka.bootstrap, **project.kafka.client}
    name = project.kafka.topic("bookings")
    probe = Consumer({**settings, "group.id": "bench-plain"})
    try:
        ends = [
            (p, probe.get_watermark_offsets(TopicPartition(name, p), 30)[1])
            for p in range(project.cluster.partitions)
        ]
    finally:
        probe.close()

    def read(ranges: Iterable[tuple[int, int]]) -> Iterable[tuple[int, int, str, str | None]]:
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer(
            {**settings, "group.id": "bench-plain", "enable.auto.commit": False,
             "isolation.level": "read_committed"}
        )  # fmt: skip
        try:
            for partition, end in ranges:
                consumer.assign([TopicPartition(name, partition, 0)])
                at = 0
                while at < end:
                    # consume waits for as many as it asks for: never past the end
                    for message in consumer.consume(min(10_000, end - at), 30):
                        if message.error() is not None:
                            raise RuntimeError(str(message.error()))
                        offset = message.offset() or 0  # a record read has one
                        at = offset + 1
                        key, value = message.key() or b"", message.value()
                        text = value.decode() if value else None
                        yield offset, message.timestamp()[1], key.decode(), text
        finally:
            consumer.close()

    rows = spark.sparkContext.parallelize(ends, len(ends)).mapPartitions(read)
    return spark.createDataFrame(rows, segment_schema(project.topics["bookings"]))


@dataclass
class SparkTimings:
    pipeline_first_s: float | None = None  # the run that built the served snapshots (cold)
    pipeline_s: list[float] = field(default_factory=list)  # warm full builds
    plain_s: list[float] = field(default_factory=list)  # warm plain jobs

    @property
    def pipeline_median(self) -> float | None:
        return statistics.median(self.pipeline_s) if self.pipeline_s else None

    @property
    def plain_median(self) -> float | None:
        return statistics.median(self.plain_s) if self.plain_s else None

    def as_dict(self) -> dict[str, Any]:
        return {
            "pipeline_first_s": self.pipeline_first_s,
            "pipeline_s": self.pipeline_s,
            "plain_s": self.plain_s,
            "pipeline_median_s": self.pipeline_median,
            "plain_median_s": self.plain_median,
        }

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> SparkTimings:
        return cls(raw.get("pipeline_first_s"), raw.get("pipeline_s", []), raw.get("plain_s", []))


def compare(
    project: Project, spark: SparkSession, runs: int, scratch: Path, log: Any = print
) -> SparkTimings:
    """Alternate plain job and full pipeline build `runs` times each on a warm JVM."""
    timings = SparkTimings()
    for i in range(runs):
        timings.plain_s.append(round(plain_spark_job(project, spark, scratch / "plain"), 2))
        log(f"  plain Spark job run {i + 1}: {timings.plain_s[-1]:.1f} s")
        seconds = run_pipeline_scratch(project, spark, scratch / "pipeline")
        timings.pipeline_s.append(round(seconds, 2))
        log(f"  pipeline full build run {i + 1}: {timings.pipeline_s[-1]:.1f} s")
    return timings


def stop_spark(spark: SparkSession) -> None:
    """Stop the session and the JVM py4j started for it."""
    from pyspark import SparkContext

    spark.stop()
    gateway = SparkContext._gateway
    if gateway is None:
        return
    proc = getattr(gateway, "proc", None)
    with contextlib.suppress(Exception):  # the JVM may already be gone
        gateway.shutdown()
    if proc is not None:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
    SparkContext._gateway = None
    SparkContext._jvm = None
