"""Subscriptions under load: how many updates one node delivers, how long from a version switch
on the owning node to a subscriber on another node, and what an open subscription costs.

    python -m bench.subscriptions --workload small --subscriptions 1000 --rounds 10

It runs on a copy of a built workload (.bench/live-<name>/). A separate process (the load
generator: asyncio, 10 WebSockets) opens the subscriptions on node1, one per customer, all of
customers whose partition node1 does not host: every update crosses nodes. Each round
produces one booking for every subscribed customer, runs the pipeline once and tells the
owning nodes (as the pipeline does), so every subscription changes once per round.

Each update's latency is its arrival time at the client minus the moment the first owning
replica of its partition began serving the new version (`served_ms` in the owner's status;
one clock: the same machine). A round's delivery rate is its updates over the time from
that first switch to the last update's arrival. Memory per subscription is node1's RSS
growth from no subscription to all of them open, over their count.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
import websockets

from bench.driver import percentile
from bench.freshness import copy_workload
from bench.procs import NodeProcesses
from bench.workload import BENCH_DIR, NAMES, Workload
from contracts import eventlog
from contracts.cluster_secret import secret_headers
from contracts.eventlog import Record
from contracts.partitioner import partition_for
from contracts.project import Project
from spark_pipeline import job
from spark_pipeline.publish import notify_nodes
from spark_pipeline.spark import spark_session

SUBSCRIBER_NODE = "node1"
PER_CONNECTION = 100  # the default max_subscriptions_per_connection
QUERY = "subscription($k: String!) { customerTotals(key: $k) { record { bookings revenue } } }"
SETTLE_S = 3.0  # after a round's notify: every update has arrived well before


@dataclass
class Live:
    workload: str
    subscriptions: int
    rounds: int
    updates_expected: int = 0
    updates_received: int = 0
    updates_per_s_p50: float | None = None  # per round: updates / (last arrival - switch)
    updates_per_s_min: float | None = None
    switch_to_subscriber_p50_s: float | None = None
    switch_to_subscriber_p99_s: float | None = None
    round_spread_p50_s: float | None = None  # first switch -> last update of a round
    kib_per_subscription: float | None = None
    node_cpu_ms_per_update: float | None = None
    load: list[float] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def subscribed_keys(project: Project, customers: int, count: int) -> list[str]:
    """`count` customers whose partition the subscriber node does not host."""
    hosted = set(project.cluster.hosted_by(SUBSCRIBER_NODE))
    partitions = project.cluster.partitions
    keys = []
    for i in range(customers):
        key = f"C{i:06d}"
        if partition_for(key, "string", partitions) not in hosted:
            keys.append(key)
            if len(keys) == count:
                break
    return keys


def measure(workload: Workload, subscriptions: int, rounds: int, logs: Path) -> Live:
    project = copy_workload(workload, "live")
    result = Live(workload.name, subscriptions, rounds)
    nodes = NodeProcesses.gateway(project, logs / f"live-{workload.name}")
    keys = subscribed_keys(project, workload.customers, subscriptions)
    folder = project.path.parent
    (folder / "keys.json").write_bytes(orjson.dumps(keys))
    out, ready = folder / "arrivals.json", folder / "ready"
    spark = spark_session()
    try:
        nodes.start()
        nodes.wait_serving()
        rss_before = nodes.rss_mib(SUBSCRIBER_NODE)
        url = nodes.url(SUBSCRIBER_NODE).replace("http://", "ws://") + "/graphql"
        command = [sys.executable, "-m", "bench.subscriptions", "subscribe", url, str(folder)]
        client = subprocess.Popen(command)
        _wait_for(ready, client)
        time.sleep(1.0)  # the node settles after the burst of first evaluations
        opened = nodes.rss_mib(SUBSCRIBER_NODE) - rss_before
        result.kib_per_subscription = round(opened * 1024 / subscriptions, 1)
        result.load.append(os.getloadavg()[0])
        node = nodes.process(SUBSCRIBER_NODE)
        cpu_before = sum(node.cpu_times()[:2])
        switches: list[dict[int, float]] = []
        for number in range(rounds):
            _book(project, keys, number)
            report = job.run(project, spark, notify=False)
            notify_nodes(project, set(report.versions))
            time.sleep(SETTLE_S)
            switches.append(switch_times(project))
        cpu_ms = (sum(node.cpu_times()[:2]) - cpu_before) * 1000
        result.load.append(os.getloadavg()[0])
        client.send_signal(signal.SIGTERM)
        client.wait(60)
        arrivals = orjson.loads(out.read_bytes())
    finally:
        spark.stop()
        nodes.stop()
    _evaluate(result, project, keys, switches, arrivals, cpu_ms)
    return result


def _wait_for(ready: Path, client: subprocess.Popen[bytes], timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while not ready.exists():
        if client.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("the subscribers did not get their first results")
        time.sleep(0.1)


def _book(project: Project, keys: list[str], number: int) -> None:
    topic = project.topics["bookings"]
    value = {"trip": "Berlin→Hamburg", "price": 10.0 + number, "seats": 1}
    now = eventlog.now_ms()
    records = [Record(key, value, now) for key in keys]
    eventlog.produce(project.log_dir, topic, project.cluster.partitions, records)


def switch_times(project: Project) -> dict[int, float]:
    """partition -> when its first replica began serving its current version (seconds)."""
    first: dict[int, tuple[int, float]] = {}
    headers = secret_headers(project.cluster.secret)
    for node in project.cluster.nodes:
        status = httpx.get(f"{node.url}/internal/status", headers=headers, timeout=30).json()
        for p, state in status["partitions"].items():
            version, served = state["version"], state["served_ms"] / 1000
            known = first.get(int(p))
            if known is None or version > known[0] or (version == known[0] and served < known[1]):
                first[int(p)] = (version, served)
    return {p: served for p, (_, served) in first.items()}


def _evaluate(
    result: Live,
    project: Project,
    keys: list[str],
    switches: list[dict[int, float]],
    arrivals: list[list[Any]],
    cpu_ms: float,
) -> None:
    partitions = project.cluster.partitions
    partition_of = {key: partition_for(key, "string", partitions) for key in keys}
    by_round: dict[int, list[tuple[str, float]]] = defaultdict(list)
    for key, revision, at in arrivals:
        if revision >= 2:  # revision 1 is the first result; round r brings revision r + 2
            by_round[revision - 2].append((key, at))
    latencies, rates, spreads = [], [], []
    for number, switched in enumerate(switches):
        received = by_round.get(number, [])
        result.updates_received += len(received)
        if not received:
            continue
        latencies += [at - switched[partition_of[key]] for key, at in received]
        start = min(switched[partition_of[key]] for key, _ in received)
        spread = max(at for _, at in received) - start
        spreads.append(spread)
        rates.append(len(received) / spread)
    result.updates_expected = len(keys) * len(switches)
    if latencies:
        latencies.sort()
        result.switch_to_subscriber_p50_s = round(percentile(latencies, 50), 3)
        result.switch_to_subscriber_p99_s = round(percentile(latencies, 99), 3)
        result.updates_per_s_p50 = round(sorted(rates)[len(rates) // 2])
        result.updates_per_s_min = round(min(rates))
        result.round_spread_p50_s = round(sorted(spreads)[len(spreads) // 2], 3)
    if result.updates_received:
        result.node_cpu_ms_per_update = round(cpu_ms / result.updates_received, 3)


async def subscribe(url: str, folder: Path) -> None:
    """The load generator: every key's subscription, each arrival's (key, revision, time)."""
    keys: list[str] = orjson.loads((folder / "keys.json").read_bytes())
    arrivals: list[tuple[str, int, float]] = []
    first: set[str] = set()
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)

    async def connection(chunk: list[str]) -> None:
        async with websockets.connect(
            url, subprotocols=[websockets.Subprotocol("graphql-transport-ws")], max_size=None
        ) as ws:
            await ws.send(orjson.dumps({"type": "connection_init"}).decode())
            await ws.recv()
            for key in chunk:
                payload = {"query": QUERY, "variables": {"k": key}}
                message = {"id": key, "type": "subscribe", "payload": payload}
                await ws.send(orjson.dumps(message).decode())
            async for raw in ws:
                at = time.time()
                message = orjson.loads(raw)
                if message.get("type") != "next":
                    raise RuntimeError(f"not an update: {message}")
                arrivals.append((message["id"], message["payload"]["extensions"]["revision"], at))
                first.add(message["id"])
                if len(first) == len(keys):
                    (folder / "ready").touch()

    chunks = [keys[i : i + PER_CONNECTION] for i in range(0, len(keys), PER_CONNECTION)]
    tasks = [asyncio.create_task(connection(chunk)) for chunk in chunks]
    await stop.wait()
    for task in tasks:
        task.cancel()
    (folder / "arrivals.json").write_bytes(orjson.dumps(arrivals))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["subscribe"]:
        asyncio.run(subscribe(argv[1], Path(argv[2])))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", default="small", choices=NAMES)
    parser.add_argument("--subscriptions", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args(argv)
    workload = Workload.built(args.workload)
    if workload is None:
        print(f"build the {args.workload} workload first: python -m bench.run", file=sys.stderr)
        return 2
    result = measure(workload, args.subscriptions, args.rounds, BENCH_DIR / "logs")
    print(orjson.dumps(result.as_dict(), option=orjson.OPT_INDENT_2).decode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
