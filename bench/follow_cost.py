"""What following the log costs when nobody reads: the CPU of each node and of the pipeline
while a trickle of bookings keeps every partition changing, and the CPU a node spends per
delta it installs.

    python -m bench.follow_cost --workload main --rate 20 --seconds 30

A node that only follows should cost next to nothing beyond its installs; this is the
figure that says whether an idle cluster (and the test suite's) pays for the format of a
delta (bench/RESULTS.md). It runs on a copy of a built workload (.bench/fresh-<name>/, as
bench.freshness), starts 3 nodes and `stategate pipeline --follow`, waits until the pipeline
follows the log, then a producer process appends `rate` bookings a second in 100 ms ticks
for `seconds`; CPU is read with psutil before and after that window (the pipeline with its
JVM and Python workers), and the deltas a node installed from the manifest's versions
before and after, times the partitions it hosts.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import psutil

from bench.freshness import (
    Producer,
    copy_workload,
    start_pipeline,
    stop_pipeline,
    wait_following,
)
from bench.procs import NodeProcesses
from bench.workload import BENCH_DIR, NAMES, Workload
from contracts.manifest import read_manifest
from contracts.project import Project


@dataclass
class FollowCost:
    workload: str
    rate: int
    seconds: float
    node_cores: dict[str, float] = field(default_factory=dict)  # CPU seconds per second
    pipeline_cores: dict[str, float] = field(default_factory=dict)  # driver, java, worker
    deltas: int = 0  # published over the window, every partition
    node_ms_per_delta: dict[str, float] = field(default_factory=dict)  # CPU per delta installed
    load: list[float] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def cpu_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


def tree_cpu_seconds(process: psutil.Process) -> dict[str, float]:
    """User and system CPU of a process and its living descendants, by executable name
    (the pipeline's driver is `python`, Spark's JVM `java`, its Python workers `python`
    too, told apart as `worker`)."""
    found: dict[str, float] = {}
    for p in [process, *process.children(recursive=True)]:
        try:
            name = "driver" if p.pid == process.pid else p.name()
            used = cpu_seconds(p)
        except psutil.NoSuchProcess:
            continue
        name = "worker" if name.startswith("python") else name
        found[name] = found.get(name, 0.0) + used
    return found


def versions(project: Project) -> dict[int, int]:
    manifest = read_manifest(Path(project.snapshot_store))
    return {p: entry.version for p, entry in manifest.partitions.items()}


def measure(
    workload: Workload, rate: int, seconds: float, logs: Path, profile: bool = False
) -> FollowCost:
    project = copy_workload(workload)
    result = FollowCost(workload.name, rate, seconds)
    nodes = NodeProcesses.gateway(project, logs / f"follow-{workload.name}")
    pipeline_log = logs / f"follow-{workload.name}-pipeline.log"
    pipeline_log.unlink(missing_ok=True)
    follow = start_pipeline(project, pipeline_log)
    try:
        nodes.start()
        nodes.wait_serving()
        wait_following(follow, pipeline_log)
        producer = Producer(project, workload.customers, rate, seconds)
        producer.start()
        begun = time.monotonic()
        time.sleep(min(5.0, seconds / 4))  # the first micro-batches past the start
        pipeline = psutil.Process(follow.pid)
        before = {n: cpu_seconds(nodes.process(n)) for n in nodes.ids}
        pipeline_before, versions_before = tree_cpu_seconds(pipeline), versions(project)
        result.load.append(os.getloadavg()[0])
        started = time.monotonic()
        if profile:
            window = seconds - (time.monotonic() - begun) - 1
            targets = {"node1": nodes.process("node1").pid, "pipeline": follow.pid}
            profiles = [
                _profile(pid, window, logs / f"follow-{name}.txt") for name, pid in targets.items()
            ]
        producer.join()
        for spy in profiles if profile else []:
            spy.wait()
        elapsed = time.monotonic() - started
        after = {n: cpu_seconds(nodes.process(n)) for n in nodes.ids}
        pipeline_after, versions_after = tree_cpu_seconds(pipeline), versions(project)
        result.load.append(os.getloadavg()[0])
        grown = {p: v - versions_before.get(p, v) for p, v in versions_after.items()}
        result.deltas = sum(grown.values())
        result.pipeline_cores = {
            name: round((used - pipeline_before.get(name, 0.0)) / elapsed, 3)
            for name, used in pipeline_after.items()
        }
        for node in nodes.ids:
            used = after[node] - before[node]
            result.node_cores[node] = round(used / elapsed, 3)
            hosted = [p for p, ids in project.cluster.replica_map.items() if node in ids]
            installed = sum(grown.get(p, 0) for p in hosted)
            if installed:
                result.node_ms_per_delta[node] = round(1000 * used / installed, 1)
    finally:
        stop_pipeline(follow)
        nodes.processes_.stop_all()
    return result


def _profile(pid: int, seconds: float, out: Path) -> subprocess.Popen[bytes]:
    """py-spy's samples of a process for `seconds`, as collapsed stacks in `out`."""
    command = [
        str(Path(sys.executable).with_name("py-spy")),
        "record",
        "-p",
        str(pid),
        "-d",
        str(int(seconds)),
        "-r",
        "100",
    ]
    command += ["-f", "raw", "-o", str(out)]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", default="main", choices=NAMES)
    parser.add_argument("--rate", type=int, default=20, help="events per second")
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument(
        "--profile",
        action="store_true",
        help="py-spy node1 and the pipeline: .bench/logs/follow-*.txt",
    )
    args = parser.parse_args(argv)
    workload = Workload.built(args.workload)
    if workload is None:
        print(f"build the {args.workload} workload first: python -m bench.run", file=sys.stderr)
        return 2
    result = measure(workload, args.rate, args.seconds, BENCH_DIR / "logs", args.profile)
    print(orjson.dumps(result.as_dict(), option=orjson.OPT_INDENT_2).decode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
