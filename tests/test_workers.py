"""Nodes of two workers each (README: Workers): every worker answers as the oracle says,
follows the keeper's switches, and counts in the node's metrics; a follower ends with its
keeper. Each connection below is matched to the worker process that accepted it (psutil
lists a process's sockets), so what each worker answered is known, not assumed."""

from __future__ import annotations

import collections
import contextlib
import http.client
import json
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

from gateway.workers.keeper import STUCK_CHECK_S, STUCK_S
from spark_pipeline import job
from spark_pipeline.spark import LazySpark
from stategate.launcher import node_command, wait_serving
from tests import oracle, wire
from tests.live import Socket
from tests.nodes import Served, metric, serve
from tests.projects import produce_test_events

RANGE = """{ trainDelaysRange(first: 1000) {
  records { key reports totalDelay worstDelay }
  meta { partial partitions { partition version } } } }"""
BATCH = """query($keys: [String!]!) { latestBookingBatch(keys: $keys) {
  entries { key failure record { key seats } } meta { partial } } }"""
LIVE = "subscription { trainDelaysRange(first: 1000) { records { key reports } } }"
WORKERS = 2
SHARED_IMPORTS_MIB = 20  # of the ~40 MiB a node's imports write
ACCEPT_WAIT_S = 5.0
MAX_CONNECTIONS = 64  # opened until both workers of a node hold one (the kernel hashes them)
START_WAIT_S = 60.0
STOP_WAIT_S = 30.0
ORPHAN_END_S = 20.0  # a follower whose keeper is gone ends within this (it waited 60 s)
PAUSE_S = 10.0  # a follower stopped this long
LOOKUPS = 60  # during the pause's first
LOOKUP_EVERY_S = 0.1  # 6 s
LOOKUP_TIMEOUT_S = 30.0
HUNG_S = 1.0  # a lookup that took longer hung (one takes milliseconds)


@pytest.fixture(scope="module")
def cluster(spark: LazySpark, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    served = serve(tmp_path_factory.mktemp("workers"), spark, seed=11, start=False,
                   settings=f"workers = {WORKERS}")  # fmt: skip
    served.nodes.start_all()
    yield served
    served.nodes.stop_all()


def workers(cluster: Served, node: str) -> list[int]:
    """The node's worker processes, the keeper first."""
    keeper = psutil.Process(cluster.nodes.processes.pid(node))
    return [keeper.pid, *(c.pid for c in keeper.children())]


def acceptor(pids: list[int], port: int, client_port: int) -> int:
    """The worker whose socket is the server side of the client's connection (once it
    accepted it: until then the connection waits in the kernel's queue)."""
    deadline = time.monotonic() + ACCEPT_WAIT_S
    while time.monotonic() < deadline:
        for pid in pids:
            for conn in psutil.Process(pid).net_connections("tcp"):
                ends = (conn.laddr and conn.laddr.port, conn.raddr and conn.raddr.port)
                if ends == (port, client_port):
                    return pid
        time.sleep(0.01)
    raise AssertionError(f"no worker of {pids} holds the connection from port {client_port}")


def connections(cluster: Served, node: str) -> dict[int, http.client.HTTPConnection]:
    """One open connection to each worker of the node."""
    host, port = cluster.project.cluster.node(node).address.rsplit(":", 1)
    pids = workers(cluster, node)
    assert len(pids) == WORKERS, pids
    held: dict[int, http.client.HTTPConnection] = {}
    for _ in range(MAX_CONNECTIONS):
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
        conn.connect()
        assert conn.sock is not None
        pid = acceptor(pids, int(port), conn.sock.getsockname()[1])
        if pid in held:
            conn.close()
        else:
            held[pid] = conn
        if len(held) == WORKERS:
            return held
    raise AssertionError(f"{MAX_CONNECTIONS} connections all went to {list(held)}")


def post(
    conn: http.client.HTTPConnection, query: str, variables: Any = None, name: str | None = None
) -> Any:
    body = json.dumps({"query": query, "variables": variables or {}, "operationName": name})
    conn.request("POST", "/graphql", body, {"content-type": "application/json"})
    response = conn.getresponse()
    answer = json.loads(response.read())
    assert response.status == 200 and not answer.get("errors"), answer
    return answer["data"]


def delays(cluster: Served) -> list[tuple]:
    parts = oracle.expected_store(cluster.project, "trainDelays")
    return sorted(r[:4] for part in parts.values() for r in part)


def as_rows(records: list[dict[str, Any]]) -> list[tuple]:
    return sorted(
        (r["key"], wire.long(r["reports"]), wire.maybe_long(r["totalDelay"]), r["worstDelay"])
        for r in records
    )


def test_every_worker_answers_as_the_oracle(cluster: Served) -> None:
    bookings = {r[0]: r for part in oracle.expected_store(cluster.project, "latestBooking").values()
                for r in part}  # fmt: skip
    keys = [*bookings, "nobody"]
    expected = delays(cluster)
    for node in cluster.nodes.ids:
        for pid, conn in connections(cluster, node).items():
            found = post(conn, RANGE)["trainDelaysRange"]
            assert not found["meta"]["partial"], (node, pid)
            assert as_rows(found["records"]) == expected, (node, pid)
            batch = post(conn, BATCH, {"keys": keys})["latestBookingBatch"]
            assert [e["key"] for e in batch["entries"]] == keys
            for entry in batch["entries"]:
                assert entry["failure"] is None
                record = entry["record"]
                assert (record is not None) == (entry["key"] in bookings), (node, pid, entry)
            conn.close()


def test_a_nodes_first_followers_share_its_imported_modules(cluster: Served) -> None:
    """Forked from the keeper once it imported the node's modules: the pages those imports
    wrote are the keeper's and its followers' at once (Shared_Dirty counts only such pages,
    which a process started by its command shares with none)."""
    for pid in workers(cluster, "node1"):
        assert shared_dirty_mib(pid) > SHARED_IMPORTS_MIB, pid


def shared_dirty_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Shared_Dirty:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no Shared_Dirty for {pid}")


def test_metrics_count_every_workers_requests(cluster: Served) -> None:
    held = connections(cluster, "node2")
    name = "stategate_graphql_requests_total"
    before = metric(cluster.nodes.metrics("node2"), name, operation="counted", outcome="ok")
    for conn in held.values():
        for _ in range(5):
            post(conn, "query counted { trainDelays(key: 1) { record { key } } }", name="counted")
    for pid, conn in held.items():  # the node's metrics, whichever worker is asked
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
        after = [line for line in text.splitlines()
                 if line.startswith(name) and 'operation="counted"' in line]  # fmt: skip
        assert after == [f'{name}{{operation="counted",outcome="ok"}} {before + 10}'], pid
        versions = [
            line for line in text.splitlines() if line.startswith("stategate_snapshot_version{")
        ]
        assert versions and all(v.endswith(" 1.0") for v in versions), versions  # not summed
        conn.close()


def test_followers_switch_with_their_keeper(cluster: Served, spark: LazySpark) -> None:
    node, before = "node1", delays(cluster)
    url = cluster.nodes.url(node)
    pids, port = workers(cluster, node), int(url.rsplit(":", 1)[1])
    sockets: dict[int, Socket] = {}
    for _ in range(MAX_CONNECTIONS):
        socket = Socket(url)
        pid = acceptor(pids, port, socket.ws.socket.getsockname()[1])
        if pid in sockets:
            socket.close()
            continue
        sockets[pid] = socket
        socket.subscribe("s", LIVE)
        assert len(socket.next_of("s")["data"]["trainDelaysRange"]["records"]) == len(before)
        if len(sockets) == WORKERS:
            break
    assert len(sockets) == WORKERS
    produce_test_events(
        cluster.project, seed=12, n_bookings=100, n_trains=300, start_ms=1_767_400_000_000
    )
    report = job.run(cluster.project, spark, notify=True)  # a sync asked of any worker
    assert set(report.notify.values()) == {"ok"}, report.notify
    after = delays(cluster)
    assert after != before
    for pid, socket in sockets.items():  # each worker's subscription pushes the new rows
        deadline = time.monotonic() + 30
        records: list[dict[str, Any]] = []
        while sorted((r["key"], wire.long(r["reports"])) for r in records) != [
            r[:2] for r in after
        ]:
            assert time.monotonic() < deadline, (pid, "no push of the new version")
            records = socket.next_of("s")["data"]["trainDelaysRange"]["records"]
        socket.close()
    for pid, conn in connections(cluster, node).items():
        found = post(conn, RANGE)["trainDelaysRange"]
        assert as_rows(found["records"]) == after, pid
        assert {p["version"] for p in found["meta"]["partitions"]} == {2}, pid
        conn.close()


def test_a_second_node_on_the_port_or_the_folder_is_refused(cluster: Served) -> None:
    """Another process of node1 is refused for its data_dir, which node1's keeper holds; a
    node of another folder on node1's port, for the port. Each says so in one line: its
    forked followers end without a word, and nothing follows from DuckDB's binding."""
    command = node_command(cluster.project, "node1")
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "is in use by another node's process" in done.stderr, done.stderr
    path = cluster.project.path
    elsewhere = path.with_name("elsewhere.toml")
    elsewhere.write_text(path.read_text().replace('data_dir = "node1"', 'data_dir = "other1"'))
    command = [str(elsewhere) if part == str(path) else part for part in command]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "cannot listen on" in done.stderr and "in use" in done.stderr, done.stderr


def ended(pid: int, timeout: float) -> bool:
    try:
        psutil.Process(pid).wait(timeout)
    except psutil.NoSuchProcess:
        pass
    except psutil.TimeoutExpired:
        return False
    return True


def running(process: psutil.Process) -> bool:
    """Not ended: a zombie has (only its exit status waits for its parent)."""
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_follower_that_dies_is_started_again(cluster: Served) -> None:
    node = "node2"
    keeper, follower = workers(cluster, node)
    psutil.Process(follower).kill()
    assert ended(follower, 10)
    held = replaced(cluster, node, follower)
    assert keeper in held
    expected = delays(cluster)
    for pid, conn in held.items():
        assert as_rows(post(conn, RANGE)["trainDelaysRange"]["records"]) == expected, pid
        conn.close()


def test_ready_counts_the_workers_serving(cluster: Served) -> None:
    node = "node3"
    held = connections(cluster, node)
    for pid, conn in held.items():  # a follower's answer is the keeper's count
        assert ready(conn)["workers"] == {"serving": WORKERS, "of": WORKERS}, pid
    keeper, follower = workers(cluster, node)
    held.pop(follower).close()
    psutil.Process(follower).kill()
    assert ended(follower, 10)
    deadline = time.monotonic() + ACCEPT_WAIT_S  # once the keeper read the channel's end
    while ready(held[keeper])["workers"] != {"serving": WORKERS - 1, "of": WORKERS}:
        assert time.monotonic() < deadline, ready(held[keeper])
        time.sleep(0.05)
    held[keeper].close()
    for pid, conn in replaced(cluster, node, follower).items():
        assert ready(conn)["workers"] == {"serving": WORKERS, "of": WORKERS}, pid
        conn.close()


def ready(conn: http.client.HTTPConnection) -> Any:
    conn.request("GET", "/ready")
    response = conn.getresponse()
    body = json.loads(response.read())
    assert response.status == 200, body
    return body


def replaced(cluster: Served, node: str, follower: int) -> dict[int, http.client.HTTPConnection]:
    """Once a new follower serves in place of `follower`: one connection to each worker."""
    deadline = time.monotonic() + START_WAIT_S
    while len(found := workers(cluster, node)) < WORKERS or follower in found:
        assert time.monotonic() < deadline, found
        time.sleep(0.1)
    while True:  # until the new follower serves (it listens once it does)
        try:
            held = connections(cluster, node)
            break
        except AssertionError:
            assert time.monotonic() < deadline, "the new follower does not serve"
            time.sleep(0.5)
    assert set(held) == set(found)
    return held


@dataclass(frozen=True)
class Lookup:
    began: float  # seconds into the pause
    took: float
    outcome: str  # "ok", or the error's name


def lookup(url: str, began: float, found: list[Lookup]) -> None:
    """One lookup on a connection of its own, as a client without keep-alive sends it."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=LOOKUP_TIMEOUT_S)
    start = time.monotonic()
    try:
        post(conn, "{ trainDelays(key: 1) { record { key } } }")
        outcome = "ok"
    except (OSError, http.client.HTTPException) as exc:
        outcome = type(exc).__name__
    finally:
        conn.close()
    found.append(Lookup(began, time.monotonic() - start, outcome))


def test_a_stopped_follower_stops_taking_connections(cluster: Served) -> None:
    """SIGSTOP a follower for PAUSE_S while lookups arrive, each on a new connection: those
    the kernel hands the stopped worker wait at most STUCK_S and a poll, then fail (its
    keeper killed it); any sent later is answered at once, and a new follower serves."""
    node = "node1"
    url = cluster.nodes.url(node)
    _, pid = workers(cluster, node)
    follower = psutil.Process(pid)
    found: list[Lookup] = []
    sent: list[threading.Thread] = []
    follower.suspend()
    paused = time.monotonic()
    try:
        for i in range(LOOKUPS):
            time.sleep(max(0.0, paused + i * LOOKUP_EVERY_S - time.monotonic()))
            began = time.monotonic() - paused
            sent.append(threading.Thread(target=lookup, args=(url, began, found)))
            sent[-1].start()
        time.sleep(max(0.0, paused + PAUSE_S - time.monotonic()))
    finally:
        with contextlib.suppress(psutil.NoSuchProcess):
            follower.resume()
        for thread in sent:
            thread.join()
    hung = [x for x in found if x.took > HUNG_S]
    failed = collections.Counter(x.outcome for x in found if x.outcome != "ok")
    longest = max(x.took for x in found)
    seen = f"{len(hung)} of {len(found)} lookups hung, at most {longest:.1f} s; failed: {failed}"
    print(seen)  # what a client sees (-s)
    bound = STUCK_S + STUCK_CHECK_S + 2  # a kill, and a loaded machine's slack
    assert all(x.took < bound for x in found), seen
    assert all(x.outcome == "ok" for x in found if x.began > bound), seen
    assert not follower.is_running()
    replaced(cluster, node, pid)


def test_followers_end_with_their_keeper(cluster: Served) -> None:
    """Killed: its followers stop on their own, and the node starts again on its port.
    Stopped: the keeper ends after its followers."""
    node = "node3"
    _, *followers = workers(cluster, node)
    cluster.nodes.processes.kill(node, started_too=False)
    assert all(ended(pid, 30) for pid in followers)
    cluster.nodes.start(node)
    wait_serving(cluster.project, [node])
    keeper, *followers = workers(cluster, node)
    assert len(followers) == WORKERS - 1
    cluster.nodes.processes.stop(node)
    assert all(ended(pid, 0) for pid in followers)


@contextlib.contextmanager
def started_alone(cluster: Served, node: str, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """The node started again by its command, logging to `log`, not waited for; then ended
    (each of its processes killed, whatever the test left) and started as before."""
    if node in cluster.nodes.processes.procs:
        cluster.nodes.processes.stop(node)
    with open(log, "ab") as out:
        keeper = subprocess.Popen(
            node_command(cluster.project, node), stdout=out, stderr=subprocess.STDOUT
        )
    seen = [psutil.Process(keeper.pid)]
    try:
        yield keeper
    finally:
        with contextlib.suppress(psutil.NoSuchProcess):
            seen += psutil.Process(keeper.pid).children()
        for process in seen:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()
        keeper.wait()
        psutil.wait_procs(seen, timeout=STOP_WAIT_S)
        cluster.nodes.start(node)
        wait_serving(cluster.project, [node])


def first_follower(keeper: subprocess.Popen[bytes]) -> psutil.Process:
    """The keeper's first follower, as soon as its process exists."""
    deadline = time.monotonic() + START_WAIT_S
    while not (found := psutil.Process(keeper.pid).children()):
        assert keeper.poll() is None and time.monotonic() < deadline, "no follower started"
        time.sleep(0.005)
    return found[0]


def said(log: Path, pid: int) -> tuple[list[str], list[str]]:
    """What the worker `pid` logged of its stop, and what it logged above INFO."""
    lines = [x for x in log.read_text(errors="replace").splitlines() if f"worker {pid} " in x]
    return [x for x in lines if "this worker stops" in x], [x for x in lines if " INFO " not in x]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL])
def test_followers_end_with_a_keeper_gone_before_they_joined(
    cluster: Served, tmp_path: Path, signum: int
) -> None:
    """Stopped or killed as soon as its follower exists, long before it opens its channel:
    the follower ends soon, with one line that says why (and the node starts again)."""
    log = tmp_path / "node3.log"
    with started_alone(cluster, "node3", log) as keeper:
        follower = first_follower(keeper)
        keeper.send_signal(signum)
        assert keeper.wait(STOP_WAIT_S) == -signum
        assert ended(follower.pid, ORPHAN_END_S), "the follower outlives its keeper"
    text = log.read_text(errors="replace")
    assert "Traceback" not in text, text
    why, complaints = said(log, follower.pid)
    assert len(why) == 1 and set(complaints) <= set(why), text


def test_a_keeper_stopped_while_starting_ends_its_followers_first(
    cluster: Served, tmp_path: Path
) -> None:
    """SIGTERM while the keeper installs, before its followers could join it: it ends by the
    signal once they all ended, and none says more than why it stops."""
    node, log = "node3", tmp_path / "node3.log"
    with started_alone(cluster, node, log) as keeper:
        follower = first_follower(keeper)
        deadline = time.monotonic() + START_WAIT_S
        while f"{node} uvicorn.error: Waiting for application startup" not in log.read_text():
            assert keeper.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.005)
        keeper.send_signal(signal.SIGTERM)
        assert keeper.wait(STOP_WAIT_S) == -signal.SIGTERM
        assert not running(follower), "the keeper ended before its follower"
    text = log.read_text(errors="replace")
    assert "Traceback" not in text, text
    why, complaints = said(log, follower.pid)
    assert len(why) == 1 and " INFO " in why[0] and not complaints, text
