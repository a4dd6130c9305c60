"""The demo: a railway operator's bookings on a 3-node loopback cluster.

Its project file and example query ship with the package; `stategate demo` writes the
project file into a working folder (default .demo/), starts a Kafka broker of its own there
(stategate/broker.py), produces a week of bookings to it on the first run, starts the
continuous pipeline (`stategate pipeline --follow`) and the nodes, keeps producing
live bookings at a modest rate, and prints how to query them and where the live dashboard
is (stategate/demo/dashboard/, served by every node at /pages/). With --elastic, the cluster
has a coordinator, an etcd of its own, and one command adds a node (stategate/demo/elastic.py).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shlex
import shutil
import ssl
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from websockets.sync.client import ClientConnection, connect
from websockets.typing import Subprotocol

from contracts import project as projects
from contracts.clock import left, now_ms
from contracts.project import Project
from contracts.records import Record
from contracts.tls import Tls, verify
from stategate import certificates, launcher, logs, stopping
from stategate import etcd as coordinator
from stategate.broker import Broker
from stategate.demo import elastic
from stategate.etcd import Etcd
from stategate.launcher import Processes, probes
from stategate.s3server import STORE, S3Server
from topics import open_log

HERE = Path(__file__).resolve().parent
PROJECT_TEMPLATE = HERE / "stategate.toml"
PROTOCOL = Subprotocol("graphql-transport-ws")
HANDSHAKES = 3  # the live check's WebSocket handshakes to a node at most,
HANDSHAKE_S = 10.0  # each left this long unanswered
# The demo's bookings span the week before this instant, so the example queries find them.
END_MS = int(datetime(2026, 11, 1, tzinfo=UTC).timestamp() * 1000)
PIPELINE_STOP_S = 60.0  # the pipeline lets its micro-batch finish (up to 30 s), then stops Spark
GENERATED = "generated"  # in the demo's folder once its bookings are all in Kafka
BUCKET = "demo"  # --across: the bucket on the demo's S3Proxy its snapshots are published to
# The pipeline's lines the terminal shows while it builds: its own and its log's, but one per
# partition and its notice to nodes not started yet; the line that says it follows the log
# ends the wait.
PROGRESS = re.compile(
    rb" pipeline (?:spark_pipeline|topics)[\w.]*: (?!partition \d|told the nodes)(.*)"
)
FOLLOWING = b"spark_pipeline.loop: following "
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Options:
    customers: int
    events: int
    fresh: bool = False
    check: bool = False  # run the checks, then stop
    rate: float = 20.0  # live bookings per second
    elastic: bool = False  # with a coordinator: an etcd of the demo's own
    verbose: bool = False  # every pipeline line echoed, the nodes logging at DEBUG
    across: bool = False  # laid out as across machines: a bucket, TLS on every link


def example_query() -> str:
    return (HERE / "example.graphql").read_text()


def prepare(
    folder: Path,
    fresh: bool,
    coordinator: str | None = None,
    bootstrap: str | None = None,
    verbose: bool = False,
    across: bool = False,
) -> Project:
    """The demo project in `folder` (written from the template; emptied first if fresh),
    elastic with a `coordinator`, on the Kafka broker at `bootstrap`, logging at DEBUG if
    `verbose`; `across`: as across machines, its snapshots in the bucket BUCKET and TLS on
    every link, on certificates of a dev CA made in `folder`/certs."""
    if fresh and folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "stategate.toml"
    header = "# Written by `stategate demo` from stategate/demo/stategate.toml.\n"
    text = PROJECT_TEMPLATE.read_text()
    if coordinator is not None:
        entries = elastic.coordinator_entries(coordinator)
        text = text.replace("[cluster]\n", f"[cluster]\n{entries}", 1)
    if bootstrap is not None:
        template = tomllib.loads(text)["kafka"]["bootstrap"]
        text = text.replace(f'"{template}"', f'"{bootstrap}"', 1)
    if across:
        ids = [node["id"] for node in tomllib.loads(text)["cluster"]["nodes"]]
        certificates.create(folder / "certs", [*ids, STORE], [])
        url = f'[snapshots]\nurl = "s3://{BUCKET}/snapshots"\n'
        text = text.replace("[snapshots]\n", url, 1) + certificates.table("certs", mutual=False)
    if verbose:
        text += '\n[settings]\nlog_level = "debug"\n'
    path.write_text(header + text)
    shutil.copytree(HERE / "dashboard", folder / "dashboard", dirs_exist_ok=True)
    return projects.load(path)


def run(folder: Path, options: Options) -> int:
    """Until SIGINT or SIGTERM (whenever it comes: while generating, starting or running),
    then stop every child (the pipeline, which stops its Spark, the nodes, then etcd) and end
    by the signal; with `check`, until the checks ran (0, or 1 when one failed)."""
    if options.elastic and not coordinator.installed():
        print(f"stategate: the elastic demo runs etcd: {coordinator.MISSING}", file=sys.stderr)
        return 2
    if options.elastic and options.across:
        print("stategate: --elastic and --across are one or the other, for now", file=sys.stderr)
        return 2
    stop = stopping.StopRequest(raising=True).install()
    status = 0
    with contextlib.suppress(stopping.Stopped):
        status = _run(folder, options, stop)
    if stop.requested:
        stop.exit()
    return status


def _run(folder: Path, options: Options, stop: stopping.StopRequest) -> int:
    from stategate.demo import bookings

    etcd = Etcd(folder / "etcd") if options.elastic else None  # new ports each run
    generated = (folder / GENERATED).exists() and not options.fresh
    broker = Broker(folder / "kafka")  # new ports each run, its records kept
    project = prepare(
        folder,
        not generated,
        etcd.url if etcd else None,
        broker.bootstrap,
        options.verbose,
        options.across,
    )
    logs.configure("demo", project.settings)
    bucket = S3Server(folder / "s3", tls=project.tls) if options.across else None
    pipeline: subprocess.Popen[bytes] | None = None
    nodes = Processes(logs=folder / "logs")
    live = bookings.LiveBookings(project, options.customers, options.rate)
    try:
        print(f"starting Kafka ({broker.bootstrap}, its data in {broker.folder}) ...", flush=True)
        broker.start()
        if not generated:  # a half-produced week would be taken as whole: a fresh one next time
            customers, events = options.customers, options.events
            print(f"producing {events} bookings of {customers} customers ...", flush=True)
            began = time.monotonic()

            def produced(count: int) -> None:
                took = time.monotonic() - began
                print(
                    f"  {count} of {events} ({took:.0f} s{left(count, events, took)})", flush=True
                )

            bookings.generate(project, customers, events, end_ms=END_MS, produced=produced)
            (folder / GENERATED).touch()
        if etcd is not None:
            print(f"starting etcd ({etcd.url}) ...", flush=True)
            etcd.start()
        if bucket is not None:
            print(f"starting S3Proxy ({bucket.endpoint}, its objects in {bucket.folder}) ...")
            bucket.bucket(BUCKET)
            bucket.start()
            os.environ.update(bucket.env())  # the pipeline's and the nodes' (and this one's)
        print("starting the continuous pipeline (Spark, local mode) ...", flush=True)
        pipeline_log = folder / "pipeline.log"
        earlier = pipeline_log.stat().st_size if pipeline_log.exists() else 0
        pipeline = _follow(project, pipeline_log)
        _wait_published(pipeline, pipeline_log, earlier, options.verbose)
        nodes.start_nodes(project)
        live.start()
        joining = _settle(project, etcd) if etcd is not None else None
        _wait_ready(project)
        print(_instructions(project, options.rate), flush=True)
        if etcd is not None and joining is not None:
            print(elastic.instructions(project, etcd, joining), flush=True)
        if options.check:
            status = _check(project) or _check_live(project)
            if etcd is None or joining is None:
                return status
            return status or _check_join(project, etcd, nodes, joining)
        while not stop.event.wait(1.0):
            pass
        return 0
    finally:
        stop.raising = False  # a signal now must not cut the clean-up short
        live.stop()
        _stop(pipeline, nodes)
        broker.stop()
        if etcd is not None:
            etcd.stop()
        if bucket is not None:
            bucket.stop()


def _counting(total: int) -> Callable[[int], None]:
    """What prints a count as it grows: "  50000 of 250000 (3 s, about 12 s left)"."""
    began = time.monotonic()

    def told(count: int) -> None:
        took = time.monotonic() - began
        print(f"  {count} of {total} ({took:.0f} s{left(count, total, took)})", flush=True)

    return told


def _settle(project: Project, etcd: Etcd) -> elastic.Joining:
    """Wait until the nodes are placed and serve their partitions; the node to add next."""
    print("waiting until the nodes serve the partitions placed on them ...", flush=True)
    started = time.monotonic()
    state = elastic.wait_settled(project, etcd, elastic.node_urls(project))
    print(f"placed and serving in {time.monotonic() - started:.1f} s", flush=True)
    return elastic.Joining.next(state)


def _wait_ready(project: Project) -> None:
    """Until every process of every node serves (the URLs are printed next)."""
    print("waiting until every worker of every node serves ...", flush=True)

    def told(node_id: str, ready: dict[str, Any]) -> None:
        workers, partitions = ready["workers"], len(ready["versions"])
        print(f"  {node_id}: {workers['of']} workers serve {partitions} partitions", flush=True)

    launcher.wait_ready(project, [n.id for n in project.cluster.nodes], told)


def _stop(pipeline: subprocess.Popen[bytes] | None, nodes: Processes) -> None:
    """SIGTERM to every child at once, then wait for each (killed if it does not end)."""
    log.info("stopping the pipeline and %d nodes", len(nodes.procs))
    if pipeline is not None and pipeline.poll() is None:
        pipeline.terminate()  # it lets its micro-batch finish and stops Spark
    nodes.stop_all()
    if pipeline is not None:
        try:
            pipeline.wait(PIPELINE_STOP_S)
        except subprocess.TimeoutExpired:
            pipeline.kill()
            pipeline.wait()


def _follow(project: Project, log: Path) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "stategate.cli", "pipeline"]
    command += ["--config", str(project.path), "--follow"]
    with open(log, "ab") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)


def _wait_published(pipeline: subprocess.Popen[bytes], log: Path, seen: int, verbose: bool) -> None:
    """Until the pipeline has caught up with the log and follows it, its progress lines
    past `seen` (earlier runs') echoed meanwhile (what it reads, its Spark stage's tasks,
    what it published); if `verbose`, every line it logs."""
    print(f"  (the pipeline's whole log: {log})", flush=True)
    while True:
        with open(log, "rb") as out:
            out.seek(seen)
            new = out.read()
        lines = new[: new.rfind(b"\n") + 1]
        seen += len(lines)
        for line in lines.splitlines():
            if verbose:
                print(f"  {line.decode(errors='replace')}", flush=True)
            elif said := PROGRESS.search(line):
                print(f"  pipeline: {said.group(1).decode(errors='replace')}", flush=True)
        if FOLLOWING in lines:
            return
        if pipeline.poll() is not None:
            raise RuntimeError(f"the pipeline stopped:\n{log.read_text()[-3000:]}")
        time.sleep(0.5)


def _instructions(project: Project, rate: float) -> str:
    url = project.cluster.nodes[0].url
    query = (
        '{ latestBooking(key: "C000001") { record { trip price } meta { partitions { node } } } }'
    )
    payload = json.dumps({"query": query})
    lines = [
        "",
        "The cluster is up: " + ", ".join(f"{n.id} {n.url}" for n in project.cluster.nodes),
        f"Live dashboard:     {url}/pages/",
        f"GraphQL playground: {url}/graphql   (any node answers any query; subscriptions too)",
        f"Partition map:      {url}/cluster",
        f"Project file:       {project.path}",
        f"Logs:               {project.path.parent / 'logs'}/node*.log, "
        f"{project.path.parent / 'pipeline.log'}",
        "",
        "Try this in the playground:",
        example_query(),
        "and this, which pushes the top 10 customers by revenue whenever they change:",
        "  subscription { customerTotalsList(orderBy: [REVENUE_DESC], first: 10) "
        "{ records { key revenue } } }",
        "",
        "or with curl:",
        f"  curl -s{_cacert(project)} {url}/graphql -H 'content-type: application/json' "
        f"-d '{payload}'",
        *_across(project),
        "",
        f"New bookings arrive at {rate:g}/s and are published every "
        f"{project.settings.trigger_interval_s:g} s: run a query twice to see the state move.",
        "Ctrl-C stops the nodes, the pipeline, the bookings and Kafka.",
    ]
    return "\n".join(lines)


def _cacert(project: Project) -> str:
    return f" --cacert {project.tls.ca}" if project.tls else ""


def _across(project: Project) -> list[str]:
    """What --across adds: where the snapshots and the CA are."""
    if project.tls is None:
        return []
    return [
        "",
        f"Laid out as across machines: the pipeline publishes to {project.snapshot_url} on",
        "the demo's S3Proxy, the nodes pull from there, and every link is TLS. Browsers do",
        f"not know the demo's CA: import {project.tls.ca} or accept the warning.",
    ]


def _check(project: Project) -> int:
    """Ask the example queries of every node; fail loudly on any error."""
    nodes = project.cluster.nodes
    return int(any(_check_node(node.id, node.url, project.tls) for node in nodes))


def _check_node(node_id: str, url: str, tls: Tls | None = None) -> int:
    """Ask the example queries of one node: 0, or 1 after printing what went wrong."""
    with httpx.Client(verify=verify(tls), timeout=30) as client:
        response = client.post(f"{url}/graphql", json={"query": example_query()})
    body = response.json()
    if response.status_code != 200 or body.get("errors"):
        print(f"{node_id}: {json.dumps(body)[:2000]}")
        return 1
    data = body["data"]
    empty = [name for name, value in data.items() if not _has_rows(value)]
    if empty:
        print(f"{node_id}: no rows from {empty}")
        return 1
    print(f"{node_id}: ok, {json.dumps(data['latestBooking']['record'], ensure_ascii=False)}")
    return 0


def _has_rows(value: dict[str, object]) -> bool:
    rows = value.get("record") or value.get("entries") or value.get("records")
    return bool(rows or value.get("windows") or value.get("versions"))


def _wait_warm(project: Project, timeout_s: float) -> None:
    """Until the pipeline has published twice since the nodes started: its first micro-batch
    pays for starting its Python workers, the check measures the steady state."""
    url = f"{project.cluster.nodes[0].url}/ready"
    first = probes(project.tls).get(url, timeout=30).json()["versions"]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        versions = probes(project.tls).get(url, timeout=30).json()["versions"]
        if any(versions[p] >= first[p] + 2 for p in first):
            return
        time.sleep(0.2)


def _check_live(project: Project, timeout_s: float = 60) -> int:
    """Subscribe on every node to a new customer's latest booking, produce that booking by
    hand, and wait until every node has pushed it."""
    _wait_warm(project, timeout_s)
    key = f"LIVE-{time.time_ns()}"
    query = "subscription($k: String!) { latestBooking(key: $k) { record { price } } }"
    with contextlib.ExitStack() as stack:
        sockets = {}
        for node in project.cluster.nodes:
            url = "ws" + node.url.removeprefix("http") + "/graphql"  # https: wss
            tls = project.tls.client() if project.tls else None
            ws = stack.enter_context(_opened(url, tls))
            ws.send(json.dumps({"type": "connection_init"}))
            ws.recv(timeout_s)  # connection_ack
            subscribe = {"query": query, "variables": {"k": key}}
            ws.send(json.dumps({"id": "live", "type": "subscribe", "payload": subscribe}))
            ws.recv(timeout_s)  # the first result: no booking yet
            sockets[node.id] = ws
        value = {"trip": "Berlin→Hamburg", "price": 42.0, "seats": 1}
        produced = time.monotonic()
        log = open_log(project)
        try:
            log.append(project.topics["bookings"], [Record(key, value, now_ms())])
        finally:
            log.close()
        for node_id, ws in sockets.items():
            try:
                pushed = json.loads(ws.recv(max(0.1, timeout_s - (time.monotonic() - produced))))
            except TimeoutError:
                print(f"{node_id} pushed nothing within {timeout_s} s")
                return 1
            seconds = time.monotonic() - produced
            record = pushed["payload"]["data"]["latestBooking"]["record"]
            print(f"{node_id}: pushed the booking produced by hand {seconds:.1f} s later: {record}")
    return 0


def _opened(url: str, tls: ssl.SSLContext | None) -> ClientConnection:
    """A WebSocket to a node, as a dashboard opens one: a handshake left unanswered for
    HANDSHAKE_S (on two cores shared with the whole demo, and more) is tried again on a new
    connection, HANDSHAKES times in all."""
    for _ in range(HANDSHAKES - 1):
        try:
            return connect(url, subprotocols=[PROTOCOL], ssl=tls, open_timeout=HANDSHAKE_S)
        except TimeoutError:
            log.info("%s: no answer to the WebSocket handshake in %g s; again", url, HANDSHAKE_S)
    return connect(url, subprotocols=[PROTOCOL], ssl=tls, open_timeout=HANDSHAKE_S)


def _check_join(project: Project, etcd: Etcd, nodes: Processes, joining: elastic.Joining) -> int:
    """Run the printed command that adds a node, and time it to serving its share while the
    first node answers the dashboard's batch query (none may be partial); then ask the new
    node the example queries."""
    first = project.cluster.nodes[0]
    members = {**elastic.node_urls(project), joining.node: joining.url}
    print(f"\nadding {joining.node}: {elastic.join_command(project, joining)}", flush=True)
    with elastic.Reader(first.url) as reader:
        started = time.monotonic()
        argv = shlex.split(elastic.join_command(project, joining))
        nodes.start(joining.node, argv, joining.url)
        state = elastic.wait_settled(project, etcd, members)
        seconds = time.monotonic() - started
        time.sleep(elastic.HOLD_S)
    assert state.assignment is not None  # settled
    share = state.assignment.hosted_by(joining.node)
    active = [p for p in share if state.assignment.serving[p][0] == joining.node]
    print(
        f"{joining.node}: serving its share {seconds:.1f} s after it started: replicas of "
        f"partitions {share} (active for {active}) of {project.cluster.partitions}, "
        f"assignment version {state.assignment.version}"
    )
    shown = sorted(p for p, node in reader.nodes.items() if node == joining.node)
    print(
        f"{first.id}: {reader.answers} answers to the dashboard's batch query of "
        f"{len(elastic.WATCHED)} keys while {joining.node} joined, {reader.partial} partial; "
        f"in the last, {joining.node} answered partitions {shown}"
    )
    if reader.partial or not reader.answers:
        return 1
    return _check_node(joining.node, joining.url)
