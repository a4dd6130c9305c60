"""A full rebuild from Kafka (issue 49): the pipeline building every store of a built
workload from its topics on a broker, on Spark, against a plain Spark job reading the same
topic (a task per partition, librdkafka, as the pipeline's tasks read) and computing the same
three results (latest booking, totals, hourly windows) into Parquet.

    python -m bench.rebuild --workload main --reuse --runs 2

The workload's log is copied into a broker of its own first (bench/on_kafka.py, as
`bench.freshness --kafka` does); then the two alternate on one warm Spark session, the
pipeline building into an empty scratch store each time (bench/workload.py `compare`).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

from bench.elastic import built
from bench.freshness import copy_workload
from bench.on_kafka import onto_kafka
from bench.workload import BENCH_DIR, NAMES, compare, stop_spark
from spark_pipeline.spark import spark_session
from stategate.broker import Broker


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.rebuild")
    parser.add_argument("--workload", default="main", choices=NAMES)
    parser.add_argument("--reuse", action="store_true", help="reuse the workload when built")
    parser.add_argument("--runs", type=int, default=2, help="of each, alternating")
    args = parser.parse_args(argv)
    workload = built(args.workload, args.reuse)
    project = copy_workload(workload, prefix="rebuild")
    broker = Broker(project.path.parent / "kafka")
    broker.start()
    try:
        project = onto_kafka(project, broker.bootstrap)
        print(f"{workload.events:,} events on Kafka; load {os.getloadavg()[0]:.2f}", flush=True)
        spark = spark_session(None)
        try:
            timings = compare(project, spark, args.runs, BENCH_DIR / "rebuild-scratch")
        finally:
            stop_spark(spark)
    finally:
        broker.stop()
    load = os.getloadavg()[0]
    plain, pipeline = statistics.median(timings.plain_s), statistics.median(timings.pipeline_s)
    print(f"\nload {load:.2f} at the end")
    print("| full build from Kafka | plain Spark job | stategate pipeline | ratio | target |")
    print("| --- | --- | --- | --- | --- |")
    print(
        f"| {workload.events:,} events, median of {args.runs}, s | {plain:.1f} | {pipeline:.1f} "
        f"| {pipeline / plain:.2f}x | <= 1.5x |"
    )
    print(f"runs: plain {timings.plain_s}, pipeline {timings.pipeline_s}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
