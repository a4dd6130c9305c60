"""Elastic clusters: what a node joining and a node draining cost at the reference workload
(issue 23).

    python -m bench.elastic --workload main --reuse    # the 1M workload, as built before
    python -m bench.elastic --workload small --rounds 1 --seconds 5   # 100k, to try it
    python -m bench.elastic --workload main --reuse --bucket   # the nodes pull from S3Proxy

Without --reuse, or when it is not built yet, the workload is built first (bench/workload.py:
a few minutes of Spark at 1M), as `bench.run` does.

On a built workload's log and snapshots, through a project file of its own (elastic.toml
beside the workload's, its nodes' data dirs under elastic/) and an etcd of its own, 3 nodes
start and settle. Then each round has three phases, while 4 clients (the raw asyncio driver,
in a process of their own) send one-key customerTotals lookups to node1:
  idle   --seconds of nothing else;
  join   a new node starts (`stategate node --address`, an empty data dir) and the phase
         lasts until the assignment is settled with it serving its share;
  drain  the longest-serving node besides node1 is drained, until its replicas serve
         elsewhere; then it stops (outside the phase).
Settled: every partition has `replicas` serving, none warming, only the non-draining members
serve, and each node's /internal/status serves all it is assigned (polled every POLL_S).

Every answer is checked against the storage floor (bench/floor.py, the same DuckDB files read
directly): failed requests, partial answers and wrong values are counted, and must be 0. A
join is timed from the new node's process start; its warm-ups are read from its /metrics.
Its bytes are its data dir after the join and the manifest's sizes of what it received,
against the whole state (every partition's layers times replicas). Figures are medians over
the rounds, each beside the machine's load average: the nodes, the clients and the new node's
start-up share this machine's cores.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx
import orjson
import psutil
from prometheus_client.parser import text_string_to_metric_families

from bench import queries, report
from bench.driver import Operation, graphql_operation, http_client, percentile, run_async
from bench.floor import Floor
from bench.object_store import onto_bucket
from bench.workload import BENCH_DIR, NAMES, Workload, stop_spark
from contracts import placement
from contracts.cluster_secret import secret_headers
from contracts.coordination import Coordination, State
from contracts.manifest import read_manifest
from contracts.project import Project
from stategate.etcd import Etcd, serving_settled
from stategate.launcher import Processes, free_ports, node_command
from stategate.s3server import S3Server

NODE = "node1"  # where the lookups go; never drained
FIRST_NODES = 3
CLIENTS = 4
PROJECT_FILE = "elastic.toml"
CLUSTER_NAME = "bench"
ROUNDS = 5
SAMPLE_KEYS = 997
KEY_STRIDE = 7919  # a prime: the sample spreads over the key space and the partitions
WARMUP = 50  # untimed lookups before each phase
POLL_S = 0.2
SETTLE_S = 600.0
TARGET = 2.0  # one-key p99 during a move / idle
MIB = 2**20
FIELDS = ("bookings", "revenue", "seats", "cheapest", "dearest")
LONGS = {"bookings", "seats"}  # decimal strings on the wire, ints in the floor
Row = list[Any] | None
T = TypeVar("T")


@dataclass
class Phase:
    round: int
    name: str  # idle, join, drain
    seconds: float
    lookups: int
    p50_ms: float
    p99_ms: float
    failed: int  # HTTP or GraphQL errors
    partial: int
    wrong: int  # answered, but not the floor's value
    failovers: int  # node1's sub-queries that moved on from a replica that did not answer
    load_start: float  # the machine's 1-minute load average
    load_end: float
    later: dict[str, float] | None = None  # join: from the new node answering /health on


@dataclass
class Join:
    node: str
    up_s: float  # process start -> /health answers
    serving_s: float  # process start -> settled, the node serving its share
    cpu_s: float  # the CPU its process used meanwhile, on the cores the others use
    versions: int  # assignments published meanwhile
    received: list[int]  # the partitions it holds
    replicas: int  # in the cluster: partitions times replicas
    moved_elsewhere: int  # replicas that moved to other nodes meanwhile
    warmups: int  # from its stategate_warmup_seconds
    warmup_mean_s: float
    data_dir_bytes: int
    manifest_bytes: int  # the layers of the partitions it received
    state_bytes: int  # every partition's layers, times replicas
    members: int  # after the join

    @property
    def share(self) -> float:
        return self.data_dir_bytes / self.state_bytes


@dataclass
class Drain:
    node: str
    seconds: float  # drain asked -> settled without it
    versions: int
    moved: int  # replicas added elsewhere
    to_node1: int  # of them, on the node the lookups go to


@dataclass
class Round:
    number: int
    phases: list[Phase]  # idle, join, drain
    join: Join
    drain: Drain

    def phase(self, name: str) -> Phase:
        return next(p for p in self.phases if p.name == name)

    def ratio(self, name: str) -> float:
        return self.phase(name).p99_ms / self.phase("idle").p99_ms


class Keys:
    """The cluster's keys in etcd over one connection, kept open between calls."""

    def __init__(self, url: str, cluster: str) -> None:
        self.runner = asyncio.Runner()
        self.coordination = Coordination(url, cluster)

    def connect(self) -> None:
        self.runner.run(self.coordination.connect())

    def read(self) -> State:
        return self.runner.run(self.coordination.read())

    def drain(self, node: str) -> None:
        self.runner.run(self.coordination.drain(node))

    def close(self) -> None:
        self.runner.run(self.coordination.close())
        self.runner.close()


class Cluster:
    """The bench's etcd and nodes on a workload's log and snapshots; node1.. in order."""

    def __init__(self, workload: Workload, logs: Path, store: S3Server | None = None) -> None:
        self.folder = workload.root / Path(PROJECT_FILE).stem
        shutil.rmtree(self.folder, ignore_errors=True)  # every node starts empty, etcd too
        self.folder.mkdir(parents=True)
        self.etcd = Etcd(self.folder / "etcd")
        entries = f'coordinator = "{self.etcd.url}"\nname = "{CLUSTER_NAME}"\n'
        self.project = workload.write_project(file=PROJECT_FILE, cluster=entries)
        if store is not None:  # the nodes pull from a bucket, not the workload's folder
            self.project = onto_bucket(self.project, store)
        self.keys = Keys(self.etcd.url, CLUSTER_NAME)
        self.processes = Processes(logs)
        self.http = httpx.Client(timeout=10, headers=secret_headers(self.project.cluster.secret))
        self.members: list[str] = []
        self.urls = {n.id: n.url for n in self.project.cluster.nodes}
        self.data_dirs = {n.id: n.data_dir for n in self.project.cluster.nodes}

    def start(self) -> State:
        """etcd, then the project file's nodes, settled."""
        self.etcd.start()
        self.keys.connect()
        for node in self.project.cluster.nodes:
            self.processes.start(node.id, node_command(self.project, node.id), node.url)
            self.members.append(node.id)
        return self.wait_settled()

    def close(self) -> None:
        self.processes.stop_all()
        self.keys.close()
        self.etcd.stop()
        self.http.close()

    def join(self, node: str, started: Callable[[], None]) -> Join:
        """Start `node` as `stategate node --address` does; time it to serving its share."""
        before = self.keys.read()
        (port,) = free_ports(1)
        self.urls[node] = f"http://127.0.0.1:{port}"
        self.data_dirs[node] = self.folder / node
        command = node_command(self.project, node) + [
            "--address", f"127.0.0.1:{port}", "--data-dir", str(self.data_dirs[node])
        ]  # fmt: skip
        t0 = time.perf_counter()
        self.processes.start(node, command, self.urls[node])
        up = time.perf_counter() - t0
        started()
        self.members.append(node)
        after = self.wait_settled()
        serving = time.perf_counter() - t0
        times = psutil.Process(self.processes.pid(node)).cpu_times()
        return self._joined(node, before, after, (up, serving, times.user + times.system))

    def drain(self, node: str) -> Drain:
        before = self.keys.read()
        t0 = time.perf_counter()
        self.keys.drain(node)
        after = self.wait_settled()
        seconds = time.perf_counter() - t0
        added = _moves(before, after).added
        to_node1 = sum(1 for _, n in added if n == NODE)
        return Drain(node, round(seconds, 2), _versions(before, after), len(added), to_node1)

    def stop(self, node: str) -> None:
        """A drained node leaves: stopped, gone from the members."""
        self.processes.stop(node)
        self.members.remove(node)
        self.wait_settled()

    def wait_settled(self) -> State:
        deadline = time.monotonic() + SETTLE_S
        while True:
            state = self.keys.read()
            if self._settled(state):
                return state
            if time.monotonic() > deadline:
                raise RuntimeError(f"not settled in {SETTLE_S} s: {state}")
            time.sleep(POLL_S)

    def _settled(self, state: State) -> bool:
        return serving_settled(state, {n: self.urls[n] for n in self.members}, self.project)

    def _joined(
        self, node: str, before: State, after: State, seconds: tuple[float, float, float]
    ) -> Join:
        """What the join took: `seconds` to /health, to serving its share, of its CPU."""
        assert after.assignment is not None
        up, serving, cpu = seconds
        cluster = self.project.cluster
        received = after.assignment.assigned_to(node)
        sizes = partition_bytes(self.project)
        count, total = self._warmups(node)
        added = _moves(before, after).added
        return Join(
            node=node,
            up_s=round(up, 2),
            serving_s=round(serving, 2),
            cpu_s=round(cpu, 2),
            versions=_versions(before, after),
            received=received,
            replicas=cluster.partitions * cluster.replicas,
            moved_elsewhere=sum(1 for _, n in added if n != node),
            warmups=count,
            warmup_mean_s=round(total / count, 2) if count else math.nan,
            data_dir_bytes=folder_bytes(self.data_dirs[node]),
            manifest_bytes=sum(sizes[p] for p in received),
            state_bytes=sum(sizes.values()) * cluster.replicas,
            members=len(after.members),
        )

    def _warmups(self, node: str) -> tuple[int, float]:
        """Its stategate_warmup_seconds histogram: (count, sum)."""
        count = self.metric(node, "stategate_warmup_seconds_count")
        return int(count), self.metric(node, "stategate_warmup_seconds_sum")

    def failovers(self, node: str) -> int:
        """Sub-queries the node moved on from a replica that could not answer, so far."""
        return int(self.metric(node, "stategate_failovers_total"))

    def metric(self, node: str, sample: str) -> float:
        """The node's /metrics samples of that name, summed over their labels."""
        text = self.http.get(f"{self.urls[node]}/metrics").text
        families = text_string_to_metric_families(text)
        return sum(s.value for family in families for s in family.samples if s.name == sample)


def _moves(before: State, after: State) -> placement.Moves:
    assert before.assignment is not None and after.assignment is not None
    return placement.moves(before.assignment, after.assignment)


def _versions(before: State, after: State) -> int:
    assert before.assignment is not None and after.assignment is not None
    return after.assignment.version - before.assignment.version


def partition_bytes(project: Project) -> dict[int, int]:
    """Each partition's layer files in the snapshot store, from the manifest."""
    manifest = read_manifest(Path(project.snapshot_store))
    return {p: sum(layer.size for layer in e.layers) for p, e in manifest.partitions.items()}


def folder_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


# -- the load generator: a process of its own, one phase each ------------------------------


def sample_keys(customers: int) -> list[str]:
    return sorted({f"C{i * KEY_STRIDE % customers:06d}" for i in range(SAMPLE_KEYS)})


def expected_rows(project: Project, keys: list[str]) -> dict[str, Row]:
    """Each key's customerTotals row as the floor reads it (None: no such key)."""
    floor = Floor(Path(project.snapshot_store), project.cluster.partitions)
    try:
        rows = {r[0]: list(r[1:]) for r in floor.many_per_partition(keys)}
    finally:
        floor.close()
    return {key: rows.get(key) for key in keys}


def _row(record: dict[str, Any] | None) -> Row:
    if record is None:
        return None
    return [int(record[f]) if f in LONGS and record[f] is not None else record[f] for f in FIELDS]


def checker(expected: dict[str, Row], tally: Counter[str]) -> Callable[[Any], str | None]:
    """An answer's check: not partial, and the floor's value; counted by kind."""

    def check(data: Any) -> str | None:
        answer = data["customerTotals"]
        if answer["meta"]["partial"]:
            tally["partial"] += 1
            return "partial"
        if _row(answer["record"]) != expected[answer["key"]]:
            tally["wrong"] += 1
            return f"{answer['key']}: {answer['record']} is not the floor's"
        return None

    return check


def timed(operation: Operation, samples: list[tuple[float, float]]) -> Operation:
    """The operation, each call's (start, seconds) kept."""

    async def call(i: int) -> str | None:
        started = time.perf_counter()
        error = await operation(i)
        samples.append((started, time.perf_counter() - started))
        return error

    return call


async def generate_load(url: str, expected_path: Path) -> dict[str, Any]:
    """Lookups until SIGTERM; "ready" on stdout once warm. SIGUSR1 marks a moment: the
    lookups started after it are summarized apart too."""
    expected: dict[str, Row] = orjson.loads(expected_path.read_bytes())
    bodies = [queries.body(queries.ONE_KEY, {"key": k}) for k in sorted(expected)]
    tally: Counter[str] = Counter()
    lookup = graphql_operation(http_client(), [url], bodies, checker(expected, tally))
    for i in range(WARMUP):
        await lookup(-1 - i)
    tally.clear()
    samples: list[tuple[float, float]] = []
    stop, marks = asyncio.Event(), list[float]()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGUSR1, lambda: marks.append(time.perf_counter()))
    print("ready", flush=True)
    stats = await run_async(
        "lookups", timed(lookup, samples), CLIENTS, math.inf, sys.maxsize, until=stop.is_set
    )
    later = sorted(s for t, s in samples if marks and t >= marks[0])
    return {"stats": stats.as_dict(), "tally": dict(tally), "later": _summary(later)}


def _summary(seconds: list[float]) -> dict[str, float] | None:
    if not seconds:
        return None
    p50, p99 = percentile(seconds, 50) * 1000, percentile(seconds, 99) * 1000
    return {"lookups": len(seconds), "p50_ms": round(p50, 2), "p99_ms": round(p99, 2)}


def run_phase(
    cluster: Cluster,
    number: int,
    name: str,
    expected: Path,
    action: Callable[[Callable[[], None]], T],
) -> tuple[Phase, T]:
    """`action` (given a function that marks a moment) while the load runs on node1."""
    url = f"{cluster.urls[NODE]}/graphql"
    command = [sys.executable, "-m", "bench.elastic", "load", url, str(expected)]
    load = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    assert load.stdout is not None
    if load.stdout.readline().strip() != "ready":
        raise RuntimeError(f"the load generator did not start: {load.wait(60)}")
    load_start, failovers = os.getloadavg()[0], cluster.failovers(NODE)
    try:
        facts = action(lambda: load.send_signal(signal.SIGUSR1))
    finally:
        load.send_signal(signal.SIGTERM)
    out, _ = load.communicate(timeout=120)
    failovers = cluster.failovers(NODE) - failovers
    return _phase(number, name, load_start, failovers, orjson.loads(out)), facts


def _phase(
    number: int, name: str, load_start: float, failovers: int, result: dict[str, Any]
) -> Phase:
    stats, tally = result["stats"], result["tally"]
    checked = tally.get("partial", 0) + tally.get("wrong", 0)
    return Phase(
        round=number,
        name=name,
        seconds=stats["seconds"],
        lookups=stats["count"],
        p50_ms=round(stats["p50_ms"], 2),
        p99_ms=round(stats["p99_ms"], 2),
        failed=stats["errors"] - checked,
        partial=tally.get("partial", 0),
        wrong=tally.get("wrong", 0),
        failovers=failovers,
        load_start=round(load_start, 2),
        load_end=stats["load1"],
        later=result["later"],
    )


# -- rounds, and what they add up to ------------------------------------------------------


def measure(
    workload: Workload, rounds: int, seconds: float, logs: Path, store: S3Server | None = None
) -> list[Round]:
    cluster = Cluster(workload, logs, store)
    expected = cluster.folder / "expected.json"
    rows = expected_rows(cluster.project, sample_keys(workload.customers))
    expected.write_bytes(orjson.dumps(rows))
    try:
        cluster.start()
        time.sleep(1.5 * cluster.project.settings.health_interval_s)  # peers' positions seen
        return [run_round(cluster, n, seconds, expected) for n in range(1, rounds + 1)]
    finally:
        cluster.close()


def run_round(cluster: Cluster, number: int, seconds: float, expected: Path) -> Round:
    """Idle, a new node's join, then a drain of the longest-serving node besides node1."""
    idle, _ = run_phase(cluster, number, "idle", expected, lambda _: time.sleep(seconds))
    newcomer = f"node{FIRST_NODES + number}"
    join, joined = run_phase(
        cluster, number, "join", expected, lambda mark: cluster.join(newcomer, mark)
    )
    leaving = next(n for n in cluster.members if n != NODE)
    drain, drained = run_phase(cluster, number, "drain", expected, lambda _: cluster.drain(leaving))
    cluster.stop(leaving)
    result = Round(number, [idle, join, drain], joined, drained)
    print(report_round(result), flush=True)
    return result


def report_round(r: Round) -> str:
    lines = [f"round {r.number}:"]
    for p in r.phases:
        lines.append(
            f"  {p.name:<5} {p.seconds:6.1f} s  {p.lookups:6} lookups  p50 {p.p50_ms:.1f} ms  "
            f"p99 {p.p99_ms:.1f} ms  failed/partial/wrong {p.failed}/{p.partial}/{p.wrong}  "
            f"failovers {p.failovers}  load {p.load_start:.1f} -> {p.load_end:.1f}"
        )
    j, d = r.join, r.drain
    lines.append(
        f"  join {j.node}: up {j.up_s} s, serving its share {j.serving_s} s ({j.cpu_s} s of "
        f"CPU), partitions "
        f"{j.received}, {j.warmups} warm-ups of {j.warmup_mean_s} s on average, "
        f"{j.data_dir_bytes / MIB:.1f} MiB = {j.share:.3f} of the state"
    )
    lines.append(
        f"  drain {d.node}: {d.seconds} s, {d.moved} replicas moved, {d.to_node1} to {NODE}"
    )
    return "\n".join(lines)


def median(rounds: list[Round], value: Callable[[Round], float]) -> float:
    return statistics.median(value(r) for r in rounds)


def spread(rounds: list[Round], value: Callable[[Round], float], digits: int) -> str:
    """The median, and the rounds' range when there are several."""
    values = [value(r) for r in rounds]
    middle = f"{statistics.median(values):.{digits}f}"
    if len(values) == 1:
        return middle
    return f"{middle} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def phase_table(rounds: list[Round]) -> str:
    """One-key lookups on node1 per phase: medians over the rounds (their range)."""
    lines = [
        "| phase | seconds | lookups | p50 ms | p99 ms | p99 / idle | failed / partial / wrong"
        " (all rounds) | node1's failovers (all rounds) | load average (1 min, end) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    lines += [_phase_row(rounds, name) for name in ("idle", "join", "drain")]
    lines.append(_later_row(rounds))
    return "\n".join(lines)


def _phase_row(rounds: list[Round], name: str) -> str:
    def of(attr: str) -> Callable[[Round], float]:
        return lambda r: float(getattr(r.phase(name), attr))

    ratio = "" if name == "idle" else spread(rounds, lambda r: r.ratio(name), 2) + "x"
    bad = [sum(getattr(r.phase(name), a) for r in rounds) for a in ("failed", "partial", "wrong")]
    failovers = sum(r.phase(name).failovers for r in rounds)
    return (
        f"| {name} | {spread(rounds, of('seconds'), 1)} | {spread(rounds, of('lookups'), 0)} "
        f"| {spread(rounds, of('p50_ms'), 2)} | {spread(rounds, of('p99_ms'), 2)} | {ratio} "
        f"| {' / '.join(map(str, bad))} | {failovers} | {spread(rounds, of('load_end'), 1)} |"
    )


def _later_row(rounds: list[Round]) -> str:
    """The join's lookups from the new node answering /health on (its start-up excluded)."""

    def later(key: str) -> Callable[[Round], float]:
        return lambda r: (r.phase("join").later or {}).get(key, math.nan)

    ratio = spread(rounds, lambda r: later("p99_ms")(r) / r.phase("idle").p99_ms, 2)
    return (
        f"| join, from the new node up | | {spread(rounds, later('lookups'), 0)} "
        f"| {spread(rounds, later('p50_ms'), 2)} | {spread(rounds, later('p99_ms'), 2)} "
        f"| {ratio}x | | | |"
    )


def move_table(rounds: list[Round]) -> str:
    """What a join and a drain moved, and how long they took: medians (the rounds' range)."""

    def row(label: str, value: Callable[[Join], float], digits: int = 1) -> str:
        return f"| {label} | {spread(rounds, lambda r: value(r.join), digits)} |"

    joined = rounds[0].join
    members = joined.members
    drains = spread(rounds, lambda r: r.drain.seconds, 1)
    drained = [f"{r.drain.moved} ({r.drain.to_node1})" for r in rounds]
    return "\n".join(
        [
            f"| a node joins {members - 1} (median of {len(rounds)} rounds) | |",
            "| --- | --- |",
            row("process start -> /health answers, s", lambda j: j.up_s),
            row("process start -> settled, serving its share, s", lambda j: j.serving_s),
            row("its CPU meanwhile, s (the machine has 2 cores)", lambda j: j.cpu_s),
            row("its warm-ups: count (stategate_warmup_seconds)", lambda j: j.warmups, 0),
            row("its warm-ups: mean, s", lambda j: j.warmup_mean_s, 2),
            row(f"replicas it received (of {joined.replicas})", lambda j: len(j.received), 0),
            row("replicas moved to other nodes meanwhile", lambda j: j.moved_elsewhere, 0),
            row("its data dir after the join, MiB", lambda j: j.data_dir_bytes / MIB),
            row("the manifest's layers of what it received, MiB", lambda j: j.manifest_bytes / MIB),
            row("the whole state (layers x replicas), MiB", lambda j: j.state_bytes / MIB),
            row(f"its data dir / the whole state (1/n = {1 / members:.3f})", lambda j: j.share, 3),
            f"| a node drained: asked -> settled without it, s | {drains} |",
            f"| replicas moved per drain (of them to node1) | {', '.join(drained)} |",
        ]
    )


def problems(rounds: list[Round]) -> int:
    return sum(p.failed + p.partial + p.wrong for r in rounds for p in r.phases)


def as_json(workload: Workload, rounds: list[Round], machine: dict[str, Any]) -> dict[str, Any]:
    return {
        "machine": machine,
        "workload": workload.name,
        "rounds": [
            {**asdict(r), "join": {**asdict(r.join), "share": r.join.share}} for r in rounds
        ],
        "failed_partial_wrong": problems(rounds),
        "p99_ratio_join": median(rounds, lambda r: r.ratio("join")),
        "p99_ratio_drain": median(rounds, lambda r: r.ratio("drain")),
    }


def built(name: str, reuse: bool) -> Workload:
    """The named workload: reused when built and --reuse, else built anew."""
    workload = Workload.called(name)
    if reuse and workload.is_built():
        return workload
    from spark_pipeline.spark import spark_session

    spark = spark_session(None)
    try:
        workload.build(spark)
    finally:
        stop_spark(spark)
    return workload


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["load"]:
        result = asyncio.run(generate_load(argv[1], Path(argv[2])))
        print(orjson.dumps(result).decode())
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", default="main", choices=NAMES)
    parser.add_argument("--reuse", action="store_true", help="reuse the workload when built")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="idle, join and drain phases")
    parser.add_argument("--seconds", type=float, default=10.0, help="of each idle phase")
    parser.add_argument(
        "--bucket",
        action="store_true",
        help="the snapshots copied to a bucket on S3Proxy, which the nodes (and a joining "
        "one) pull from",
    )
    args = parser.parse_args(argv)
    workload = built(args.workload, args.reuse)
    machine = report.machine()
    print(f"load average at start: {machine['loadavg_at_start']}", flush=True)
    with contextlib.ExitStack() as stack:
        store = None
        if args.bucket:
            store = S3Server(BENCH_DIR / "s3-elastic")
            store.start()
            stack.callback(store.stop)
        logs = BENCH_DIR / "logs" / "elastic"
        rounds = measure(workload, args.rounds, args.seconds, logs, store)
    print(phase_table(rounds), move_table(rounds), sep="\n\n")
    print(f"failed, partial or wrong answers: {problems(rounds)} (must be 0)")
    body = as_json(workload, rounds, machine)
    where = "-bucket" if args.bucket else ""
    (BENCH_DIR / f"elastic-{workload.name}{where}.json").write_text(orjson.dumps(body).decode())
    print(orjson.dumps(body, option=orjson.OPT_INDENT_2).decode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
