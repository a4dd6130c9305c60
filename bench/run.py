"""`make bench` = `python -m bench.run`: the reference benchmark in one command.

1. Builds the workload in .bench/ (demo stores, 9 partitions, 3 loopback nodes, replicas 2):
   bookings from spark_pipeline.demo_data, then the pipeline (timed), and a plain Spark job
   over the same log segments for comparison (both on a warm JVM, median of --spark-runs).
   A tenth-size workload is built as well, for the memory comparison.
2. Starts 3 gateway nodes and measures the query mix with a raw asyncio HTTP/1.1 driver.
3. Measures the same lookups directly on the snapshot files (the storage floor), each case
   right after its gateway case so both see the same load on a shared machine.
4. Starts the naive per-key layer (bench/naive.py) on the same ports and measures it.
5. Measures a node's RSS on the small workload after the same warm-up.
Prints a table and writes it as JSON to .bench/results.json.

    python -m bench.run --quick          # 100k customers / 500k events, short durations
    python -m bench.run                  # 1M customers / 5M events, 10 s per measurement
    python -m bench.run --reuse          # skip generation and pipeline when .bench has them
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import orjson

from bench import (
    by_value,
    freshness,
    installs,
    joins,
    queries,
    recovery,
    report,
    subscriptions,
    versions,
    versus,
)
from bench.driver import (
    Operation,
    Servers,
    Stats,
    batch_operation,
    get_operation,
    graphql_operation,
    http_client,
    run_async,
    run_paced,
    run_sync,
)
from bench.floor import Floor, Rows, shapes
from bench.peer import Peer
from bench.procs import NodeProcesses
from bench.queries import Bodies, KeySet
from bench.rawhttp import Pool
from bench.report import at_least, at_most, below, info, ratio
from bench.workload import (
    BENCH_DIR,
    DEFAULT_CUSTOMERS,
    DEFAULT_EVENTS,
    END_MS,
    HOUR_MS,
    WEEK_MS,
    SparkTimings,
    Workload,
    compare,
    stop_spark,
    with_workers,
)

RESULTS = BENCH_DIR / "results.json"
SUSTAINED_RATE = 10_000  # events/s the pipeline must keep up with on Kafka (issue 49)
GW_ONE = "gw a. one key"
GW_ONE_NODE = "gw a. one key, node1 only"
GW_LIST = "gw b. 1000 keys, one list"
GW_ALIASES = "gw c. 1000 keys, 1000 aliased root fields"
GW_PREFIX = "gw d. prefix scan, 100 rows"
GW_WINDOWS = "gw e. windows, 7 days hourly (heavy keys)"
GW_WINDOWS_ROUTED = "gw e. windows, 7 days hourly, routed"
GW_DASHBOARD = "gw f. dashboard (5 root fields + cluster)"
GW_HEALTH = "gw GET /health (no GraphQL, no DuckDB)"
# The same two at one rate, under what either serves: a saturated loop takes many requests
# per wake-up, so a cheaper request is also counted at a higher rate than a dearer one.
PACED_RATE = 2_000  # requests a second (a lookup to node1 saturates at ~6,000, /health ~27,000)
GW_HEALTH_PACED = f"gw GET /health at {PACED_RATE}/s"
# A routed lookup goes to any of the 3 nodes, so its baseline is spread the same way: the
# HTTP stack costs more per request in processes that each wake for a third of the requests.
GW_HEALTH_SPREAD_PACED = f"gw GET /health over the nodes at {PACED_RATE}/s"
GW_ONE_PACED = f"gw a. one key, node1 only, at {PACED_RATE}/s"
GW_ROUTED_PACED = f"gw a. one key, routed, at {PACED_RATE}/s"
NAIVE_ONE = "naive one key"
NAIVE_ONE_NODE = "naive one key, node1 only"
NAIVE_LIST = "naive 1000 keys = 1000 GETs"
MAX_COUNT = 1_000_000
Log = Callable[[str], None]


def log(text: str) -> None:
    print(text, flush=True)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--customers", type=int, default=None, help="default 1,000,000")
    parser.add_argument("--events", type=int, default=None, help="default 5,000,000")
    parser.add_argument("--duration", type=float, default=None, help="seconds per measurement")
    parser.add_argument("--quick", action="store_true", help="100k/500k, 3 s measurements")
    parser.add_argument("--reuse", action="store_true", help="reuse .bench data when present")
    parser.add_argument("--spark-runs", type=int, default=2, help="warm runs of each Spark job")
    parser.add_argument(
        "--skip-peer", action="store_true", help="skip PostgreSQL + PostGraphile (no apt/npm)"
    )
    parser.add_argument(
        "--skip-freshness", action="store_true", help="skip the continuous pipeline's freshness"
    )
    parser.add_argument("--rate", type=int, default=1000, help="freshness: events per second")
    parser.add_argument(
        "--skip-subscriptions", action="store_true", help="skip the subscriptions' delivery"
    )
    args = parser.parse_args(argv)
    quick = args.quick
    args.customers = args.customers or (100_000 if quick else DEFAULT_CUSTOMERS)
    args.events = args.events or (500_000 if quick else DEFAULT_EVENTS)
    args.duration = args.duration or (3.0 if quick else 10.0)
    return args


@dataclass
class Results:
    machine: dict[str, Any]
    settings: dict[str, Any]
    workload: dict[str, Any] = field(default_factory=dict)
    small_workload: dict[str, Any] = field(default_factory=dict)
    spark: dict[str, Any] = field(default_factory=dict)
    verification: dict[str, Any] = field(default_factory=dict)
    gateway: list[Stats] = field(default_factory=list)
    floor: list[Stats] = field(default_factory=list)
    floor_best: dict[str, str] = field(default_factory=dict)
    naive: list[Stats] = field(default_factory=list)
    versus: list[Stats] = field(default_factory=list)
    peer: dict[str, Any] = field(default_factory=dict)
    memory: dict[str, Any] = field(default_factory=dict)
    sustained: freshness.Freshness | None = None  # SUSTAINED_RATE on the main workload
    freshness: list[freshness.Freshness] = field(default_factory=list)
    recovery: recovery.Recovery | None = None
    installs: installs.Installs | None = None
    live: subscriptions.Live | None = None
    by_value: list[str] = field(default_factory=list)  # bench/by_value.py's table
    joins: list[str] = field(default_factory=list)  # bench/joins.py's table
    versions: list[str] = field(default_factory=list)  # bench/versions.py's table
    comparisons: list[report.Comparison] = field(default_factory=list)

    def find(self, rows: list[Stats], name: str) -> Stats | None:
        return next((s for s in rows if s.name == name), None)

    def as_dict(self) -> dict[str, Any]:
        return {
            "machine": self.machine,
            "settings": self.settings,
            "workload": self.workload,
            "small_workload": self.small_workload,
            "spark": self.spark,
            "verification": self.verification,
            "gateway": [s.as_dict() for s in self.gateway],
            "floor": [s.as_dict() for s in self.floor],
            "floor_best": self.floor_best,
            "naive": [s.as_dict() for s in self.naive],
            "versus": [s.as_dict() for s in self.versus],
            "peer": self.peer,
            "memory": self.memory,
            "freshness": [f.as_dict() for f in self.freshness],
            "recovery": None if self.recovery is None else self.recovery.as_dict(),
            "installs": None if self.installs is None else self.installs.as_dict(),
            "subscriptions": self.live.as_dict() if self.live else None,
            "by_value": self.by_value,
            "joins": self.joins,
            "versions": self.versions,
            "comparisons": [c.as_dict() for c in self.comparisons],
        }


# -- 1. workload and Spark timings ---------------------------------------------------------


def build(args: argparse.Namespace, main: Workload, small: Workload) -> SparkTimings:
    todo = [w for w in (main, small) if not (args.reuse and w.is_built())]
    main.load_info()
    if not todo:
        log(f"reusing {main.root} and {small.root}")
        return SparkTimings.from_dict(main.info.get("spark", {}))
    from spark_pipeline.spark import spark_session

    log("starting Spark (local[2]) ...")
    spark = spark_session(None)
    try:
        for w in todo:
            w.build(spark, log)
        if main not in todo:
            return SparkTimings.from_dict(main.info.get("spark", {}))
        log(f"Spark comparison on {main.name}, warm JVM, {args.spark_runs} runs each ...")
        timings = compare(
            main.write_project(), spark, args.spark_runs, BENCH_DIR / "scratch", log=log
        )
        timings.pipeline_first_s = main.info["pipeline_first_s"]
        main.info["spark"] = timings.as_dict()
        main.save_info()
        return timings
    finally:
        stop_spark(spark)


def keyset(floor: Floor) -> KeySet:
    return KeySet(
        keys=floor.all_keys(),
        heavy=floor.heavy_keys(100),
        prefixes=floor.prefixes(),
        window_from_ms=END_MS - WEEK_MS,
        window_to_ms=END_MS - HOUR_MS,
    )


def describe(w: Workload, floor: Floor, ks: KeySet) -> dict[str, Any]:
    store = w.root / "snapshots"
    return {
        "name": w.name,
        "customers": w.customers,
        "events": w.events,
        "keys": len(ks.keys),
        "latestBooking_rows": floor.table_rows("latestBooking"),
        "hourlyRevenue_rows": floor.table_rows("hourlyRevenue"),
        "snapshot_mib": round(sum(p.stat().st_size for p in floor.files.values()) / 2**20, 1),
        "partitions": 9,
        "nodes": 3,
        "replicas": 2,
        "store": str(store),
        "generate_s": w.info.get("generate_s"),
        "pipeline_first_s": w.info.get("pipeline_first_s"),
    }


# -- 2. the gateway ----------------------------------------------------------------------------


def _check_one(data: Any) -> str | None:
    return None if (data["customerTotals"] or {}).get("record") else "no record"


def _check_list(data: Any) -> str | None:
    batch = data["customerTotalsBatch"]
    if batch["meta"]["partial"]:
        return "partial"
    entries = batch["entries"]
    if len(entries) != 1000 or any(e["record"] is None for e in entries):
        return f"{len(entries)} entries, some without record"
    return None


def _check_aliases(data: Any) -> str | None:
    if len(data) != 1000 or any(v["record"] is None for v in data.values()):
        return "missing records"
    return None


def _check_prefix(data: Any) -> str | None:
    page = data["latestBookingPrefix"]
    return None if len(page["records"]) == 100 else f"{len(page['records'])} records"


def _check_windows(data: Any) -> str | None:
    return None if data["hourlyRevenue"]["windows"] else "no windows"


def _check_dashboard(data: Any) -> str | None:
    return None if all(v is not None for v in data.values()) else "null root field"


@dataclass
class Case:
    name: str
    concurrency: int
    urls: list[str]
    bodies: list[bytes]
    check: Callable[[Any], str | None]
    warmup: int = 5
    note: str = ""
    floor: str = ""  # the floor case measured right after this one
    route: Callable[[bytes], str] | None = None  # where a routing client sends each body


def gateway_cases(urls: list[str], b: Bodies, route: Callable[[bytes], str]) -> list[Case]:
    node1 = urls[:1]
    one = b.one_key(20_000)
    lists = b.keys_list(400)
    windows = b.windows(2000)
    return [
        Case(GW_ONE, 1, urls, one, _check_one, 20, "round-robin 3 nodes", "one key"),
        Case(GW_ONE_NODE, 16, node1, one, _check_one, 50, "all to node1"),
        Case(GW_LIST, 1, urls, lists, _check_list, floor="1000 keys"),
        Case(GW_LIST, 4, urls, lists, _check_list),
        Case(GW_ALIASES, 1, urls, b.keys_aliased(300), _check_aliases, 3),
        Case(GW_PREFIX, 1, urls, b.prefix(2000), _check_prefix, 10, floor="prefix 100"),
        Case(GW_WINDOWS, 1, urls, windows, _check_windows, 10, floor="windows 7d"),
        Case(GW_WINDOWS_ROUTED, 1, urls, windows, _check_windows, 10, "to the key's node",
             route=route),
        Case(GW_DASHBOARD, 1, urls, b.dashboard(1000), _check_dashboard, 10),
    ]  # fmt: skip


async def warm_mix(client: Pool, urls: list[str], b: Bodies) -> dict[str, int]:
    """The same short warm-up on every cluster before its RSS is read (2 requests in flight);
    returns the errors per kind (a request with a partial answer counts as one)."""
    mix = [
        ("one key", b.one_key(400), _check_one),
        ("1000 keys list", b.keys_list(40), _check_list),
        ("1000 aliases", b.keys_aliased(10), _check_aliases),
        ("prefix", b.prefix(100), _check_prefix),
        ("windows", b.windows(100), _check_windows),
        ("dashboard", b.dashboard(40), _check_dashboard),
    ]
    errors = {}
    for name, bodies, check in mix:
        operation = graphql_operation(client, urls, bodies, check)
        stats = await run_async("warm-up", operation, 2, 600, len(bodies))
        errors[name] = stats.errors
    return errors


async def verify_gateway(client: Pool, url: str, b: Bodies, floor: Floor) -> dict[str, Any]:
    """The gateway's answers equal the floor's on one request of each main kind."""

    async def ask(body: bytes) -> dict[str, Any]:
        response = await client.post(
            url, content=body, headers={"content-type": "application/json"}
        )
        answer: dict[str, Any] = orjson.loads(response.content)
        if answer.get("errors"):
            raise RuntimeError(f"gateway error: {answer['errors']}")
        return answer

    keys = b.key_lists(1)[0]
    answer = await ask(queries.body(queries.KEYS_LIST, {"keys": keys}))
    fields = ("bookings", "revenue", "seats", "cheapest", "dearest")
    longs = {"bookings", "seats"}  # Longs: decimal strings on the wire, the floor's are ints
    got = {
        e["key"]: tuple(
            int(v) if f in longs and v is not None else v
            for f, v in ((f, e["record"][f]) for f in fields)
        )
        for e in answer["data"]["customerTotalsBatch"]["entries"]
    }
    want = {r[0]: tuple(r[1:]) for r in floor.many_per_partition(keys)}
    prefix = b.prefix_args(1)[0]
    page = (await ask(queries.body(queries.PREFIX, {"prefix": prefix, "first": 100})))["data"]
    heavy = b.ks.heavy[0]
    span = {"from": queries.iso(b.ks.window_from_ms), "to": queries.iso(b.ks.window_to_ms)}
    windows = (await ask(queries.body(queries.WINDOWS, {"key": heavy, **span})))["data"]
    floor_windows = floor.windows(heavy, b.ks.window_from_ms, b.ks.window_to_ms)
    one = await ask(queries.body(queries.ONE_KEY, {"key": keys[0]}))
    return {
        "keys_1000_equal_floor": got == want,
        "prefix_100_equal_floor": [r["key"] for r in page["latestBookingPrefix"]["records"]]
        == [r[0] for r in floor.prefix_merge(prefix)],
        "windows_equal_floor": [w["revenue"] for w in windows["hourlyRevenue"]["windows"]]
        == [r[3] for r in floor_windows],
        "windows_per_heavy_key": len(floor_windows),
        "routing_1000_keys_via_node1": answer.get("extensions", {}).get("routing"),
        "routing_one_key_via_node1": one.get("extensions", {}).get("routing"),
        "response_bytes_1000_keys": len(orjson.dumps(answer)),
    }


async def measure_gateway(
    gw: NodeProcesses, b: Bodies, floor: Floor, duration: float, results: Results
) -> None:
    urls = [f"{gw.url(n)}/graphql" for n in gw.ids]
    servers = gw.processes()
    async with http_client() as client:
        results.verification.update(await verify_gateway(client, urls[0], b, floor))
        log(f"verification: {results.verification}")
        results.memory["main_warmup_errors"] = await warm_mix(client, urls, b)
        results.memory["main_node1_rss_mib_after_warmup"] = round(gw.rss_mib("node1"), 1)
        results.memory["main_node1_pss_mib_after_warmup"] = round(gw.pss_mib("node1"), 1)
        log(
            f"node1 after the warm-up: RSS {results.memory['main_node1_rss_mib_after_warmup']} "
            f"MiB, PSS {results.memory['main_node1_pss_mib_after_warmup']} MiB"
        )
        floor_cases = FloorCases(floor, b, duration, results)
        log(report.HEADER)
        route = versus.router(versus.cluster_map(gw.url("node1")))
        for case in gateway_cases(urls, b, route):
            operation = graphql_operation(client, case.urls, case.bodies, case.check, case.route)
            stats = await run_async(
                case.name,
                operation,
                case.concurrency,
                duration,
                MAX_COUNT,
                warmup=case.warmup,
                servers=servers,
                note=case.note,
            )
            log(report.stats_line(stats))
            results.gateway.append(stats)
            if case.floor and case.concurrency == 1:
                floor_cases.measure(case.floor)
        health = get_operation(client, [f"{gw.url('node1')}/health"])
        spread = get_operation(client, [f"{gw.url(node)}/health" for node in gw.ids])
        stats = await run_async(
            GW_HEALTH, health, 16, duration, MAX_COUNT, 50, servers, "HTTP stack only, node1"
        )
        log(report.stats_line(stats))
        results.gateway.append(stats)
        one = graphql_operation(client, urls[:1], b.one_key(20_000), _check_one)
        routed = graphql_operation(client, urls, b.one_key(20_000), _check_one, route)
        cases = [
            (GW_HEALTH_PACED, health),
            (GW_ONE_PACED, one),
            (GW_HEALTH_SPREAD_PACED, spread),
            (GW_ROUTED_PACED, routed),
        ]
        results.gateway += await paced(cases, duration, servers)
        results.memory["main_node1_rss_mib_after_mix"] = round(gw.rss_mib("node1"), 1)
        results.memory["main_node1_pss_mib_after_mix"] = round(gw.pss_mib("node1"), 1)
        results.memory["main_rss_mib_after_mix"] = {n: round(gw.rss_mib(n), 1) for n in gw.ids}


async def paced(
    cases: Sequence[tuple[str, Operation]], duration: float, servers: Servers
) -> list[Stats]:
    """Each case at PACED_RATE, in two rounds asked in turn (ABBA): one row each, its server
    CPU per request over both rounds."""
    rounds: dict[str, list[Stats]] = {name: [] for name, _ in cases}
    for order in (cases, list(reversed(cases))):
        for name, operation in order:
            stats = await run_paced(
                name, operation, PACED_RATE, duration / 2, warmup=50, servers=servers
            )
            log(report.stats_line(stats))
            rounds[name].append(stats)
    return [versus.merged(stats, "two rounds, in turn (ABBA)") for stats in rounds.values()]


# -- 3. the floor ------------------------------------------------------------------------------


class FloorCases:
    """The floor's measurements, one case at a time, run right after the matching gateway
    case so both see the same machine load."""

    def __init__(self, floor: Floor, b: Bodies, duration: float, results: Results) -> None:
        self.duration = max(2.0, duration / 2)
        self.results = results
        one = b.one_key_raw(20_000)
        lists = b.key_lists(400)
        prefixes = b.prefix_args(2000)
        heavy = b.window_keys(2000)
        lo, hi = b.ks.window_from_ms, b.ks.window_to_ms
        self.arguments: dict[str, Callable[[int], tuple[Any, ...]]] = {
            "one key": lambda i: (one[i % len(one)],),
            "1000 keys": lambda i: (lists[i % len(lists)],),
            "prefix 100": lambda i: (prefixes[i % len(prefixes)],),
            "windows 7d": lambda i: (heavy[i % len(heavy)], lo, hi),
        }
        self.candidates = {
            **shapes(floor),
            "windows 7d": [("key = ? AND window_start BETWEEN", floor.windows)],
        }

    def measure(self, case: str) -> None:
        measured: list[Stats] = []
        for label, function in self.candidates[case]:
            stats = run_sync(
                f"floor {case} [{label}]",
                _floor_op(function, self.arguments[case]),
                self.duration,
                MAX_COUNT,
            )
            log(report.stats_line(stats))
            measured.append(stats)
        best = min(measured, key=lambda s: s.p50_ms)
        best.note = "best"
        self.results.floor_best[case] = best.name
        self.results.floor += measured


def _floor_op(
    function: Callable[..., Rows], arguments: Callable[[int], tuple[Any, ...]]
) -> Callable[[int], str | None]:
    def operation(i: int) -> str | None:
        return None if function(*arguments(i)) else "no rows"

    return operation


# -- 4. the naive layer ------------------------------------------------------------------------


async def measure_naive(nv: NodeProcesses, b: Bodies, duration: float, results: Results) -> None:
    bases = [nv.url(n) for n in nv.ids]
    one = b.one_key_raw(20_000)
    one_rr = [f"{bases[i % len(bases)]}/key/{quote(k)}" for i, k in enumerate(one)]
    one_node1 = [f"{bases[0]}/key/{quote(k)}" for k in one]
    batches = [
        [f"{bases[j % len(bases)]}/key/{quote(k)}" for j, k in enumerate(keys)]
        for keys in b.key_lists(60)
    ]
    servers = nv.processes()
    cases: list[tuple[str, int, Any, int, int, str]] = [
        (NAIVE_ONE, 1, get_operation, 20, 1, "round-robin 3 nodes"),
        (NAIVE_ONE_NODE, 16, get_operation, 50, 1, "all to node1"),
        (NAIVE_LIST, 1, batch_operation, 0, 3, "1 GET at a time"),
        (NAIVE_LIST, 16, batch_operation, 0, 3, "16 GETs in flight"),
    ]
    async with http_client() as client:
        for url in (one_rr[0], one_rr[1], one_rr[2]):
            response = await client.get(url)
            if response.status_code != 200:
                raise RuntimeError(f"naive layer: {url} answered {response.status_code}")
        log(report.HEADER)
        for name, concurrency, kind, warmup, min_count, note in cases:
            if kind is batch_operation:
                operation = batch_operation(client, batches, concurrency)
                stats = await run_async(
                    name, operation, 1, duration, MAX_COUNT, 1, servers, note, min_count
                )
                stats.concurrency = concurrency
                stats.extra["keys_per_s"] = round(stats.qps * 1000, 1)
            else:
                urls = one_node1 if "node1" in name else one_rr
                operation = get_operation(client, urls)
                stats = await run_async(
                    name, operation, concurrency, duration, MAX_COUNT, warmup, servers, note
                )
            log(report.stats_line(stats))
            results.naive.append(stats)


# -- 5. side by side with PostgreSQL + PostGraphile --------------------------------------------


def measure_versus(
    project: Any, floor: Floor, gw: NodeProcesses, duration: float, r: Results, stack: ExitStack
) -> None:
    peer = Peer(BENCH_DIR / "peer")
    log("peer: installing PostgreSQL + PostGraphile under .bench/peer (first time: minutes) ...")
    peer.setup()
    csv = BENCH_DIR / "peer" / "latest_booking.csv"
    keys = versus.export_rows(project, floor.files, csv)

    log("versus: PostgreSQL + PostGraphile, the same rows and keys ...")
    stack.callback(peer.stop_postgres)
    peer.start_postgres()
    started = time.monotonic()
    peer.load(versus.TABLE, versus.pg_columns(project), csv)
    r.peer["load_s"] = round(time.monotonic() - started, 1)
    stack.callback(peer.stop_postgraphile)
    peer.start_postgraphile()
    r.peer.update(peer.versions())
    pg = versus.Side("pg", peer.url, versus.bodies(versus.POSTGRAPHILE, keys), peer.processes)

    log(f"versus: the gateway and PostGraphile in turn, {len(keys):,} keys, all to node1 ...")
    gw.start()
    stack.callback(gw.stop)
    gw.wait_serving()
    gateway = versus.bodies(versus.GATEWAY, keys)
    cluster = versus.cluster_map(gw.url("node1"))
    node1 = f"{gw.url('node1')}/graphql"
    sides = [versus.Side("gw", node1, gateway, gw.processes(), cluster), pg]
    r.versus += asyncio.run(versus.measure(sides, duration))
    r.memory["versus_workers"] = len(gw.workers("node1"))
    r.memory["versus_node1_pss_mib"] = round(gw.pss_mib("node1"), 1)
    gw.stop()

    log("versus: the gateway again, one worker a node, the same reads ...")
    logs = BENCH_DIR / "logs" / "one-worker"
    logs.mkdir(parents=True, exist_ok=True)
    one = NodeProcesses.gateway(with_workers(project, 1), logs)
    stack.callback(one.stop)
    one.start()
    one.wait_serving()
    node1 = f"{one.url('node1')}/graphql"
    sides = [versus.Side("gw1", node1, gateway, one.processes(), cluster)]
    r.versus += asyncio.run(versus.measure(sides, duration))
    r.memory["versus_one_worker_node1_pss_mib"] = round(one.pss_mib("node1"), 1)
    one.stop()
    peer.stop_postgraphile()
    peer.stop_postgres()
    for stats in r.versus:
        log(report.stats_line(stats))


# -- 6. memory on the small workload ----------------------------------------------------------


async def _warm(gw: NodeProcesses, b: Bodies) -> dict[str, int]:
    urls = [f"{gw.url(n)}/graphql" for n in gw.ids]
    async with http_client() as client:
        return await warm_mix(client, urls, b)


def measure_small(small: Workload, logs: Any, results: Results, stack: ExitStack) -> None:
    project = small.write_project()
    floor = Floor(small.root / "snapshots", project.cluster.partitions)
    try:
        ks = keyset(floor)
        results.small_workload = describe(small, floor, ks)
    finally:
        floor.close()
    gw = NodeProcesses.gateway(project, logs)
    stack.callback(gw.stop)
    gw.start()
    gw.wait_serving()
    results.memory["small_warmup_errors"] = asyncio.run(_warm(gw, Bodies(ks)))
    results.memory["small_node1_rss_mib_after_warmup"] = round(gw.rss_mib("node1"), 1)
    gw.stop()


# -- comparisons and output --------------------------------------------------------------------


def comparisons(r: Results, timings: SparkTimings) -> list[report.Comparison]:
    def p50(rows: list[Stats], name: str, concurrency: int = 1) -> float | None:
        found = [s for s in rows if s.name == name and s.concurrency == concurrency]
        return found[0].p50_ms if found else None

    def floor_p50(case: str) -> float | None:
        best = r.floor_best.get(case)
        found = r.find(r.floor, best) if best else None
        return found.p50_ms if found else None

    gw_list = p50(r.gateway, GW_LIST)
    gw_one = p50(r.gateway, GW_ONE)
    naive_list_16 = p50(r.naive, NAIVE_LIST, 16)
    naive_list_1 = p50(r.naive, NAIVE_LIST, 1)
    one_node = r.find(r.gateway, GW_ONE_NODE)
    health = r.find(r.gateway, GW_HEALTH)
    rss_main = r.memory.get("main_node1_rss_mib_after_warmup")

    def vs(case: str) -> tuple[Stats | None, Stats | None]:
        return r.find(r.versus, f"gw {case}"), r.find(r.versus, f"pg {case}")

    def p50_ratio(case: str) -> float | None:
        gw, pg = vs(case)
        return ratio(gw.p50_ms if gw else None, pg.p50_ms if pg else None)

    gw16, pg16 = vs(versus.ONE_16)
    routed16, _ = vs(versus.ROUTED_16)
    one16 = r.find(r.versus, f"gw1 {versus.ONE_16}")
    one_routed16 = r.find(r.versus, f"gw1 {versus.ROUTED_16}")
    workers = r.memory.get("versus_workers")
    routed, _ = vs(versus.ROUTED)
    gw_one_vs, _ = vs(versus.ONE)
    rss_small = r.memory.get("small_node1_rss_mib_after_warmup")
    health_cpu = health.server_cpu_ms if health else None
    one_paced = r.find(r.gateway, GW_ONE_PACED)
    health_paced = r.find(r.gateway, GW_HEALTH_PACED)
    routed_paced = r.find(r.gateway, GW_ROUTED_PACED)
    spread_paced = r.find(r.gateway, GW_HEALTH_SPREAD_PACED)

    def cpu_of(stats: Stats | None) -> str:
        cpu = stats.server_cpu_ms if stats else None
        return "?" if cpu is None else f"{cpu:.2f}"

    def over_paced(stats: Stats | None, health: Stats | None) -> float | None:
        """A paced case's node CPU per request over GET /health's at the same rate."""
        return ratio(
            stats.server_cpu_ms if stats else None, health.server_cpu_ms if health else None
        )

    return [
        at_least(
            "one key, 16 clients to one node: gateway req/s / PostGraphile req/s",
            ratio(gw16.qps if gw16 else None, pg16.qps if pg16 else None),
            1.5, "x", f"{gw16.qps:.0f} vs {pg16.qps:.0f} req/s" if gw16 and pg16 else "",
        ),
        at_most(
            "one key, sequential: gateway p50 / PostGraphile p50",
            p50_ratio(versus.ONE), 0.5, "x", "concurrency 1",
        ),
        at_most(
            "1000 keys as a list: gateway p50 / PostGraphile p50",
            p50_ratio(versus.LIST), 0.5, "x", "latestBookingBatch vs latestBookingByKeys",
        ),
        at_most(
            "1000 aliased fields (variables): gateway p50 / PostGraphile p50",
            p50_ratio(versus.ALIASES), 0.25, "x", "one document per key set",
        ),
        at_most(
            "node CPU per one-key request / per GET /health (16 clients)",
            ratio(gw16.server_cpu_ms if gw16 else None, health_cpu), 2, "x",
            f"all 3 nodes, hops included: {cpu_of(gw16)} vs {cpu_of(health)} ms",
        ),
        at_most(
            "the same, routed",
            ratio(routed16.server_cpu_ms if routed16 else None, health_cpu), 2, "x",
            f"each to its key's active replica (clients/python/routing.py): {cpu_of(routed16)} ms",
        ),
        at_most(
            f"the same, both at {PACED_RATE} req/s to node1",
            over_paced(one_paced, health_paced),
            2, "x", f"all 3 nodes, hops included: {cpu_of(one_paced)} vs {cpu_of(health_paced)} ms",
        ),
        at_most(
            f"the same, routed by the client, both over the nodes at {PACED_RATE} req/s",
            over_paced(routed_paced, spread_paced),
            2, "x", f"each to its key's active replica: {cpu_of(routed_paced)} vs "
            f"{cpu_of(spread_paced)} ms (GET /health round-robin; to node1 alone "
            f"{over_paced(routed_paced, health_paced) or 0:.2f}x)",
        ),
        at_least(
            "one key, 16 clients, routed: gateway req/s / PostGraphile req/s",
            ratio(routed16.qps if routed16 else None, pg16.qps if pg16 else None),
            1, "x", f"{routed16.qps:.0f} req/s" if routed16 else "",
        ),
        info(
            "one key, sequential p50: routed / to node1",
            ratio(routed.p50_ms if routed else None, gw_one_vs.p50_ms if gw_one_vs else None),
            "x", "",
        ),
        below(
            "node1 PSS at the big workload, every worker's",
            r.memory.get("main_node1_pss_mib_after_warmup"), 400, "MiB", "after the warm-up mix",
        ),
        below(
            "node1 PSS after the whole mix, every worker's",
            r.memory.get("main_node1_pss_mib_after_mix"), 400, "MiB",
            f"RSS added up: {r.memory.get('main_node1_rss_mib_after_mix')} MiB",
        ),
        info(
            "node1 RSS at the big workload, its processes' added up",
            rss_main, "MiB", "after the warm-up mix (a shared page counted in each process)",
        ),
        at_least(
            "one key, 16 clients: node1 with its workers / with one, req/s",
            ratio(gw16.qps if gw16 else None, one16.qps if one16 else None),
            1, "x", f"{workers} workers: {gw16.qps:.0f} vs {one16.qps:.0f} req/s"
            if gw16 and one16 else "",
        ),
        info(
            "one key, 16 clients, routed: node1 with its workers / with one, req/s",
            ratio(routed16.qps if routed16 else None, one_routed16.qps if one_routed16 else None),
            "x", "",
        ),
        at_most(
            "node1 PSS with its workers / with one, after the same reads",
            ratio(r.memory.get("versus_node1_pss_mib"),
                  r.memory.get("versus_one_worker_node1_pss_mib")),
            1.3, "x",
            f"{r.memory.get('versus_node1_pss_mib')} vs "
            f"{r.memory.get('versus_one_worker_node1_pss_mib')} MiB",
        ),  # fmt: skip
        at_most(
            "1000 keys, one list: gateway p50 / floor p50",
            ratio(gw_list, floor_p50("1000 keys")),
            2,
            "x",
            f"floor: {r.floor_best.get('1000 keys', '')}",
        ),
        info(
            "one key: gateway p50 / floor p50",
            ratio(gw_one, floor_p50("one key")),
            "x",
            f"floor: {r.floor_best.get('one key', '')}",
        ),
        info(
            "prefix 100 rows: gateway p50 / floor p50",
            ratio(p50(r.gateway, GW_PREFIX), floor_p50("prefix 100")),
            "x",
            f"floor: {r.floor_best.get('prefix 100', '')}",
        ),
        info(
            "windows 7 days: gateway p50 / floor p50",
            ratio(p50(r.gateway, GW_WINDOWS), floor_p50("windows 7d")),
            "x",
            "round-robin over the nodes",
        ),
        info(
            "windows 7 days, routed: gateway p50 / floor p50",
            ratio(p50(r.gateway, GW_WINDOWS_ROUTED), floor_p50("windows 7d")),
            "x",
            "each to its key's node (clients/python/routing.py)",
        ),
        at_least(
            "1000 keys: naive (16 GETs in flight) p50 / gateway p50",
            ratio(naive_list_16, gw_list),
            20,
            "x",
            "naive at its best concurrency vs one gateway request",
        ),
        info(
            "1000 keys: naive (1 GET at a time) p50 / gateway p50",
            ratio(naive_list_1, gw_list),
            "x",
            "the same keys, sequential GETs",
        ),
        at_least(
            "one key: naive p50 / gateway p50",
            ratio(p50(r.naive, NAIVE_ONE), gw_one),
            1,
            "x",
            "both concurrency 1, round-robin",
        ),
        below("one key: gateway p50", gw_one, 5, "ms", "concurrency 1, round-robin 3 nodes"),
        at_least(
            "one node, 16 concurrent clients: gateway qps",
            one_node.qps if one_node else None,
            1000,
            "qps",
            f"driver CPU {one_node.client_cpu:.2f} core" if one_node else "",
        ),
        info(
            "one node, 16 concurrent: GET /health qps (HTTP stack ceiling)",
            health.qps if health else None,
            "qps",
            "uvicorn + Starlette alone on node1, same driver",
        ),
        at_most(
            "pipeline / plain Spark job (warm medians)",
            ratio(timings.pipeline_median, timings.plain_median),
            1.5,
            "x",
            f"pipeline {timings.pipeline_s} s, plain {timings.plain_s} s",
        ),
        below(
            f"node1 RSS: {_size(r.workload)} / {_size(r.small_workload)} customers workload",
            ratio(rss_main, rss_small),
            2,
            "x",
            f"{rss_main} MiB vs {rss_small} MiB after the same warm-up",
        ),
    ] + freshness_comparisons(r) + live_comparisons(r)  # fmt: skip


def live_comparisons(r: Results) -> list[report.Comparison]:
    live = r.live
    if live is None:
        return []
    detail = (
        f"{live.subscriptions} subscriptions on node1 to keys it does not host, "
        f"{live.rounds} rounds, {live.updates_received}/{live.updates_expected} updates, "
        f"load {live.load}"
    )
    return [
        at_least(
            "subscription updates delivered per second (one node, p50 of rounds)",
            live.updates_per_s_p50,
            1000,
            "/s",
            f"slowest round {live.updates_per_s_min}/s; {detail}",
        ),
        at_most(
            "switch on the owner -> update at a subscriber on another node, p50",
            live.switch_to_subscriber_p50_s,
            0.5,
            "s",
            f"p99 {live.switch_to_subscriber_p99_s} s",
        ),
        info(
            "node memory per open subscription",
            live.kib_per_subscription,
            "KiB",
            f"RSS growth over {live.subscriptions} subscriptions; "
            f"{live.node_cpu_ms_per_update} ms of node CPU per update",
        ),
    ]


def freshness_comparisons(r: Results) -> list[report.Comparison]:
    if not r.freshness:
        return []
    main, small = r.freshness[0], r.freshness[-1]
    return [
        *freshness_rows(main),
        *sustained_rows(r.sustained),
        *(stage_row(stage, delays) for stage, delays in main.stages.items()),
        *(freshness_rows(small) if small is not main else []),
        *recovery_rows(r.recovery),
        *install_rows(r.installs),
        at_most(
            f"micro-batch cost: {main.workload} / {small.workload} workload (p50 s)",
            ratio(main.batch_seconds_p50, small.batch_seconds_p50),
            1.5,
            "x",
            f"{main.batch_seconds_p50} s ({main.batch_records_p50} records) vs "
            f"{small.batch_seconds_p50} s ({small.batch_records_p50} records)",
        ),
        at_most(
            "one-key p99 while the pipeline runs / idle",
            ratio(main.reads_live_p99_ms, main.reads_idle_p99_ms),
            1.5,
            "x",
            f"p50 {main.reads_idle_p50_ms} -> {main.reads_live_p50_ms} ms, "
            f"p99 {main.reads_idle_p99_ms} -> {main.reads_live_p99_ms} ms, 4 clients",
        ),
    ]


def sustained_rows(run: freshness.Freshness | None) -> list[report.Comparison]:
    """Issue 49's sustained rate: the producer (a process of its own) keeps it up, and the
    lag stays bounded: the appends of the run's last third are visible as soon as those of
    its first."""
    if run is None:
        return []
    name = f"{run.workload} on Kafka, {run.rate} events/s for {run.seconds:g} s:"
    detail = (
        f"visible p50 {run.visible_p50_s} s, p99 {run.visible_p99_s} s, max {run.visible_max_s}"
        f" s; {run.ticks_late} producer ticks late; {run.not_visible} appends never seen; "
        f"micro-batch p50 {run.batch_seconds_p50} s ({run.batch_records_p50} records); "
        f"load {run.load}"
    )
    return [
        at_least(f"{name} appended", run.appended_per_s, 0.95 * run.rate, "/s", detail),
        at_most(
            f"{name} visible p50, last third / first third",
            ratio(run.visible_last_third_p50_s, run.visible_first_third_p50_s),
            1.5,
            "x",
            f"{run.visible_first_third_p50_s} s -> {run.visible_last_third_p50_s} s; {detail}",
        ),
    ]


def freshness_rows(run: freshness.Freshness) -> list[report.Comparison]:
    """Issue 25's targets on one workload: visible on any node, installed on every replica
    (the nodes' histograms, every worker's), pushed to a subscriber."""
    detail = (
        f"{run.appended_per_s} records/s appended ({run.ticks_late} ticks late), "
        f"{run.not_visible} never seen, load {run.load}; p50 during the read mix "
        f"{run.visible_during_reads_p50_s} s, max {run.visible_max_s} s"
    )
    installed = run.stages.get("installed", {})
    every = f"{installed.get('records', 0):.0f} records counted, the read mix's included"
    name = f"{run.workload} on {run.log}: append ->"
    pushed = f"p99 {run.pushed_p99_s} s"
    anchor = f"the same appends read by a plain consumer of the topic, p99 {run.anchor_p99_s} s"
    return [
        info(
            f"{name} read by a plain Kafka consumer (the anchor), p50",
            run.anchor_p50_s,
            "s",
            anchor,
        ),  # fmt: skip
        at_most(f"{name} visible on any node, p50", run.visible_p50_s, 1.5, "s", detail),
        at_most(f"{name} visible on any node, p99", run.visible_p99_s, 3, "s", detail),
        at_most(f"{name} installed on every replica, p50", installed.get("p50_s"), 1.5, "s", every),
        at_most(f"{name} installed on every replica, p99", installed.get("p99_s"), 3, "s", every),
        at_most(f"{name} subscription push, p50", run.pushed_p50_s, 1.6, "s", pushed),
    ]


def recovery_rows(measured: recovery.Recovery | None) -> list[report.Comparison]:
    if measured is None:
        return []
    detail = (
        f"{measured.killed_at_records} records appended before the kill; the restarted "
        f"pipeline's first publication {measured.restarted_s} s after it; load {measured.load}"
    )
    name = "recovery: kill -9 of the pipeline -> every node at the kill's positions"
    return [at_most(name, measured.recovered_s, 30, "s", detail)]


def install_rows(measured: installs.Installs | None) -> list[report.Comparison]:
    """A delta's writing late in the chain against early, and a fresh worker's; its install on
    a node late against early, and merging the whole overlay there (the former install);
    measured on the same chain in the same run."""
    if measured is None:
        return []
    level, whole = measured.halves(measured.install_ms), measured.halves(measured.whole_ms)
    detail = (
        f"{measured.deltas} deltas of {measured.records} records, medians of the first / "
        f"second half: level {level[0]} / {level[1]} ms, the whole overlay merged {whole[0]} / "
        f"{whole[1]} ms; at most {max(measured.levels)} levels"
    )
    name = "delta install late in a chain / early (a level of its own)"
    write, cold = measured.halves(measured.write_ms), measured.halves(measured.cold_write_ms)
    written = (
        f"medians of the first / second half: warm {write[0]} / {write[1]} ms, by a fresh "
        f"worker (every layer read) {cold[0]} / {cold[1]} ms"
    )
    return [
        at_most(
            "delta written late in a chain / early (warm rows)",
            ratio(write[1], write[0]),
            1.2,
            "x",
            written,
        ),
        at_most(name, ratio(level[1], level[0]), 1.2, "x", detail),
    ]


def stage_row(stage: str, delays: dict[str, float]) -> report.Comparison:
    """append -> one stage, from the nodes' freshness histograms (the targets of the last,
    installed, are in freshness_rows)."""
    name = f"freshness p50: append -> {stage} (node histograms)"
    detail = f"p99 {delays['p99_s']} s, {delays['records']:.0f} records counted"
    return report.info(name, delays["p50_s"], "s", detail)


def _size(workload: dict[str, Any]) -> str:
    customers = int(workload.get("customers", 0))
    return f"{customers / 1e6:g}M" if customers >= 1_000_000 else f"{customers / 1e3:g}k"


def print_table(r: Results, timings: SparkTimings) -> None:
    lines = ["", "=" * 120]
    lines += report.header_lines(r.machine, r.workload)
    if r.small_workload:
        lines.append(
            "small workload (memory): "
            + ", ".join(f"{k}={r.small_workload[k]}" for k in ("customers", "events", "keys"))
        )
    lines.append(
        f"settings: {r.settings['duration']} s per measurement, single asyncio raw HTTP/1.1 client "
        "process, keep-alive; p50/p99 per operation; srv ms/op = CPU of all 3 node processes "
        "per operation"
    )
    if timings.pipeline_s:
        lines.append(
            f"pipeline: first run {timings.pipeline_first_s} s (cold JVM, builds the served "
            f"snapshots); warm full builds {timings.pipeline_s} s; plain Spark job "
            f"{timings.plain_s} s"
        )
    else:
        lines.append(
            "pipeline: not measured (reused data that was built without the Spark comparison; "
            "run without --reuse)"
        )
    lines += ["", report.HEADER, "-" * 120]
    lines += [report.stats_line(s) for s in r.gateway]
    lines.append("")
    lines += [report.stats_line(s) for s in r.floor]
    lines.append("")
    lines += [report.stats_line(s) for s in r.naive]
    lines.append("")
    if r.versus:
        lines.append(
            f"versus (all to node1 / one PostGraphile; both alone on the machine): {r.peer}"
        )
        lines += [report.stats_line(s) for s in r.versus]
        lines.append("")
    lines += report.comparison_lines(r.comparisons)
    m = r.memory
    lines.append("")
    lines.append(
        f"memory (node1 RSS, MiB): {_size(r.workload)} after warm-up "
        f"{m.get('main_node1_rss_mib_after_warmup')}, after the whole mix "
        f"{m.get('main_node1_rss_mib_after_mix')} (PSS {m.get('main_node1_pss_mib_after_warmup')}"
        f" and {m.get('main_node1_pss_mib_after_mix')}); small after warm-up "
        f"{m.get('small_node1_rss_mib_after_warmup')}"
    )
    lines.append(f"verification: {r.verification}")
    lines.append(f"results: {RESULTS}")
    log("\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    main_w = Workload.named(args.customers, args.events)
    small_w = Workload.named(max(1, args.customers // 10), max(1, args.events // 10))
    results = Results(
        machine=report.machine(),
        settings={
            "duration": args.duration,
            "quick": args.quick,
            "reuse": args.reuse,
            "spark_runs": args.spark_runs,
        },
    )
    started = time.monotonic()
    logs = BENCH_DIR / "logs"
    timings = build(args, main_w, small_w)
    results.spark = timings.as_dict()
    with ExitStack() as stack:
        project = main_w.write_project()
        floor = Floor(main_w.root / "snapshots", project.cluster.partitions)
        stack.callback(floor.close)
        ks = keyset(floor)
        b = Bodies(ks)
        results.workload = describe(main_w, floor, ks)
        log("workload: " + json.dumps(results.workload))

        log("gateway: starting 3 nodes (floor rows run right after their gateway case) ...")
        gw = NodeProcesses.gateway(project, logs)
        stack.callback(gw.stop)
        gw.start()
        gw.wait_serving()
        asyncio.run(measure_gateway(gw, b, floor, args.duration, results))
        gw.stop()

        log("naive per-key layer: 3 nodes on the same ports ...")
        nv = NodeProcesses.naive(project, logs)
        stack.callback(nv.stop)
        nv.start()
        asyncio.run(measure_naive(nv, b, args.duration, results))
        nv.stop()

        if not args.skip_peer:
            measure_versus(project, floor, gw, args.duration, results, stack)
            log("by value: top 10, a filtered ordered page, totals, vs PostGraphile ...")
            results.by_value = by_value.run(main_w, args.duration)
            results.by_value.append(by_value.leaderboard_line(main_w, by_value.ROUNDS))
            log("\n".join(results.by_value))

        log("joins: 1000 bookings with their trips, against two requests ...")
        results.joins = joins.run(main_w, args.duration)
        log("\n".join(results.joins))

        log("versions: a key as of a time, against its latest; the history's size ...")
        results.versions = versions.run(main_w, args.duration)
        log("\n".join(results.versions))

        log(f"memory: small workload {small_w.root.name} ...")
        measure_small(small_w, logs, results, stack)

    if not args.skip_freshness:
        seconds = 20.0 if args.quick else 60.0
        for w in (main_w, small_w):
            log(f"freshness: {w.name} on Kafka, {args.rate} events/s for {seconds:g} s ...")
            results.freshness.append(freshness.measure(w, args.rate, seconds, logs, kafka=True))
            log("  " + json.dumps(results.freshness[-1].as_dict()))
        log(f"sustained: {main_w.name} on Kafka, {SUSTAINED_RATE} events/s for {seconds:g} s ...")
        results.sustained = freshness.measure(main_w, SUSTAINED_RATE, seconds, logs, kafka=True)
        log("  " + json.dumps(results.sustained.as_dict()))
        log(f"recovery: kill -9 of the pipeline at {args.rate} events/s, then a restart ...")
        results.recovery = recovery.measure(main_w, args.rate, logs)
        log("  " + json.dumps(results.recovery.as_dict()))
        log("installs: 48 deltas of 400 records on one partition, in-process ...")
        results.installs = installs.measure(main_w, 48, 400)
        log("  " + json.dumps(results.installs.as_dict()))

    if not args.skip_subscriptions:
        log("subscriptions: 1000 on one node, 10 rounds of changes ...")
        results.live = subscriptions.measure(small_w, 1000, 10, logs)
        log("  " + json.dumps(results.live.as_dict()))

    results.comparisons = comparisons(results, timings)
    results.settings["total_s"] = round(time.monotonic() - started, 1)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results.as_dict(), indent=2, default=str))
    print_table(results, timings)
    return 0


if __name__ == "__main__":
    sys.exit(main())
