"""SIGTERM stops every kind of stategate process cleanly and soon, and leaves no process it
started behind: a node (with a WebSocket subscription and a keep-alive connection open), the
snapshot store server, the producer reading its input (nothing appended), a one-shot pipeline
run building its layers (nothing published; the next run publishes all of it, right), and
the demo, while it starts and once it runs (its pipeline with Spark's JVM and Python workers,
and its nodes). Each ends by the signal: -SIGTERM here, status 143 in a shell. The continuous
pipeline's stop is tested with its crash recovery (tests/test_follow.py). A start that fails
(stategate/launcher.py) stops what it started too."""

from __future__ import annotations

import contextlib
import json
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from contracts import eventlog
from contracts import project as projects
from contracts.project import Project
from spark_pipeline import job
from spark_pipeline.spark import LazySpark
from stategate import demo
from stategate.launcher import Processes, free_ports, node_command
from tests.live import Socket, closed_code
from tests.nodes import Nodes
from tests.projects import produce_test_events, write_project
from tests.test_stream import assert_state_is_the_oracles, manifest_of

SERVER_STOP_S = 5.0  # a node, the store server, the producer
SPARK_STOP_S = 30.0  # the pipeline and the demo: Spark stops its context, then its JVM
START_S = 300.0


def stop(
    proc: subprocess.Popen[bytes], within_s: float, by: signal.Signals = signal.SIGTERM
) -> float:
    """Signal `proc` (SIGTERM; SIGINT is Ctrl-C); it and every process it started end within
    `within_s`, it by the signal. Returns how long that took."""
    children = psutil.Process(proc.pid).children(recursive=True)
    started = time.monotonic()
    proc.send_signal(by)
    try:
        returncode = proc.wait(within_s)
    except subprocess.TimeoutExpired:
        kill_tree(proc)
        raise AssertionError(f"still running {within_s} s after SIGTERM") from None
    left = max(0.1, within_s - (time.monotonic() - started))
    _, alive = psutil.wait_procs(children, timeout=left)
    alive = [p for p in alive if running(p)]
    for process in alive:
        process.kill()
    assert not alive, f"left behind: {[(p.pid, p.name()) for p in alive]}"
    assert returncode == -by
    return time.monotonic() - started


def kill_tree(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL `proc` and every process it started (a failed test leaves none behind)."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(psutil.NoSuchProcess):
        for child in psutil.Process(proc.pid).children(recursive=True):
            with contextlib.suppress(psutil.NoSuchProcess):
                child.kill()
    proc.kill()
    proc.wait()


def running(process: psutil.Process) -> bool:
    """Not ended: a zombie has (only its exit status waits for its parent, or for init)."""
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_for(text: bytes, log: Path, proc: subprocess.Popen[bytes], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while text not in log.read_bytes():
        assert proc.poll() is None, log.read_text(errors="replace")[-3000:]
        assert time.monotonic() < deadline, log.read_text(errors="replace")[-3000:]
        time.sleep(0.1)


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return projects.load(write_project(tmp_path, free_ports(3)))


@pytest.mark.parametrize("by", [signal.SIGTERM, signal.SIGINT])
def test_a_node_stops_with_a_subscription_and_a_connection_open(
    project: Project, spark: LazySpark, by: signal.Signals
) -> None:
    """Ctrl-C too, without a word past the shutdown's (DuckDB's binding reported its types
    as leaked at the interpreter's exit: issue 50)."""
    produce_test_events(project, seed=1, n_bookings=100, n_trains=10, n_trips=10)
    job.run(project, spark, notify=False)
    processes = Processes(project.path.parent)
    try:
        processes.start_nodes(project, ["node1"])
        url = project.cluster.node("node1").url
        client = httpx.Client()
        assert client.get(f"{url}/health").status_code == 200  # kept alive
        page = "{ latestBookingList(first: 5) { records { key } } latestBookingAggregate "
        page += "{ totalCount } }"
        assert client.post(f"{url}/graphql", json={"query": page}).status_code == 200
        socket = Socket(url)
        socket.subscribe("s", "subscription { stores { name } }")
        assert socket.next_of("s")["data"]["stores"]
        if by is signal.SIGTERM:  # meanwhile, another process of it on its folder: refused
            again = subprocess.run(node_command(project, "node1"), capture_output=True, text=True)
            assert again.returncode == 2, again.stderr
            refused = "is in use by another node's process: give node 'node1' a data_dir"
            said = [line for line in again.stderr.splitlines() if line.startswith("stategate:")]
            assert len(said) == 1 and refused in said[0], again.stderr
        stop(processes.procs["node1"], SERVER_STOP_S, by)
        assert closed_code(socket.ws) == 1012  # "service restart": come back later
        client.close()
    finally:
        processes.stop_all()
    log = (project.path.parent / "node1.log").read_text()
    assert "Application shutdown complete" in log and "Traceback" not in log
    assert "leaked" not in log, log[log.index("leaked") - 200 :][:600]


def test_the_producer_stopped_while_reading_appends_nothing(project: Project) -> None:
    command = [sys.executable, "-m", "stategate.cli", "produce"]
    command += ["--config", str(project.path), "--topic", "trains"]
    proc = subprocess.Popen(command, stdin=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdin is not None
    line = {"key": 7, "value": {"delay": 3, "station": "Köln", "cancelled": False}}
    proc.stdin.write(json.dumps(line).encode() + b"\n")
    proc.stdin.flush()
    time.sleep(1.0)  # it reads on, waiting for the end of its input
    stop(proc, SERVER_STOP_S)
    assert proc.stderr is not None and b"Traceback" not in proc.stderr.read()
    ends = [eventlog.end_offset(project.log_dir, "trains", p) for p in range(9)]
    assert ends == [0] * 9


def test_a_pipeline_run_stopped_while_building_publishes_nothing(
    tmp_path: Path, spark: LazySpark
) -> None:
    # On the executors, as a big run is built: a small one, built in the driver, ends first.
    path = write_project(tmp_path, free_ports(3), settings="driver_batch_records = 0")
    project = projects.load(path)
    produce_test_events(project, seed=3)
    log = project.path.parent / "pipeline.log"
    command = [sys.executable, "-m", "stategate.cli", "pipeline"]
    command += ["--config", str(project.path), "--no-notify"]
    with open(log, "wb") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_for(b"building 9 layers", log, proc, START_S)
        stop(proc, SPARK_STOP_S)
    finally:
        kill_tree(proc)
    text = log.read_text()
    assert "SIGTERM: stopping" in text and "stopped before publishing" in text, text[-3000:]
    assert not (Path(project.snapshot_store) / "manifest.json").exists()
    job.run(project, spark, notify=False)  # the next run publishes every record, once
    assert_state_is_the_oracles(project, manifest_of(project))


# The demo on free ports: its project template with the loopback ports replaced.
ON_PORTS = """
import sys
from pathlib import Path
from stategate import demo
demo.PROJECT_TEMPLATE = Path(sys.argv[1])
from stategate.cli import main
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.parametrize("when", ["starting", "running"])
def test_the_demo_stops_every_process_it_started(tmp_path: Path, when: str) -> None:
    template = demo.PROJECT_TEMPLATE.read_text()
    for old, new in zip((8101, 8102, 8103), free_ports(3), strict=True):
        template = template.replace(f"127.0.0.1:{old}", f"127.0.0.1:{new}")
    # Spark builds even this small log, as the demo's own 250,000 bookings: a JVM to stop.
    template += "\n[settings]\ndriver_batch_records = 0\n"
    (tmp_path / "stategate.toml").write_text(template)
    command = [sys.executable, "-c", ON_PORTS, str(tmp_path / "stategate.toml"), "demo"]
    command += ["--dir", str(tmp_path / "demo"), "--customers", "300", "--events", "3000"]
    log = tmp_path / "demo.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    try:
        if when == "starting":  # Spark is starting, the nodes are not yet
            wait_for(b"starting the continuous pipeline", log, proc, START_S)
            deadline = time.monotonic() + START_S
            while "spark" not in jvms(proc):
                assert time.monotonic() < deadline
                time.sleep(0.1)
        else:
            wait_for(b"The cluster is up", log, proc, START_S)
            told = log.read_text().split("The cluster is up")[0]
            assert "  3000 of 3000 (" in told, told  # the bookings produced
            for node in ("node1", "node2", "node3"):  # each node's workers all serve first
                assert re.search(rf"  {node}: (\d+) workers serve \d+ partitions", told), told
            names = [p.name() for p in psutil.Process(proc.pid).children(recursive=True)]
            assert sorted(jvms(proc)) == ["kafka", "spark"], names
            assert len(names) >= 6, names  # and the pipeline, 3 nodes
        stop(proc, SPARK_STOP_S)
    finally:
        kill_tree(proc)
    assert "Traceback" not in log.read_text(), log.read_text()[-3000:]


def jvms(proc: subprocess.Popen[bytes]) -> list[str]:
    """The JVMs among the process's descendants: Kafka's broker, Spark's driver."""
    found = []
    for child in psutil.Process(proc.pid).children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if child.name() == "java":
                found.append("kafka" if "kafka.Kafka" in child.cmdline() else "spark")
    return found


# A server for the launcher: for `seconds` it loads (logging a line every 0.3 s, or working
# without a word), or hangs (asleep, after starting a child process that sleeps too); then
# it answers GET /health. Its last argument (and its child's) marks the test's processes.
SERVER = """
import http.server, subprocess, sys, time
how, port, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
if how == "hangs":
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", sys.argv[4]])
end = time.monotonic() + seconds
while time.monotonic() < end:
    if how == "logs":
        print("loading", flush=True)
    if how != "works":
        time.sleep(0.3)
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
"""
QUIET_S = 2.0  # what a test's start allows without progress
LOADING_S = 4.0


def leftovers(marker: str) -> list[psutil.Process]:
    """The processes this test process started (or theirs) whose command names `marker`,
    still running."""
    found = []
    for process in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.NoSuchProcess):
            if any(marker in part for part in process.cmdline()) and running(process):
                found.append(process)
    return found


@pytest.fixture
def no_leftovers(tmp_path: Path) -> Iterator[str]:
    """A marker for the test's processes; none of them may be left running after it."""
    yield str(tmp_path)
    left = leftovers(str(tmp_path))
    for process in left:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()
    assert not left, f"left behind: {[p.cmdline() for p in left]}"


def test_a_start_that_fails_stops_what_it_started(tmp_path: Path, no_leftovers: str) -> None:
    processes = Processes(tmp_path)
    port = free_ports(1)[0]
    command = [sys.executable, "-c", SERVER, "hangs", str(port), "600", no_leftovers]
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="did not come up"):
        processes.start("hung", command, f"http://127.0.0.1:{port}", QUIET_S)
    assert time.monotonic() - started < QUIET_S + SERVER_STOP_S + 5
    assert not processes.procs


def test_nodes_that_fail_to_start_are_all_stopped(project: Project, no_leftovers: str) -> None:
    """node2's port is taken: node1, started already, is stopped, and so is node2."""
    host, port = project.cluster.node("node2").address.rsplit(":", 1)
    with socket.socket() as taken:
        taken.bind((host, int(port)))
        taken.listen()
        nodes = Nodes(project, Path(no_leftovers))
        with pytest.raises(RuntimeError, match="node2"):
            nodes.start_all()


@pytest.mark.parametrize("how", ["logs", "works"])
def test_a_start_waits_while_the_server_makes_progress(
    tmp_path: Path, no_leftovers: str, how: str
) -> None:
    """Loading for twice the time a start allows without progress: it logs or it works."""
    processes = Processes(tmp_path)
    port = free_ports(1)[0]
    command = [sys.executable, "-c", SERVER, how, str(port), str(LOADING_S), no_leftovers]
    try:
        processes.start("loading", command, f"http://127.0.0.1:{port}", QUIET_S)
    finally:
        processes.stop_all()
