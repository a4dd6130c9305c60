"""Global stores and joins (issue 27): a join against two requests, a global lookup against a
partitioned one, and what the global store costs a node.

    python -m bench.joins [--workload main|small] [--duration 10]

On a built workload (bench/workload.py; the demo's stores, whose latestBooking joins each
booking's trip in the global timetable), all requests to node1, one at a time:

- 1000 bookings with their journeys: one latestBookingBatch selecting the join;
- the same as a client does it without joins: the batch, then a timetableBatch of the
  distinct trips it names (two requests, the second after the first);
- the 1000 bookings alone (what the join adds to);
- one timetable key (global: node1 answers every key itself) against one latestBooking key
  (two thirds of the keys hop to another node).

Before timing, the join's journeys are checked equal to the two requests'. Medians and the
machine's load beside each figure; node1's global memory is read from its /metrics.
"""

from __future__ import annotations

import asyncio
import random
import sys
from typing import Any

import httpx
import orjson

from bench.calibrate import table_main
from bench.driver import Operation, Stats, graphql_operation, http_client, run_async
from bench.floor import Floor
from bench.procs import NodeProcesses
from bench.rawhttp import Pool
from bench.workload import Workload
from contracts.project import Project
from stategate.demo.bookings import STATIONS

PROJECT_FILE = "joins.toml"
KEYS = 1000
LISTS = 50  # distinct key lists the cases cycle through
JOURNEY = "journey { minutes fare operator }"
JOINED = (
    "query($keys: [String!]!) { latestBookingBatch(keys: $keys) "
    f"{{ entries {{ key record {{ trip price {JOURNEY} }} }} }} }}"
)
ALONE = (
    "query($keys: [String!]!) { latestBookingBatch(keys: $keys) "
    "{ entries { key record { trip price } } } }"
)
TRIPS = (
    "query($keys: [String!]!) { timetableBatch(keys: $keys) "
    "{ entries { key record { minutes fare operator } } } }"
)
ONE_TRIP = "query($key: String!) { timetable(key: $key) { record { fare } } }"
ONE_BOOKING = "query($key: String!) { latestBooking(key: $key) { record { price } } }"
_JSON = {"content-type": "application/json"}


def body(query: str, variables: dict[str, Any]) -> bytes:
    return orjson.dumps({"query": query, "variables": variables})


async def post(client: Pool, url: str, payload: bytes) -> dict[str, Any]:
    response = await client.post(url, content=payload, headers=_JSON)
    reply: dict[str, Any] = orjson.loads(response.content)
    if response.status_code != 200 or reply.get("errors") or reply.get("data") is None:
        raise RuntimeError(f"HTTP {response.status_code}: {str(reply)[:300]}")
    data: dict[str, Any] = reply["data"]
    return data


def two_requests(client: Pool, url: str, lists: list[list[str]]) -> Operation:
    """The bookings, then the timetable records of the trips they name."""

    async def operation(i: int) -> str | None:
        data = await post(client, url, body(ALONE, {"keys": lists[i % len(lists)]}))
        entries = data["latestBookingBatch"]["entries"]
        trips = sorted(
            {e["record"]["trip"] for e in entries if e["record"] and e["record"]["trip"]}
        )
        await post(client, url, body(TRIPS, {"keys": trips}))
        return None

    return operation


async def same_journeys(client: Pool, url: str, keys: list[str]) -> int:
    """The join's journeys equal the two requests' (raises otherwise); the trips named."""
    joined = (await post(client, url, body(JOINED, {"keys": keys})))["latestBookingBatch"]
    alone = (await post(client, url, body(ALONE, {"keys": keys})))["latestBookingBatch"]
    trips = sorted({e["record"]["trip"] for e in alone["entries"] if e["record"]})
    found = (await post(client, url, body(TRIPS, {"keys": trips})))["timetableBatch"]
    timetable = {e["key"]: e["record"] for e in found["entries"]}
    for entry in joined["entries"]:
        record = entry["record"]
        if record is None:
            continue
        want = timetable.get(record["trip"])
        if record["journey"] != want:
            raise RuntimeError(f"{entry['key']}: joined {record['journey']}, looked up {want}")
    return len(trips)


async def measure(url: str, keys: list[str], servers: Any, duration: float) -> list[Stats]:
    rng = random.Random(27)
    lists = [rng.sample(keys, KEYS) for _ in range(LISTS)]
    async with http_client() as client:
        named = await same_journeys(client, url, lists[0])
        print(f"  the join's journeys equal two requests' ({named} trips named)", flush=True)
        timetable = await post(client, url, body(TRIPS, {"keys": every_trip()}))
        trips = [e["key"] for e in timetable["timetableBatch"]["entries"] if e["record"]]
        cases: list[tuple[str, Operation]] = [
            (
                f"{KEYS} bookings with their journeys (join)",
                graphql_operation(client, [url], [body(JOINED, {"keys": k}) for k in lists]),
            ),
            (f"{KEYS} bookings, then their trips (2 requests)", two_requests(client, url, lists)),
            (
                f"{KEYS} bookings alone",
                graphql_operation(client, [url], [body(ALONE, {"keys": k}) for k in lists]),
            ),
            (
                "one timetable key (global)",
                graphql_operation(client, [url], [body(ONE_TRIP, {"key": t}) for t in trips]),
            ),
            (
                "one latestBooking key (partitioned)",
                graphql_operation(client, [url], [body(ONE_BOOKING, {"key": k}) for k in lists[0]]),
            ),
        ]
        out = []
        for name, operation in cases:
            stats = await run_async(
                name, operation, 1, duration, 1_000_000, warmup=20, servers=servers, min_count=20
            )
            out.append(stats)
            print(f"  {name}: p50 {stats.p50_ms:.2f} ms (load {stats.load1})", flush=True)
    return out


def every_trip() -> list[str]:
    """The timetable's keys: every trip between two of the demo's stations."""
    return [f"{a}→{b}" for a in STATIONS for b in STATIONS if a != b]


def global_memory(url: str) -> tuple[float, float]:
    """A node's global stores: their layer files and their rows in memory, in MiB."""
    text = httpx.get(f"{url}/metrics", timeout=10).text
    disk = memory = 0.0
    for line in text.splitlines():
        if line.startswith("stategate_global_layers_bytes "):
            disk = float(line.split()[-1])
        elif line.startswith("stategate_global_store_memory_bytes{"):
            memory += float(line.split()[-1])
    return disk / 2**20, memory / 2**20


def run(workload: Workload, duration: float) -> list[str]:
    project: Project = workload.write_project(file=PROJECT_FILE)
    floor = Floor(workload.root / "snapshots", project.cluster.partitions)
    try:
        keys = floor.all_keys()
    finally:
        floor.close()
    nodes = NodeProcesses.gateway(project, workload.root.parent / "logs" / "joins")
    try:
        nodes.start()
        nodes.wait_serving()
        url = f"{nodes.url('node1')}/graphql"
        stats = asyncio.run(measure(url, keys, nodes.processes(), duration))
        disk, memory = global_memory(nodes.url("node1"))
    finally:
        nodes.stop()
    join, two, alone, trip, booking = stats
    lines = [
        "| read (node1, one at a time) | p50 | load |",
        "| --- | --- | --- |",
        *(f"| {s.name} | {s.p50_ms:.2f} ms | {s.load1} |" for s in stats),
        "",
        f"join / two requests: {join.p50_ms / two.p50_ms:.2f}x; the join adds "
        f"{join.p50_ms - alone.p50_ms:.2f} ms to the bookings alone; a global key / a "
        f"partitioned key: {trip.p50_ms / booking.p50_ms:.2f}x",
        f"node1 holds the global timetable in {disk:.2f} MiB of layer files and "
        f"{memory:.2f} MiB of rows in memory",
    ]
    return lines


def main() -> int:
    return table_main(__doc__, run, "joins.md")


if __name__ == "__main__":
    sys.exit(main())
