"""`stategate pipeline --follow` as a user runs it, in its own process: a driver killed in the
middle of a micro-batch (after writing its layers, or right after publishing them) loses and
doubles nothing once restarted; SIGTERM stops it cleanly (it ends by the signal, leaving no
process of Spark behind); and it runs on a Spark standalone cluster (a master and two workers
started from the pyspark package) as well as on local[*]."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pyspark
import pytest

from contracts import chains
from contracts.project import Project, load
from contracts.settings import Settings
from spark_pipeline.loop import CRASH_AT
from stategate.s3server import S3Server
from tests.chains import fetched_from_bucket
from tests.oracle import expected_chain_positions
from tests.projects import HOUR_MS, START_MS, produce_test_events, write_project
from tests.test_stop import SPARK_STOP_S, stop
from tests.test_stream import assert_state_is_the_oracles, manifest_of, wait_caught_up

CRASHED = 86  # the exit code of stream._crash_point
START_S = 120
# Spark's start and a first build on a standalone cluster's executors: six JVMs on the same 2
# cores as the other worker's tests (58 s for the driver's start alone, then 60 s more for
# its executors, seen on a fresh clone)
CLUSTER_START_S = 300


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def follow_project(root: Path, settings: str = "", snapshot_url: str | None = None) -> Project:
    """Three partitions: every micro-batch still writes several layers (one per partition);
    nine only made more of them."""
    ports = [free_port() for _ in range(3)]
    settings = f"trigger_interval_s = 0.5\n{settings}"
    return load(write_project(root, ports, 3, snapshot_url=snapshot_url, settings=settings))


class Follow:
    """One `stategate pipeline --follow` process, its output in a file."""

    def __init__(
        self, project: Project, log: Path, crash_at: str | None = None, master: str | None = None
    ) -> None:
        self.log = log
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        env.pop(CRASH_AT, None)
        if crash_at:
            env[CRASH_AT] = crash_at
        command = [sys.executable, "-m", "stategate.cli", "pipeline"]
        command += ["--config", str(project.path), "--follow", "--no-notify"]
        if master:
            command += ["--master", master]
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)

    def wait_following(self, timeout_s: float = START_S) -> None:
        deadline = time.monotonic() + timeout_s
        while b"following" not in self.log.read_bytes():
            assert self.proc.poll() is None, self.tail()
            assert time.monotonic() < deadline, self.tail()
            time.sleep(0.2)

    def wait_exit(self, timeout_s: float = START_S) -> int:
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError(self.tail()) from None

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]


def produce_round(project: Project, round_: int) -> None:
    produce_test_events(
        project,
        seed=40 + round_,
        n_bookings=120,
        n_trains=50,
        start_ms=START_MS + round_ * HOUR_MS,
    )


def published_positions(project: Project) -> dict[int, dict[str, int]]:
    """chain -> where its top layer stands (contracts/chains.py)."""
    entries = manifest_of(project)["partitions"]
    return {int(p): e["layers"][-1]["position"] for p, e in entries.items()}


@pytest.mark.parametrize("store", ["folder", "bucket"])
def test_a_driver_killed_mid_batch_loses_and_doubles_nothing(
    tmp_path: Path, store: str, request: pytest.FixtureRequest
) -> None:
    """Exactly once through crashes, with the folder store and with a bucket on S3Proxy
    (the layers uploaded, the manifest not replaced: nothing of them is published)."""
    url = None
    if store == "bucket":
        url = f"{request.getfixturevalue('s3').bucket('crashes')}/driver"
    project = follow_project(tmp_path, snapshot_url=url)
    produce_round(project, 0)

    # Killed after writing a micro-batch's layers, before publishing them.
    first = Follow(project, tmp_path / "follow.log", crash_at="layers-written")
    first.wait_following()
    before = published_positions(project)
    assert before == expected_chain_positions(project), "the first start catches up"
    produce_round(project, 1)
    assert first.wait_exit() == CRASHED, first.tail()
    assert published_positions(project) == before, "nothing of the batch was published"

    # Restarted: its first micro-batch is built in the driver (Spark is not started), which
    # publishes each partition as soon as its layer is written; killed right after the
    # first: that partition is published whole, the others not at all.
    second = Follow(project, tmp_path / "follow.log", crash_at="manifest-written")
    assert second.wait_exit() == CRASHED, second.tail()
    after, expected = published_positions(project), expected_chain_positions(project)
    moved = [c for c in after if after[c] != before[c]]
    assert len({chains.partition(project, c) for c in moved}) == 1, (before, after)
    assert all(after[c] == expected[c] for c in moved), (before, after)

    # Restarted again: nothing to catch up, nothing published twice; new records flow;
    # SIGTERM stops the pipeline cleanly.
    third = Follow(project, tmp_path / "follow.log")
    third.wait_following()
    produce_round(project, 2)
    manifest = wait_caught_up(project)
    if url is None:
        assert_state_is_the_oracles(project, manifest)
    else:  # what the bucket alone holds
        assert fetched_from_bucket(project, tmp_path / "fetched") == manifest
        assert_state_is_the_oracles(project, manifest, tmp_path / "fetched")
    stop(third.proc, SPARK_STOP_S)  # ends by the signal, Spark's JVM and workers with it
    assert '"batches"' in third.tail()


@dataclass(frozen=True)
class SparkCluster:
    url: str
    work: Path  # the workers' folder: one app-* folder per application, one per executor in it


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    """A standalone master and two one-core workers on loopback."""
    home = Path(pyspark.__file__).parent
    logs = tmp_path_factory.mktemp("spark-cluster")
    env = {
        **os.environ,
        "SPARK_HOME": str(home),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
        "SPARK_WORKER_DIR": str(logs / "work"),
    }
    spark_class = str(home / "bin" / "spark-class")
    port = free_port()
    url = f"spark://127.0.0.1:{port}"
    commands = [
        [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1"]
        + ["--port", str(port), "--webui-port", str(free_port())],
        *(
            [spark_class, "org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1"]
            + ["--cores", "1", "--memory", "1g", "--webui-port", str(free_port())]
            for _ in range(2)
        ),
    ]
    procs = []
    try:
        for number, command in enumerate(commands):
            with open(logs / f"{number}.log", "wb") as out:
                procs.append(
                    subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
                )
            if number == 0:
                wait_listening(port, procs[0], logs / "0.log")
        deadline = time.monotonic() + START_S
        while (
            sum(b"Successfully registered" in (logs / f"{n}.log").read_bytes() for n in (1, 2)) < 2
        ):
            assert time.monotonic() < deadline, (logs / "1.log").read_text()[-2000:]
            time.sleep(0.2)
        yield SparkCluster(url, logs / "work")
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()


def wait_listening(port: int, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + START_S
    while True:
        assert proc.poll() is None, log.read_text()[-2000:]
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        assert time.monotonic() < deadline, log.read_text()[-2000:]
        time.sleep(0.2)


def test_the_continuous_pipeline_runs_on_a_standalone_cluster_publishing_to_a_bucket(
    spark_cluster: SparkCluster, s3: S3Server, tmp_path: Path
) -> None:
    """Every micro-batch on the executors, however small (not in the driver): they write
    their layers in folders of their own and upload them, the driver publishes the manifest
    in the bucket. What the bucket holds makes the oracle's state after each round, none of
    the executors' layers is in the driver's folder, and both workers ran an executor.
    (A folder store written by executors is tests/test_pipeline.py's and test_stream.py's,
    on local[2].)"""
    url = f"{s3.bucket('standalone')}/follow"
    project = follow_project(tmp_path, "driver_batch_records = 0\n", snapshot_url=url)
    produce_round(project, 0)
    follow = Follow(project, tmp_path / "follow.log", master=spark_cluster.url)
    try:
        follow.wait_following(CLUSTER_START_S)
        wait_caught_up(project)
        assert_state_is_the_oracles(
            project, fetched_from_bucket(project, tmp_path / "first"), tmp_path / "first"
        )
        # reads first: at the setting's niceness (or this one's, if higher), Spark's JVM too
        driver = psutil.Process(follow.proc.pid)
        (jvm,) = [p for p in driver.children(recursive=True) if p.name() == "java"]
        nice = max(Settings().pipeline_niceness, os.getpriority(os.PRIO_PROCESS, 0))
        assert driver.nice() == jvm.nice() == nice
        produce_round(project, 1)
        wait_caught_up(project)
    finally:
        follow.proc.send_signal(signal.SIGTERM)
        assert follow.wait_exit(60) == -signal.SIGTERM, follow.tail()
    manifest = fetched_from_bucket(project, tmp_path / "fetched")
    kinds = {layer["kind"] for e in manifest["partitions"].values() for layer in e["layers"]}
    assert kinds == {"base", "delta"}  # micro-batches ran, on the executors
    deltas = [x["path"] for e in manifest["partitions"].values() for x in e["layers"]
              if x["kind"] == "delta"]  # fmt: skip
    assert not [d for d in deltas if (Path(project.snapshot_store) / d).exists()]
    assert_state_is_the_oracles(project, manifest, tmp_path / "fetched")
    # it ran on the cluster: both workers started an executor for the application (a
    # worker may start another as the application ends, before the master hears of it)
    (app,) = [d for d in spark_cluster.work.iterdir() if d.name.startswith("app-")]
    executors = [d / "stderr" for d in app.iterdir() if d.is_dir()]
    workers = {re.findall(r'"--worker-url" "([^"]+)"', e.read_text())[0] for e in executors}
    assert len(workers) == 2, workers
