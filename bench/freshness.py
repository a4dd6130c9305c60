"""Freshness of the continuous pipeline: how long from an event's append to a query on any
node reflecting it, while producers append at a steady rate; what one micro-batch costs; and
what the read mix costs meanwhile, beside the same mix on the idle cluster.

    python -m bench.freshness --workload main --rate 1000 --seconds 60
    python -m bench.freshness --workload main --kafka --rate 10000   # on a Kafka broker
    python -m bench.freshness --workload main --bucket   # snapshots in a bucket on S3Proxy

It runs on a copy of a built workload (.bench/fresh-<name>/: log and snapshots), so the other
measurements keep their state; with --kafka, on a broker of its own there, the log's records
copied into its topics first (bench/on_kafka.py), the producer producing to Kafka (an append
is the producer's acknowledgement), and beside it the anchor: a plain consumer of the same
topic in a process of its own, timing each tick's last record from its acknowledgement to
its arrival. With --bucket, the snapshots are published to a bucket on an S3 server of its
own (S3Proxy: bench/object_store.py onto_bucket) and the nodes pull from there. Visibility is
read from positions, not guessed: an append to
partition p ending at offset o is visible once a query's meta says p's position is past o.
A poller asks a scan of every partition on the nodes in turn every POLL_S; its answer's
arrival time counts (an upper bound, by the poll period at most). A subscriber to the same
query on node2 times each push (append -> push). Appends made while the
read mix runs (4 clients, 10 s, saturating the 2 cores the pipeline shares) are reported
apart from the others. Measuring starts once the pipeline follows the log (after Spark's
start); the nodes' freshness histograms, scraped before and after, break the delay down
by stage (append -> read, written, published, installed).
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import contextlib
import dataclasses
import multiprocessing
import os
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
import websockets
from prometheus_client.parser import text_string_to_metric_families

from bench.driver import graphql_operation, http_client, percentile, run_async
from bench.object_store import onto_bucket
from bench.on_kafka import onto_kafka
from bench.procs import NodeProcesses
from bench.queries import body
from bench.workload import BENCH_DIR, NAMES, Workload, with_settings, with_workers
from contracts import eventlog
from contracts.eventlog import Record
from contracts.freshness import STAGES, Delays
from contracts.partitioner import partition_for
from contracts.project import Project
from stategate.broker import Broker
from stategate.demo.bookings import _fares, _values
from stategate.s3server import S3Server

POLL_S = 0.2  # a poll costs the nodes a scan of every partition: 5 a second, not 20
TICK_S = 0.1  # the producers append one batch per partition this often
POSITIONS_SELECTION = (
    "{ latestBookingRange(first: 1) "
    "{ meta { partitions { partition position { topic offset } } } } }"
)
POSITIONS = body(POSITIONS_SELECTION)
SUBSCRIBER_NODE = "node2"  # hosts 6 of the 9 partitions: most pushes also wait for a peer
ONE_KEY = "query($k: String!) { customerTotals(key: $k) { record { bookings revenue } } }"
FRESHNESS = Delays.NAME
BATCH_LINE = re.compile(rb"micro-batch (\d+): (\d+) records, .* changed in ([0-9.]+) s")


@dataclass
class Append:
    at: float  # time.perf_counter() when the append returned
    partition: int
    end: int  # the offset after the appended records
    records: int


@dataclass
class Freshness:
    workload: str
    rate: int
    seconds: float
    pipeline_nice: int = 0  # the pipeline's niceness (settings.pipeline_niceness)
    log: str = "file"  # or "kafka"
    snapshots: str = "folder"  # or "bucket" (an S3 server's)
    appended: int = 0
    appended_per_s: float = 0.0  # records the producer appended a second (it may fall behind)
    ticks_late: int = 0  # producer ticks that started over a tick late (it fell behind)
    visible_p50_s: float | None = None  # appends outside the read-mix window
    visible_p99_s: float | None = None
    visible_max_s: float | None = None  # the largest lag an append saw, outside the read mix
    visible_during_reads_p50_s: float | None = None  # appends while 4 clients were reading
    pushed_p50_s: float | None = None  # append -> a subscription's push showing it, as visible
    pushed_p99_s: float | None = None
    # lag bounded: the p50 of the appends of the run's first third, and of its last
    visible_first_third_p50_s: float | None = None
    visible_last_third_p50_s: float | None = None
    # Kafka: the same appends, acknowledged -> read by a plain consumer of the topic
    anchor_p50_s: float | None = None
    anchor_p99_s: float | None = None
    not_visible: int = 0
    batch_seconds_p50: float | None = None
    batch_records_p50: float | None = None
    batches: int = 0
    reads_idle_p50_ms: float | None = None
    reads_idle_p99_ms: float | None = None
    reads_live_p50_ms: float | None = None
    reads_live_p99_ms: float | None = None
    load: list[float] = field(default_factory=list)
    # stage -> p50 and p99 of append -> stage (s), and the records counted, from the nodes'
    # stategate_freshness_seconds over the producer's run (every node, every install)
    stages: dict[str, dict[str, float]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


Histograms = dict[str, dict[str, float]]  # stage -> le (or "count") -> records


def scrape_freshness(urls: list[str]) -> Histograms:
    """The nodes' freshness histograms, summed over the nodes."""
    found: Histograms = defaultdict(lambda: defaultdict(float))
    with httpx.Client(timeout=10) as client:
        for url in urls:
            text = client.get(url.removesuffix("/graphql") + "/metrics").text
            for family in text_string_to_metric_families(text):
                if family.name != FRESHNESS:
                    continue
                for sample in family.samples:
                    stage = sample.labels["stage"]
                    if sample.name.endswith("_bucket"):
                        found[stage][sample.labels["le"]] += sample.value
                    elif sample.name.endswith("_count"):
                        found[stage]["count"] += sample.value
    return found


def stage_delays(before: Histograms, after: Histograms) -> dict[str, dict[str, float]]:
    """Per stage, the p50 and p99 delay of the records counted between two scrapes."""
    delays = {}
    for stage in STAGES:
        now, then = after.get(stage, {}), before.get(stage, {})
        grown = {le: n - then.get(le, 0.0) for le, n in now.items()}
        if grown.get("count", 0) > 0:
            delays[stage] = {
                "p50_s": bucket_quantile(0.5, grown),
                "p99_s": bucket_quantile(0.99, grown),
                "records": grown["count"],
            }
    return delays


def bucket_quantile(q: float, cumulative: dict[str, float]) -> float:
    """Prometheus's histogram_quantile: linear within the bucket the rank falls in."""
    bounds = sorted((float(le), n) for le, n in cumulative.items() if le != "count")
    rank = q * bounds[-1][1]
    lower, below = 0.0, 0.0
    for upper, n in bounds:
        if n >= rank:
            if upper == float("inf"):
                return lower
            return round(lower + (upper - lower) * (rank - below) / max(n - below, 1e-9), 3)
        lower, below = upper, n
    return lower


class Producer:
    """Appends `rate` bookings per second in ticks, each partition's share in one segment,
    in a process of its own: sharing the benchmark's GIL with the poller and the read mix,
    it fell behind its ticks (the load generator must not be the bottleneck)."""

    def __init__(self, project: Project, customers: int, rate: int, seconds: float) -> None:
        self.args = (project, customers, rate, seconds)
        self.appends: list[Append] = []
        self.behind = 0  # ticks that started late: the producer could not keep up
        context = multiprocessing.get_context("spawn")
        self._results = context.SimpleQueue()
        target = _produce_kafka if project.kafka is not None else _produce
        self._process = context.Process(
            target=target, args=(*self.args, self._results), name="producer", daemon=True
        )

    def start(self) -> None:
        self._process.start()

    def join(self) -> None:
        self.appends, self.behind = self._results.get()  # before the child can exit
        self._process.join()

    def stop(self) -> None:
        """End it now, its appends untold (what it appended stays in the log)."""
        self._process.terminate()
        self._process.join(30)


def _produce(project: Project, customers: int, rate: int, seconds: float, results: Any) -> None:
    import random

    rng = random.Random(7)
    fares = _fares(rng)
    topic = project.topics["bookings"]
    partitions = project.cluster.partitions
    per_tick = max(1, round(rate * TICK_S))
    appends: list[Append] = []
    behind = 0
    started = time.perf_counter()  # CLOCK_MONOTONIC: the parent's clock too
    tick = 0
    while (now := time.perf_counter()) - started < seconds:
        due = started + tick * TICK_S
        if now < due:
            time.sleep(due - now)
        elif now - due > TICK_S:
            behind += 1
        tick += 1
        stamp = eventlog.now_ms()
        by_partition: dict[int, list[Record]] = defaultdict(list)
        for value in _values(rng, fares, per_tick):
            key = f"C{rng.randrange(customers):06d}"
            by_partition[partition_for(key, "string", partitions)].append(Record(key, value, stamp))
        for partition, records in sorted(by_partition.items()):
            base = eventlog.append(project.log_dir, topic, partition, records)
            end = base + len(records)
            appends.append(Append(time.perf_counter(), partition, end, len(records)))
    results.put((appends, behind))


def _produce_kafka(
    project: Project, customers: int, rate: int, seconds: float, results: Any
) -> None:
    """As `_produce`, to Kafka: each record's append is its acknowledgement, served while the
    producer waits for its next tick (a tick's append: its partition's last acknowledgement)."""
    import random

    from confluent_kafka import Producer as KafkaProducer

    assert project.kafka is not None
    rng = random.Random(7)
    fares = _fares(rng)
    topic = project.kafka.topic("bookings")
    producer = KafkaProducer({"bootstrap.servers": project.kafka.bootstrap, **project.kafka.client,
                              "partitioner": "murmur2_random", "linger.ms": 5})  # fmt: skip
    acks: list[tuple[int, float, int, int]] = []  # (tick, at, partition, offset)
    per_tick = max(1, round(rate * TICK_S))
    behind = 0
    started = time.perf_counter()
    tick = 0
    while (now := time.perf_counter()) - started < seconds:
        due = started + tick * TICK_S
        while now < due:  # acknowledgements are timed as they come
            producer.poll(due - now)
            now = time.perf_counter()
        if now - due > TICK_S:
            behind += 1
        stamp = eventlog.now_ms()
        acked = _acked(acks, tick)
        for value in _values(rng, fares, per_tick):
            key = f"C{rng.randrange(customers):06d}".encode()
            value_ = orjson.dumps(value) if value is not None else None
            producer.produce(topic, value_, key, timestamp=stamp, on_delivery=acked)
        producer.poll(0)
        tick += 1
    producer.flush(30)
    ticks: dict[tuple[int, int], Append] = {}
    for t, at, partition, offset in acks:
        last = ticks.get((t, partition))
        if last is None:
            ticks[(t, partition)] = Append(at, partition, offset + 1, 1)
        else:
            ticks[(t, partition)] = Append(max(at, last.at), partition,
                                           max(offset + 1, last.end), last.records + 1)  # fmt: skip
    results.put((sorted(ticks.values(), key=lambda a: a.at), behind))


def _acked(acks: list[tuple[int, float, int, int]], tick: int) -> Any:
    """The delivery callback of a tick's records: (tick, when, partition, offset)."""

    def delivered(error: Any, message: Any) -> None:
        if error is None:
            acks.append((tick, time.perf_counter(), message.partition(), message.offset()))

    return delivered


class Anchor:
    """A plain Kafka consumer of the bookings topic in a process of its own, from the end
    on: when each record arrived (time.perf_counter(), the producer's clock too)."""

    def __init__(self, project: Project) -> None:
        assert project.kafka is not None
        context = multiprocessing.get_context("spawn")
        self._results = context.SimpleQueue()
        self._stop = context.Event()
        self._ready = context.Event()
        args = (project.kafka.bootstrap, project.kafka.topic("bookings"),
                project.cluster.partitions, self._ready, self._stop, self._results)  # fmt: skip
        self._process = context.Process(target=_consume, args=args, name="anchor", daemon=True)
        self.arrivals: dict[int, list[tuple[int, float]]] = {}  # partition -> (offset, at)

    def start(self) -> None:
        self._process.start()
        self._ready.wait(60)

    def stop(self) -> None:
        self._stop.set()
        self.arrivals = self._results.get()
        self._process.join()

    def delays(self, appends: list[Append]) -> list[float]:
        """Seconds from each append to the arrival of its last record."""
        found = []
        for append in appends:
            arrived = self.arrivals.get(append.partition, [])
            i = bisect.bisect_left(arrived, (append.end - 1, -1.0))
            if i < len(arrived):
                found.append(arrived[i][1] - append.at)
        return found


def _consume(
    bootstrap: str, topic: str, partitions: int, ready: Any, stop: Any, results: Any
) -> None:
    from confluent_kafka import OFFSET_END, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-anchor",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 10})  # fmt: skip
    consumer.assign([TopicPartition(topic, p, OFFSET_END) for p in range(partitions)])
    arrivals: dict[int, list[tuple[int, float]]] = defaultdict(list)
    consumer.consume(num_messages=1, timeout=1.0)  # joined, positions at the end
    ready.set()
    while not stop.is_set():
        for message in consumer.consume(num_messages=10_000, timeout=0.05):
            partition, offset = message.partition(), message.offset()
            if message.error() is None and partition is not None and offset is not None:
                arrivals[partition].append((offset, time.perf_counter()))
    consumer.close()
    results.put(dict(arrivals))


async def poll_positions(
    urls: list[str], stop: threading.Event
) -> list[tuple[float, dict[int, int]]]:
    """(arrival time, partition -> bookings position) of each poll, until `stop`."""
    seen: list[tuple[float, dict[int, int]]] = []
    async with http_client() as client:
        i = 0
        while not stop.is_set():
            reply = await client.post(
                urls[i % len(urls)], content=POSITIONS, headers={"content-type": "application/json"}
            )
            at = time.perf_counter()
            seen.append((at, _bookings_positions(orjson.loads(reply.content)["data"])))
            i += 1
            await asyncio.sleep(POLL_S)
    return seen


async def subscribe_positions(
    url: str, stop: threading.Event
) -> list[tuple[float, dict[int, int]]]:
    """(arrival time, partition -> bookings position) of each push of a subscription to the
    poller's query on the node at `url` (ws://), until `stop`."""
    seen: list[tuple[float, dict[int, int]]] = []
    async with websockets.connect(
        url, subprotocols=[websockets.Subprotocol("graphql-transport-ws")]
    ) as ws:
        await ws.send(orjson.dumps({"type": "connection_init"}).decode())
        await ws.recv()
        query = f"subscription {POSITIONS_SELECTION}"
        subscribe = {"id": "p", "type": "subscribe", "payload": {"query": query}}
        await ws.send(orjson.dumps(subscribe).decode())
        while not stop.is_set():
            try:
                raw = await asyncio.wait_for(ws.recv(), timeout=POLL_S)
            except TimeoutError:
                continue
            at = time.perf_counter()
            seen.append((at, _bookings_positions(orjson.loads(raw)["payload"]["data"])))
    return seen


def _bookings_positions(data: dict[str, Any]) -> dict[int, int]:
    """partition -> bookings position of an answer to the positions query."""
    return {
        p["partition"]: next(  # a Long: a decimal string
            int(o["offset"]) for o in p["position"] if o["topic"] == "bookings"
        )
        for p in data["latestBookingRange"]["meta"]["partitions"]
    }


def visibility(appends: list[Append], polls: list[tuple[float, dict[int, int]]]) -> list[float]:
    """Seconds from each append to the first poll after it showing its partition past it;
    appends never seen are left out (counted by the caller)."""
    delays = []
    for append in appends:
        for at, positions in polls:
            if at >= append.at and positions.get(append.partition, -1) >= append.end:
                delays.append(at - append.at)
                break
    return delays


def read_mix(urls: list[str], keys: list[str], seconds: float) -> tuple[float, float]:
    """p50 and p99 (ms) of one-key lookups from 4 clients over `seconds`."""
    bodies = [body(ONE_KEY, {"k": k}) for k in keys]

    async def main() -> Any:
        async with http_client() as client:
            operation = graphql_operation(client, urls, bodies)
            return await run_async("one key", operation, 4, seconds, 10**9)

    stats = asyncio.run(main())
    return stats.p50_ms, stats.p99_ms


def copy_workload(workload: Workload, prefix: str = "fresh") -> Project:
    """log/ and snapshots/ of a built workload under .bench/<prefix>-<name>/, new ports."""
    fresh = Workload(workload.customers, workload.events, BENCH_DIR / f"{prefix}-{workload.name}")
    fresh.reset()
    for folder in ("log", "snapshots"):
        shutil.copytree(workload.root / folder, fresh.root / folder)
    return fresh.write_project()


def measure(
    workload: Workload,
    rate: int,
    seconds: float,
    logs: Path,
    pipeline_nice: int | None = None,
    workers: int | None = None,
    kafka: bool = False,
    bucket: bool = False,
) -> Freshness:
    """`pipeline_nice`: the pipeline's niceness (None: the setting's default); `workers`:
    each node's (None: the setting's default, one per core); `kafka`: on a
    broker of its own, its topics a copy of the workload's log; `bucket`: the snapshots in
    a bucket of an S3 server of its own."""
    project = copy_workload(workload)
    with contextlib.ExitStack() as stack:
        if kafka:
            broker = Broker(project.path.parent / "kafka")
            broker.start()
            stack.callback(broker.stop)
            project = onto_kafka(project, broker.bootstrap)
        if bucket:
            server = S3Server(project.path.parent / "s3")
            server.start()
            stack.callback(server.stop)
            project = onto_bucket(project, server)
        if workers is not None:
            project = with_workers(project, workers)
        if pipeline_nice is not None:
            project = with_settings(
                project, f"nice-{pipeline_nice}", pipeline_niceness=pipeline_nice
            )
        return _measure(workload, project, rate, seconds, logs)


def _measure(
    workload: Workload,
    project: Project,
    rate: int,
    seconds: float,
    logs: Path,
) -> Freshness:
    log = "kafka" if project.kafka is not None else "file"
    snapshots = "folder" if project.object_store is None else "bucket"
    nice = project.settings.pipeline_niceness
    result = Freshness(workload.name, rate, seconds, nice, log, snapshots)
    nodes = NodeProcesses.gateway(project, logs / f"fresh-{workload.name}")
    pipeline_log = logs / f"fresh-{workload.name}-pipeline.log"
    pipeline_log.unlink(missing_ok=True)
    follow = start_pipeline(project, pipeline_log)
    try:
        nodes.start()
        nodes.wait_serving()
        wait_following(follow, pipeline_log)
        urls = [f"{nodes.url(n)}/graphql" for n in nodes.ids]
        keys = [
            f"C{i:06d}" for i in range(0, workload.customers, max(1, workload.customers // 997))
        ]
        result.reads_idle_p50_ms, result.reads_idle_p99_ms = read_mix(urls, keys, 10)
        result.load.append(os.getloadavg()[0])
        scraped = scrape_freshness(urls)
        producer = Producer(project, workload.customers, rate, seconds)
        stop = threading.Event()
        polls: list[tuple[float, dict[int, int]]] = []
        pushes: list[tuple[float, dict[int, int]]] = []
        poller = threading.Thread(
            target=lambda: polls.extend(asyncio.run(poll_positions(urls, stop))), daemon=True
        )
        ws = nodes.url(SUBSCRIBER_NODE).replace("http://", "ws://") + "/graphql"
        subscriber = threading.Thread(
            target=lambda: pushes.extend(asyncio.run(subscribe_positions(ws, stop))), daemon=True
        )
        subscriber.start()
        anchor = Anchor(project) if project.kafka is not None else None
        if anchor is not None:
            anchor.start()
        producer.start()
        poller.start()
        time.sleep(min(10.0, seconds / 4))  # the pipeline settles into the rate
        reads_from = time.perf_counter()
        result.reads_live_p50_ms, result.reads_live_p99_ms = read_mix(urls, keys, 10)
        reads_to = time.perf_counter()
        producer.join()
        time.sleep(10)  # the last appends get published
        if anchor is not None:
            anchor.stop()
            if anchored := sorted(anchor.delays(producer.appends)):
                result.anchor_p50_s = round(percentile(anchored, 50), 4)
                result.anchor_p99_s = round(percentile(anchored, 99), 4)
        stop.set()
        poller.join()
        subscriber.join()
        result.stages = stage_delays(scraped, scrape_freshness(urls))
        result.load.append(os.getloadavg()[0])
        result.appended = len(producer.appends)
        result.appended_per_s = round(sum(a.records for a in producer.appends) / seconds, 1)
        result.ticks_late = producer.behind
        during = [a for a in producer.appends if reads_from <= a.at <= reads_to]
        apart = [a for a in producer.appends if not reads_from <= a.at <= reads_to]
        delays = sorted(visibility(apart, polls))
        busy = sorted(visibility(during, polls))
        result.not_visible = len(producer.appends) - len(delays) - len(busy)
        if delays:
            result.visible_p50_s = round(percentile(delays, 50), 3)
            result.visible_p99_s = round(percentile(delays, 99), 3)
            result.visible_max_s = round(delays[-1], 3)
        if busy:
            result.visible_during_reads_p50_s = round(percentile(busy, 50), 3)
        third = len(producer.appends) // 3
        if first := sorted(visibility(producer.appends[:third], polls)):
            result.visible_first_third_p50_s = round(percentile(first, 50), 3)
        if last := sorted(visibility(producer.appends[-third:], polls)):
            result.visible_last_third_p50_s = round(percentile(last, 50), 3)
        if pushed := sorted(visibility(apart, pushes)):
            result.pushed_p50_s = round(percentile(pushed, 50), 3)
            result.pushed_p99_s = round(percentile(pushed, 99), 3)
        batches = [
            (int(m.group(2)), float(m.group(3)))
            for m in BATCH_LINE.finditer(pipeline_log.read_bytes())
            if int(m.group(2)) > 0
        ]
        result.batches = len(batches)
        if batches:
            result.batch_records_p50 = statistics.median(r for r, _ in batches)
            result.batch_seconds_p50 = round(statistics.median(s for _, s in batches), 3)
    finally:
        stop_pipeline(follow)
        nodes.processes_.stop_all()
    return result


def start_pipeline(project: Project, log: Path) -> subprocess.Popen[bytes]:
    """`stategate pipeline --follow`, at the niceness its settings say."""
    command = [sys.executable, "-m", "stategate.cli", "pipeline", "--config", str(project.path)]
    with open(log, "ab") as out:
        return subprocess.Popen(command + ["--follow"], stdout=out, stderr=subprocess.STDOUT)


def stop_pipeline(follow: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL past a minute."""
    follow.terminate()
    try:
        follow.wait(60)
    except subprocess.TimeoutExpired:
        follow.kill()


def wait_following(follow: subprocess.Popen[bytes], log: Path, timeout_s: float = 300) -> None:
    """Until the pipeline follows the log (Spark started, the published positions read):
    its start is neither idle nor the steady state."""
    deadline = time.monotonic() + timeout_s
    while b"spark_pipeline.loop: following " not in log.read_bytes():
        if follow.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the pipeline did not start:\n{log.read_text()[-3000:]}")
        time.sleep(0.5)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", default="main", choices=NAMES)
    parser.add_argument("--rate", type=int, default=1000, help="events per second")
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument(
        "--pipeline-nice", type=int, help="the pipeline's niceness (default: the setting's)"
    )
    parser.add_argument("--workers", type=int, help="each node's (default: one per core)")
    parser.add_argument("--kafka", action="store_true", help="on a Kafka broker of its own")
    parser.add_argument("--bucket", action="store_true", help="snapshots in an S3 bucket")
    args = parser.parse_args(argv)
    workload = Workload.built(args.workload)
    if workload is None:
        print(f"build the {args.workload} workload first: python -m bench.run", file=sys.stderr)
        return 2
    logs = BENCH_DIR / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    result = measure(
        workload, args.rate, args.seconds, logs, args.pipeline_nice, args.workers, args.kafka,
        args.bucket,
    )  # fmt: skip
    print(orjson.dumps(result.as_dict(), option=orjson.OPT_INDENT_2).decode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
