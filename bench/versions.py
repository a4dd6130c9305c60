"""Versioned stores (issue 27): a key as of a time against a plain lookup of it, one key's
whole history, and what the history costs on disk per million versions.

    python -m bench.versions [--workload main|small] [--duration 10]

On a built workload (bench/workload.py: the demo's stores, whose latestBooking keeps 90
days of history; a week of bookings, so every booking is a version), all requests to
node1, one at a time, over the same keys:

- one latestBooking key (its newest version, from memory);
- one latestBookingAsOf: the key at a random time of the week (the history table, by SQL);
- one latestBookingHistory: every version of the key (first 100).

Before timing, each key's asOf at its latest version's time is checked equal to its plain
lookup (for a deleted key: ended by its tombstone). The history's bytes are DuckDB's blocks
of the `latestBooking_history` tables of every base the pipeline published, beside the
store's own table; node1's RSS is read before
and after the asOf runs (with the part of it that is file pages: a base's history is a
memory-mapped file), and its history indexes from its /metrics.
Medians and the machine's load beside each figure.
"""

from __future__ import annotations

import asyncio
import random
import sys
from pathlib import Path
from typing import Any

import duckdb
import httpx
import orjson
import psutil

from bench.calibrate import table_main
from bench.driver import Stats, graphql_operation, http_client, run_async
from bench.floor import Floor
from bench.procs import NodeProcesses
from bench.workload import END_MS, WEEK_MS, Workload
from contracts import chains
from contracts.clock import instant
from contracts.manifest import read_manifest
from contracts.project import Project, history_of

PROJECT_FILE = "versions.toml"
STORE = "latestBooking"
KEYS = 2000  # keys the cases cycle through
CHECKED = 50  # keys whose asOf is checked against their lookup before timing
PLAIN = "query($key: String!) { latestBooking(key: $key) { record { trip price seats } } }"
AS_OF = (
    "query($key: String!, $at: DateTime!) { latestBookingAsOf(key: $key, asOf: $at) "
    "{ version { validFrom validTo record { trip price seats } } } }"
)
HISTORY = (
    "query($key: String!) { latestBookingHistory(key: $key, first: 100) "
    "{ versions { validFrom validTo record { trip price seats } } } }"
)
_JSON = {"content-type": "application/json"}


def body(query: str, variables: dict[str, Any]) -> bytes:
    return orjson.dumps({"query": query, "variables": variables})


async def checked(url: str, keys: list[str]) -> None:
    """A key's latest version, asked as of its validFrom, is its plain lookup (else raises)."""
    async with http_client() as client:
        for key in keys[:CHECKED]:
            found = await client.post(url, content=body(HISTORY, {"key": key}), headers=_JSON)
            versions = orjson.loads(found.content)["data"]["latestBookingHistory"]["versions"]
            plain = await client.post(url, content=body(PLAIN, {"key": key}), headers=_JSON)
            record = orjson.loads(plain.content)["data"]["latestBooking"]["record"]
            if not versions:
                if record is not None:
                    raise RuntimeError(f"{key}: a record, and no version")
                continue
            at = versions[-1]["validFrom"]
            reply = await client.post(url, content=body(AS_OF, {"key": key, "at": at}),
                                      headers=_JSON)  # fmt: skip
            version = orjson.loads(reply.content)["data"]["latestBookingAsOf"]["version"]
            ended = version is not None and version["validTo"] is not None
            if record is None:  # deleted: a tombstone ended its newest version
                agrees = ended
            else:
                agrees = version is not None and version["record"] == record and not ended
            if not agrees:
                raise RuntimeError(f"{key}: as of {at} {version}, latest {record}")


async def measure(url: str, keys: list[str], servers: Any, duration: float) -> list[Stats]:
    rng = random.Random(889)
    times = [instant(rng.randrange(END_MS - WEEK_MS, END_MS)) for _ in keys]
    await checked(url, keys)
    print(f"  asOf at each of {CHECKED} keys' newest version equals its lookup", flush=True)
    async with http_client() as client:
        cases = [
            ("one key, latest (latestBooking)", [body(PLAIN, {"key": k}) for k in keys]),
            (
                "one key as of a time (latestBookingAsOf)",
                [body(AS_OF, {"key": k, "at": t}) for k, t in zip(keys, times, strict=True)],
            ),
            ("one key's every version (latestBookingHistory)",
             [body(HISTORY, {"key": k}) for k in keys]),
        ]  # fmt: skip
        out = []
        for name, payloads in cases:
            operation = graphql_operation(client, [url], payloads)
            stats = await run_async(
                name, operation, 1, duration, 1_000_000, warmup=20, servers=servers, min_count=20
            )
            out.append(stats)
            print(f"  {name}: p50 {stats.p50_ms:.2f} ms (load {stats.load1})", flush=True)
    return out


Sizes = dict[int, dict[str, tuple[int, int]]]  # partition -> table -> (rows, bytes)


def stored(project: Project, store_dir: Path) -> Sizes:
    """Each published base of the partitions' own chains: the rows and bytes (DuckDB's
    blocks) of the history and of the store's own table."""
    tables = (history_of(project.stores[STORE]).name, STORE)
    found: Sizes = {}
    for chain, entry in read_manifest(store_dir).partitions.items():
        if chains.is_global(project, chain):
            continue
        with duckdb.connect(str(store_dir / entry.layers[0].path), read_only=True) as con:
            size = con.execute("SELECT block_size FROM pragma_database_size()").fetchone()
            block = int(size[0]) if size else 262_144
            found[chain] = {}
            for table in tables:
                (rows,) = con.execute(f'SELECT count(*) FROM "{table}"').fetchone() or (0,)
                blocks = con.execute(
                    f"SELECT count(DISTINCT block_id) FROM pragma_storage_info('{table}') "
                    "WHERE block_id IS NOT NULL"
                ).fetchone()
                found[chain][table] = int(rows), int(blocks[0] if blocks else 0) * block
    return found


def resident(process: psutil.Process) -> tuple[float, float]:
    """A process's RSS and the part of it that is file pages (which the OS may drop), MiB."""
    held = process.memory_info()
    return held.rss / 2**20, held.shared / 2**20


def history_memory(url: str) -> float:
    """A node's history indexes, in bytes (its /metrics)."""
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return sum(
        float(line.split()[-1])
        for line in text.splitlines()
        if line.startswith("stategate_history_memory_bytes{")
    )


def run(workload: Workload, duration: float) -> list[str]:
    project: Project = workload.write_project(file=PROJECT_FILE)
    floor = Floor(workload.root / "snapshots", project.cluster.partitions)
    try:
        keys = random.Random(27).sample(floor.all_keys(), KEYS)
    finally:
        floor.close()
    sizes = stored(project, workload.root / "snapshots")
    table = history_of(project.stores[STORE]).name
    versions, history_bytes = (sum(s[table][i] for s in sizes.values()) for i in (0, 1))
    rows, table_bytes = (sum(s[STORE][i] for s in sizes.values()) for i in (0, 1))
    nodes = NodeProcesses.gateway(project, workload.root.parent / "logs" / "versions")
    try:
        nodes.start()
        nodes.wait_serving()
        url = f"{nodes.url('node1')}/graphql"
        before = resident(nodes.process("node1"))
        plain, as_of, history = asyncio.run(measure(url, keys, nodes.processes(), duration))
        after = resident(nodes.process("node1"))
        memory = history_memory(nodes.url("node1"))
    finally:
        nodes.stop()
    per_million = history_bytes / max(versions, 1) * 1e6 / 2**20
    held = sum(sizes[p][table][0] for p in project.cluster.hosted_by("node1"))
    in_memory = memory / max(held, 1) * 1e6 / 2**20
    return [
        "| read (node1, one at a time) | p50 | load |",
        "| --- | --- | --- |",
        *(f"| {s.name} | {s.p50_ms:.2f} ms | {s.load1} |" for s in (plain, as_of, history)),
        "",
        f"asOf / latest: {as_of.p50_ms / plain.p50_ms:.2f}x (target <= 1.5x)",
        f"history: {versions:,} versions in {history_bytes / 2**20:.1f} MiB of base files "
        f"({per_million:.1f} MiB per million versions), beside the store's {rows:,} rows in "
        f"{table_bytes / 2**20:.1f} MiB",
        f"node1 indexes the {held:,} versions of its partitions in {memory / 2**20:.1f} MiB of "
        f"memory ({in_memory:.1f} MiB per million versions, the rest mapped from a file); its "
        f"RSS before the asOf runs {before[0]:.0f} MiB ({before[1]:.0f} MiB of it file pages), "
        f"after {after[0]:.0f} MiB ({after[1]:.0f} MiB)",
    ]


def main() -> int:
    return table_main(__doc__, run, "versions.md")


if __name__ == "__main__":
    sys.exit(main())
