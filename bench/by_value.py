"""Asking by value, side by side with PostgreSQL + PostGraphile on the same rows (issue 24).

    python -m bench.by_value [--workload main|small] [--duration 10]

On a built workload (bench/workload.py; built first when missing), latestBooking's rows
(990,022 at main; the demo's store declares `index = ["price"]`) are asked three things:

- top 10 by price (descending, ties by key);
- a filtered, ordered page of 100: seats = 2, by price descending;
- count and sum of price with a filter: seats = 2.

Each is measured, one request at a time, on the storage floor (the same DuckDB files from one
process, the best single SQL statement), on the gateway (3 nodes, all requests to node1), and,
alone on the machine after it, on PostGraphile 5 over PostgreSQL (the same rows, B-tree
indexes on price and seats, without which PostGraphile 5 offers neither the order nor the
condition; Graphile's pg-aggregates plugin for the sum), with the same raw client. The
naive per-key layer has no query by value: that is what it lacks. Before timing, each pair of
answers is checked equal. Medians and the machine's load beside each figure.

Then the leaderboard, on a copy of the workload: one subscription on node1 to the top 10
customers by revenue; each round books a large sum for a customer of a partition node1 does
not host, runs the pipeline and tells the nodes; the push's latency is its arrival at the
client minus the moment the first replica of that partition served the new version.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import websockets

from bench.calibrate import SIZES, build
from bench.driver import Stats, graphql_operation, http_client, run_async
from bench.floor import Floor
from bench.freshness import copy_workload
from bench.peer import Peer
from bench.procs import NodeProcesses
from bench.subscriptions import SUBSCRIBER_NODE, subscribed_keys, switch_times
from bench.versus import STORE, TABLE, export_rows, pg_columns
from bench.workload import Workload
from contracts import eventlog
from contracts.partitioner import partition_for
from contracts.project import Project
from spark_pipeline import job
from spark_pipeline.publish import notify_nodes
from spark_pipeline.spark import spark_session

PROJECT_FILE = "by_value.toml"
LEADERBOARD = (
    "subscription { customerTotalsList(orderBy: [REVENUE_DESC], first: 10) "
    "{ records { key revenue } } }"
)
ROUNDS = 8
SEATS = 2
GATEWAY = {
    "top 10 by price": "{ latestBookingList(orderBy: [PRICE_DESC], first: 10) "
    "{ records { key trip price seats } } }",
    "seats = 2, by price, page of 100": "{ latestBookingList(where: {seats: {eq: 2}}, "
    "orderBy: [PRICE_DESC], first: 100) { records { key trip price seats } } }",
    "count and sum, seats = 2": "{ latestBookingAggregate(where: {seats: {eq: 2}}) "
    "{ totalCount sum { price } } }",
}
POSTGRAPHILE = {
    "top 10 by price": "{ allLatestBookings(orderBy: [PRICE_DESC, KEY_ASC], first: 10) "
    "{ nodes { key trip price seats } } }",
    "seats = 2, by price, page of 100": "{ allLatestBookings(condition: {seats: 2}, "
    "orderBy: [PRICE_DESC, KEY_ASC], first: 100) { nodes { key trip price seats } } }",
    "count and sum, seats = 2": "{ allLatestBookings(condition: {seats: 2}) "
    "{ totalCount aggregates { sum { price } } } }",
}
FLOOR = {
    "top 10 by price": "SELECT key, trip, price, seats FROM ({rows}) "
    "ORDER BY price DESC NULLS LAST, key LIMIT 10",
    "seats = 2, by price, page of 100": "SELECT key, trip, price, seats FROM ({rows}) "
    f"WHERE seats = {SEATS} ORDER BY price DESC NULLS LAST, key LIMIT 100",
    "count and sum, seats = 2": "SELECT count(*), sum(price) FROM ({rows}) "
    f"WHERE seats = {SEATS}",
}


def answer(data: dict[str, Any]) -> Any:
    """The rows (keys in order) or the totals of either server's answer, to compare."""
    (result,) = data.values()
    rows = result.get("records", result.get("nodes"))
    if rows is not None:
        return [row["key"] for row in rows]
    total = result.get("sum") or result["aggregates"]["sum"]
    return int(result["totalCount"]), round(float(total["price"]), 2)


def floor_times(floor: Floor, repeats: int) -> tuple[dict[str, float], dict[str, Any]]:
    rows = " UNION ALL ".join(
        f'SELECT key, trip, price, seats FROM p{p}."{STORE}"' for p in range(floor.partitions)
    )
    times, answers = {}, {}
    for case, sql in FLOOR.items():
        statement = sql.format(rows=rows)
        taken = []
        for _ in range(repeats):
            started = time.perf_counter()
            result = floor.con.execute(statement).fetchall()
            taken.append(time.perf_counter() - started)
        times[case] = statistics.median(taken) * 1000
        answers[case] = (
            [r[0] for r in result]
            if "count" not in case
            else (result[0][0], round(result[0][1], 2))
        )
    return times, answers


async def measure(
    label: str, url: str, documents: dict[str, str], servers: Any, duration: float
) -> tuple[list[Stats], dict[str, Any]]:
    out, answers = [], {}
    async with http_client() as client:
        for case, query in documents.items():
            body = orjson.dumps({"query": query})
            response = await client.post(
                url, content=body, headers={"content-type": "application/json"}
            )
            reply = orjson.loads(response.content)
            if reply.get("errors"):
                raise RuntimeError(f"{label} {case}: {reply['errors']}")
            answers[case] = answer(reply["data"])
            operation = graphql_operation(client, [url], [body])
            stats = await run_async(
                f"{label} {case}", operation, 1, duration, 1_000_000, warmup=20,
                servers=servers, min_count=20,
            )  # fmt: skip
            out.append(stats)
            print(f"  {label} {case}: p50 {stats.p50_ms:.2f} ms (load {stats.load1})", flush=True)
    return out, answers


def same(case: str, a: Any, b: Any, who: str) -> None:
    if isinstance(a, tuple):
        if a[0] != b[0] or not math.isclose(a[1], b[1], rel_tol=1e-9):
            raise RuntimeError(f"{case}: {who} answered {b}, the floor {a}")
    elif a != b:
        raise RuntimeError(f"{case}: {who} answered {b[:5]}..., the floor {a[:5]}...")


def run(workload: Workload, duration: float) -> list[str]:
    project: Project = workload.write_project(file=PROJECT_FILE)
    logs = workload.root.parent / "logs" / "by_value"
    floor = Floor(workload.root / "snapshots", project.cluster.partitions)
    try:
        nulls = floor.con.execute(
            " UNION ALL ".join(
                f'SELECT count(*) FROM p{p}."{STORE}" WHERE price IS NULL'
                for p in range(floor.partitions)
            )
        ).fetchall()
        if sum(n for (n,) in nulls):
            raise RuntimeError("null prices: PostgreSQL sorts them first descending, we last")
        floor_ms, expected = floor_times(floor, repeats=30)
        csv = workload.root.parent / "peer" / "latest_booking.csv"
        csv.parent.mkdir(parents=True, exist_ok=True)
        export_rows(project, floor.files, csv)
    finally:
        floor.close()

    nodes = NodeProcesses.gateway(project, logs)
    try:
        nodes.start()
        nodes.wait_serving()
        url = f"{nodes.url('node1')}/graphql"
        gateway, got = asyncio.run(measure("gw", url, GATEWAY, nodes.processes(), duration))
        rss = nodes.rss_mib("node1")
    finally:
        nodes.stop()
    for case in GATEWAY:
        same(case, expected[case], got[case], "the gateway")

    peer = Peer(workload.root.parent / "peer")
    peer.setup()
    try:
        peer.start_postgres()
        peer.load(TABLE, pg_columns(project), csv, indexes=("price", "seats"))
        peer.start_postgraphile()
        pg, got = asyncio.run(measure("pg", peer.url, POSTGRAPHILE, peer.processes, duration))
    finally:
        peer.stop_postgraphile()
        peer.stop_postgres()
    for case in POSTGRAPHILE:
        same(case, expected[case], got[case], "PostGraphile")

    lines = [
        "| read (one at a time, p50) | DuckDB floor | gateway (node1) | PostGraphile + PG | "
        "gateway / PostGraphile | load |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for (case, floor_p50), g, p in zip(floor_ms.items(), gateway, pg, strict=True):
        lines.append(
            f"| {case} | {floor_p50:.2f} ms | {g.p50_ms:.2f} ms | {p.p50_ms:.2f} ms | "
            f"{g.p50_ms / p.p50_ms:.2f}x | {g.load1} / {p.load1} |"
        )
    lines.append(f"\nnode1 RSS after the gateway's runs: {rss:.0f} MiB")
    return lines


def leaderboard_line(workload: Workload, rounds: int) -> str:
    pushes = sorted(leaderboard(workload, rounds))
    return (
        f"leaderboard push after a switch: p50 {statistics.median(pushes) * 1000:.0f} ms, "
        f"max {pushes[-1] * 1000:.0f} ms over {len(pushes)} rounds (load "
        f"{os.getloadavg()[0]:.2f})"
    )


def leaderboard(workload: Workload, rounds: int) -> list[float]:
    """Each round's push latency (s) from the switch to the leaderboard's subscriber."""
    project = copy_workload(workload, "leaderboard")
    nodes = NodeProcesses.gateway(project, workload.root.parent / "logs" / "leaderboard")
    spark = spark_session()
    try:
        nodes.start()
        nodes.wait_serving()
        url = nodes.url(SUBSCRIBER_NODE).replace("http://", "ws://") + "/graphql"
        return asyncio.run(_rounds(project, url, spark, rounds))
    finally:
        spark.stop()
        nodes.stop()


async def _rounds(project: Project, url: str, spark: Any, rounds: int) -> list[float]:
    leaders = subscribed_keys(project, 10_000, rounds)  # off node1: each push crosses nodes
    arrivals: list[tuple[str, float]] = []  # (the leader, when the update arrived)
    async with websockets.connect(
        url, subprotocols=[websockets.Subprotocol("graphql-transport-ws")]
    ) as ws:
        await ws.send(orjson.dumps({"type": "connection_init"}).decode())
        await ws.recv()
        subscribe = {"id": "top", "type": "subscribe", "payload": {"query": LEADERBOARD}}
        await ws.send(orjson.dumps(subscribe).decode())

        async def read() -> None:
            async for raw in ws:
                records = orjson.loads(raw)["payload"]["data"]["customerTotalsList"]["records"]
                arrivals.append((records[0]["key"], time.time()))

        reader = asyncio.create_task(read())
        latencies = []
        for number, key in enumerate(leaders):
            price = 1e7 * (number + 1)  # the new leader
            record = eventlog.Record(key, {"trip": "A→B", "price": price, "seats": 1},
                                     eventlog.now_ms())  # fmt: skip
            topic = project.topics["bookings"]
            eventlog.produce(project.log_dir, topic, project.cluster.partitions, [record])
            report = await asyncio.to_thread(job.run, project, spark, notify=False)
            await asyncio.to_thread(notify_nodes, project, set(report.versions))
            deadline = time.monotonic() + 10
            while not any(k == key for k, _ in arrivals) and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            switched = switch_times(project)[
                partition_for(key, "string", project.cluster.partitions)
            ]
            arrived = next((at for k, at in arrivals if k == key), None)
            if arrived is None:
                raise RuntimeError(f"round {number}: no push with {key} on top within 10 s")
            latencies.append(arrived - switched)
            print(f"  leaderboard round {number}: pushed {latencies[-1] * 1000:.0f} ms after the "
                  f"switch (load {os.getloadavg()[0]:.2f})", flush=True)  # fmt: skip
        reader.cancel()
    return latencies


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", default="main", choices=sorted(SIZES))
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per case")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="leaderboard rounds")
    args = parser.parse_args()
    workload = Workload.built(args.workload) or build(args.workload)
    lines = run(workload, args.duration)
    if args.rounds:
        lines.append(leaderboard_line(workload, args.rounds))
    text = "\n".join(lines)
    print(text)
    Path(workload.root.parent / "by_value.md").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
