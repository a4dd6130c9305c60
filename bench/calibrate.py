"""Calibrate the cost model: the seconds one cost unit takes, per query kind, on this machine.

For each kind, requests of increasing cost are sent alone to node1 of a built workload (raw
client, one at a time); a request's time is the node's own (the delta of its
stategate_graphql_request_seconds sum for the kind's operation name), the median of REPEATS.
Costs are raw values (rows x width x aliases, before any weight), so the fit does not depend
on the weights it is used to set. The fit is least squares through the origin: seconds =
rate x values (a request's fixed part is a few ms, nothing at these sizes). Each kind selects
one value per row, the most rows a cost admits. Then node1's RSS when started, before and
right after a burst of the slowest request measured that the cost model admits with its
weights now, and a minute later.

    python -m bench.calibrate --workload small
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import re
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import orjson

from bench.floor import Floor
from bench.procs import NodeProcesses
from bench.queries import iso
from bench.rawhttp import Connection
from bench.workload import (
    DEFAULT_CUSTOMERS,
    DEFAULT_EVENTS,
    END_MS,
    HOUR_MS,
    WEEK_MS,
    Workload,
    run_pipeline,
    stop_spark,
)
from contracts.project import Project, load
from resolvers.schema.costs import PAGE_ROW_WEIGHT

NODE = "node1"
REPEATS = 3
STOP_S = 6.0  # past this median a kind's larger sizes are not sent
REST_S = 60.0  # the wait before the last RSS figure
DEADLINE_SHARE = 0.5  # the costliest admitted request should take at most this of the deadline
BURST = 3  # heaviest requests in the RSS burst
SIZES = {"main": (DEFAULT_CUSTOMERS, DEFAULT_EVENTS),
         "small": (DEFAULT_CUSTOMERS // 10, DEFAULT_EVENTS // 10)}  # fmt: skip
UNWEIGHED = 10**9  # max_request_cost of the measured nodes: every size runs, whatever its weight
PAGE = 1000  # max_page_size: a page's rows
BATCH = 1000  # keys of one batch field


@dataclass(frozen=True)
class Kind:
    name: str
    operation: str
    values: int  # raw cost of one alias: rows x width
    sizes: tuple[int, ...]  # aliases per request
    field: Callable[[int], str]  # alias i -> its field and selection
    weight: int = 1  # of a row in the cost model now (resolvers/schema/stores.py)

    def body(self, size: int) -> bytes:
        fields = " ".join(f"a{i}: {self.field(i)}" for i in range(size))
        keys = [f"C{k * 7:06d}" for k in range(BATCH)]  # for the batch, the only one using $k
        params = "($k: [String!]!)" if "$k" in fields else ""
        variables = {"k": keys} if params else {}
        query = f"query {self.operation}{params} {{ {fields} }}"
        return orjson.dumps(
            {"query": query, "operationName": self.operation, "variables": variables}
        )


@dataclass(frozen=True)
class Point:
    kind: str
    size: int
    values: int
    cost: int  # as the cost model weighs it now
    seconds: float
    errors: int


def kinds(heavy: list[str]) -> list[Kind]:
    """The query kinds, each selecting one value per row (the most rows a cost allows), at
    sizes up to about max_request_cost values."""
    span = f'from: "{iso(END_MS - WEEK_MS)}", to: "{iso(END_MS - HOUR_MS)}"'  # 168 windows

    def batch(i: int) -> str:
        return "customerTotalsBatch(keys: $k) { entries { key } }"

    def range_(i: int) -> str:
        return f'customerTotalsRange(from: "C{i * 997:06d}", first: {PAGE}) {{ records {{ key }} }}'

    def prefix(i: int) -> str:
        return f'latestBookingPrefix(prefix: "C0{i % 10}", first: {PAGE}) {{ records {{ key }} }}'

    def of_key(i: int) -> str:
        return f'hourlyRevenue(key: "{heavy[i % len(heavy)]}", {span}) {{ windows {{ key }} }}'

    def all_(i: int) -> str:
        return f"hourlyRevenueAll({span}, first: {PAGE}) {{ records {{ key }} }}"

    def one(i: int) -> str:
        return f'customerTotals(key: "C{i * 13:06d}") {{ key }}'

    pages = (5, 10, 25, 50, 100)
    return [
        Kind("key lookup batch", "batch", BATCH, pages, batch),
        Kind("key-range page", "range", PAGE, pages, range_, PAGE_ROW_WEIGHT),
        Kind("prefix page", "prefix", PAGE, pages, prefix, PAGE_ROW_WEIGHT),
        Kind("windows of a key", "windows", 168, (30, 60, 150, 300, 595), of_key),
        Kind("windows scan (All)", "windowsAll", PAGE, pages, all_, PAGE_ROW_WEIGHT),
        Kind("aliased lookups", "aliased", 1, (500, 1_000, 2_000, 4_000), one),
    ]


async def metric_sum(connection: Connection, name: str) -> float:
    """node1's stategate_graphql_request_seconds sum for operation `name`."""
    status, text = await connection.request("GET", "/metrics")
    pattern = rf'stategate_graphql_request_seconds_sum{{operation="{name}"}} (\S+)'
    found = re.search(pattern.encode(), text)
    return float(found.group(1)) if status == 200 and found else 0.0


async def timed(connection: Connection, name: str, body: bytes) -> tuple[float, bool]:
    """One request alone: the node's seconds for it, and whether it answered without errors
    (the first error is printed)."""
    before = await metric_sum(connection, name)
    status, reply = await connection.request("POST", "/graphql", body)
    seconds = await metric_sum(connection, name) - before
    ok = status == 200 and b'"errors":' not in reply
    if not ok:
        print(f"    {name}: {status} {reply[:300]!r}", flush=True)
    return seconds, ok


async def measure_kind(connection: Connection, kind: Kind) -> list[Point]:
    await timed(connection, kind.operation, kind.body(kind.sizes[0]))  # warm: parse, plan, pages
    points = []
    for size in kind.sizes:
        runs = [await timed(connection, kind.operation, kind.body(size)) for _ in range(REPEATS)]
        seconds = statistics.median(s for s, _ in runs)
        errors = sum(not ok for _, ok in runs)
        values = kind.values * size
        points.append(Point(kind.name, size, values, values * kind.weight, seconds, errors))
        print(f"  {kind.name}: {kind.values * size:>7,} values {seconds * 1000:8.1f} ms"
              f" ({errors} with errors, load {os.getloadavg()[0]:.2f})", flush=True)  # fmt: skip
        if seconds > STOP_S:
            break
    return points


def fit(points: list[Point]) -> float:
    """Seconds per value: least squares through the origin over the answered points."""
    good = [p for p in points if not p.errors]
    if not good:
        return float("nan")
    return sum(p.values * p.seconds for p in good) / sum(p.values**2 for p in good)


@dataclass(frozen=True)
class Row:
    kind: str
    seconds_per_value: float
    load: float

    def line(self, timeout_s: float, unit_s: float) -> str:
        admitted = timeout_s / self.seconds_per_value
        weight = max(1, math.ceil(self.seconds_per_value / unit_s))
        return (
            f"| {self.kind} | {self.seconds_per_value * 1000:.4f} | {admitted:,.0f} | "
            f"{weight} | {self.load:.2f} |"
        )


def table(rows: list[Row], timeout_s: float, unit_s: float) -> str:
    """A row per kind; its weight makes the kind's unit at most unit_s."""
    head = (
        f"| kind | s per 1,000 values | values the {timeout_s:g} s deadline admits | "
        f"weight for {unit_s * 1e6:g} µs a unit | load (1 min) |\n| --- | --- | --- | --- | --- |"
    )
    return "\n".join([head, *(row.line(timeout_s, unit_s) for row in rows)])


async def calibrate(project: Project, heavy: list[str]) -> tuple[list[Row], list[Point]]:
    url = project.cluster.node(NODE).url
    host, port = url.removeprefix("http://").split(":")
    connection = await Connection.open(host, int(port))
    rows, everything = [], []
    try:
        for kind in kinds(heavy):
            points = await measure_kind(connection, kind)
            everything += points
            rows.append(Row(kind.name, fit(points), os.getloadavg()[0]))
    finally:
        connection.close()
    return rows, everything


async def burst(project: Project, kind: Kind, size: int) -> int:
    """The kind's request of `size` BURST times; how many failed."""
    url = project.cluster.node(NODE).url
    host, port = url.removeprefix("http://").split(":")
    connection = await Connection.open(host, int(port))
    try:
        body = kind.body(size)
        return sum([not (await timed(connection, kind.operation, body))[1] for _ in range(BURST)])
    finally:
        connection.close()


def memory(nodes: NodeProcesses, project: Project, kind: Kind, size: int) -> dict[str, float]:
    """node1's RSS (MiB) before, right after a burst of the kind's request of `size`, and
    REST_S later."""
    before = nodes.rss_mib(NODE)
    errors = asyncio.run(burst(project, kind, size))
    after = nodes.rss_mib(NODE)
    time.sleep(REST_S)
    rest = nodes.rss_mib(NODE)
    return {"before": before, "after": after, "rest": rest, "errors": errors}


def report_rss(rss: dict[str, float], slowest: Point) -> str:
    heaviest = f"{slowest.kind} of {slowest.values:,} values (cost {slowest.cost:,})"
    return (
        f"node1 RSS, {BURST} x {heaviest} (load {os.getloadavg()[0]:.2f}): started "
        f"{rss['started']:.0f} MiB, before the burst "
        f"{rss['before']:.0f} MiB, right after {rss['after']:.0f} MiB, {REST_S:.0f} s after "
        f"{rss['rest']:.0f} MiB ({rss['errors']:.0f} with errors)"
    )


def table_main(doc: str, run: Callable[[Workload, float], list[str]], report: str) -> int:
    """The command line of a bench that prints one table on a built workload (built first if
    need be), and keeps it beside the workloads as `report`."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--workload", default="main", choices=sorted(SIZES))
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per case")
    args = parser.parse_args()
    workload = Workload.built(args.workload) or build(args.workload)
    text = "\n".join(run(workload, args.duration))
    print(text)
    (workload.root.parent / report).write_text(text + "\n")
    return 0


def build(name: str) -> Workload:
    """Generate the named workload and run the pipeline once (as bench.run does)."""
    from spark_pipeline.spark import spark_session

    workload = Workload.named(*SIZES[name])
    workload.reset()
    project = workload.write_project()
    print(f"building {workload.root}: {workload.generate(project):.0f} s to generate", flush=True)
    spark = spark_session(None)
    try:
        seconds, _ = run_pipeline(project, spark)
    finally:
        stop_spark(spark)
    workload.info["pipeline_first_s"] = round(seconds, 2)
    workload.save_info()
    return workload


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", default="small", choices=("small", "main"))
    args = parser.parse_args()
    workload = Workload.built(args.workload) or build(args.workload)
    limit = workload.write_project().settings.max_request_cost
    with workload.project_path.open("a") as file:
        file.write(f"\n[settings]\nmax_request_cost = {UNWEIGHED}\n")
    project = load(workload.project_path)
    floor = Floor(workload.root / "snapshots", project.cluster.partitions)
    heavy = floor.heavy_keys(20)
    floor.close()
    nodes = NodeProcesses.gateway(project, workload.root.parent / "logs" / "calibrate")
    timeout_s = project.settings.request_timeout_s
    started = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    print(f"{started}, {args.workload} workload, load {os.getloadavg()[0]:.2f}", flush=True)
    try:
        nodes.start()
        nodes.wait_serving()
        started_mib = nodes.rss_mib(NODE)
        rows, points = asyncio.run(calibrate(project, heavy))
        unit_s = timeout_s * DEADLINE_SHARE / limit
        print(table(rows, timeout_s, unit_s))
        admitted = [p for p in points if not p.errors and p.cost <= limit]
        slowest = max(admitted, key=lambda p: p.seconds)
        kind = next(k for k in kinds(heavy) if k.name == slowest.kind)
        rss = {"started": started_mib, **memory(nodes, project, kind, slowest.size)}
    finally:
        nodes.stop()
    print(report_rss(rss, slowest))
    out = workload.root.parent / "calibration.json"
    out.write_bytes(orjson.dumps({"date": started, "rows": rows, "points": points, "rss": rss}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
