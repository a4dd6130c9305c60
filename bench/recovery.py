"""Recovery: a `kill -9` of the continuous pipeline while a producer appends, an immediate
restart, and how long until every node serves the state as of the kill (issue 25's target:
30 s).

    python -m bench.recovery --workload main --rate 1000

On a copy of a built workload (.bench/recover-<name>/), 3 nodes and the pipeline on the
same cores as the producer. "The state as of the kill" is the log's end when the pipeline
was killed: every node must serve each partition it hosts at or past it, as its
/internal/status says. The producer keeps appending throughout, as producers would.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson

from bench.freshness import Producer, copy_workload, start_pipeline, wait_following
from bench.procs import NodeProcesses
from bench.workload import BENCH_DIR, NAMES, Workload
from contracts import eventlog
from contracts.cluster_secret import secret_headers
from contracts.project import Project

BEFORE_KILL_S = 20.0  # the producer's head start: the pipeline is mid-stream when killed
TIMEOUT_S = 180.0
POLL_S = 0.2
FIRST = b"micro-batch "  # the line of a restart's first publication


@dataclass
class Recovery:
    workload: str
    rate: int
    killed_at_records: int = 0  # the log's records past the copy's when the pipeline died
    recovered_s: float | None = None  # kill -> every node at the kill's positions
    # kill -> the restarted pipeline's first publication: its first micro-batch (in the
    # driver, without starting Spark, when at most driver_batch_records are behind)
    restarted_s: float | None = None
    load: list[float] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def log_end(project: Project) -> dict[int, int]:
    """Partition -> the bookings log's end offset now."""
    return {
        p: eventlog.end_offset(project.log_dir, "bookings", p)
        for p in range(project.cluster.partitions)
    }


def behind(project: Project, client: httpx.Client, ends: dict[int, int]) -> list[str]:
    """The hosted partitions some node serves short of `ends` ("node3 p4"); [] when none."""
    short = []
    headers = secret_headers(project.cluster.secret)
    for node in project.cluster.nodes:
        try:
            status = client.get(f"{node.url}/internal/status", headers=headers).json()
        except httpx.HTTPError:
            return [f"{node.id} unreachable"]
        for p in project.cluster.hosted_by(node.id):
            served = status["partitions"].get(str(p))
            if served is None or served["offsets"].get("bookings", 0) < ends[p]:
                short.append(f"{node.id} p{p}")
    return short


def measure(workload: Workload, rate: int, logs: Path) -> Recovery:
    project = copy_workload(workload, prefix="recover")
    result = Recovery(workload.name, rate)
    nodes = NodeProcesses.gateway(project, logs / f"recover-{workload.name}")
    first_log = logs / f"recover-{workload.name}-pipeline.log"
    again_log = logs / f"recover-{workload.name}-pipeline-again.log"
    for log in (first_log, again_log):
        log.unlink(missing_ok=True)
    started = log_end(project)
    pipeline = start_pipeline(project, first_log)
    producer = Producer(project, workload.customers, rate, BEFORE_KILL_S + TIMEOUT_S)
    again = None
    try:
        nodes.start()
        nodes.wait_serving()
        wait_following(pipeline, first_log)
        result.load.append(os.getloadavg()[0])
        producer.start()
        time.sleep(BEFORE_KILL_S)
        os.kill(pipeline.pid, signal.SIGKILL)
        killed = time.monotonic()
        ends = log_end(project)
        pipeline.wait()
        again = start_pipeline(project, again_log)
        result.killed_at_records = sum(ends.values()) - sum(started.values())
        with httpx.Client(timeout=5) as client:
            while time.monotonic() - killed < TIMEOUT_S:
                published = again_log.read_bytes()
                if result.restarted_s is None and FIRST in published:
                    result.restarted_s = round(time.monotonic() - killed, 2)
                if not behind(project, client, ends):
                    result.recovered_s = round(time.monotonic() - killed, 2)
                    break
                time.sleep(POLL_S)
        result.load.append(os.getloadavg()[0])
    finally:
        producer.stop()
        for process in (pipeline, again):
            if process is not None and process.poll() is None:
                process.terminate()
                process.wait(60)
        nodes.stop()
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", default="main", choices=NAMES)
    parser.add_argument("--rate", type=int, default=1000, help="events per second")
    args = parser.parse_args(argv)
    workload = Workload.built(args.workload)
    if workload is None:
        print(f"build the {args.workload} workload first: python -m bench.run", file=sys.stderr)
        return 2
    result = measure(workload, args.rate, BENCH_DIR / "logs")
    print(orjson.dumps(result.as_dict(), option=orjson.OPT_INDENT_2).decode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
