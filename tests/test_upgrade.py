"""A rolling upgrade and its rollback, for real: an elastic cluster and its pipeline start
from the previous release's tree (a git worktree of PREVIOUS), every process is replaced by
this tree's one at a time while clients read, subscribe and a producer appends, then each is
rolled back. Every answer is the oracle's at its stated positions, none is partial, and no
client's positions go back (README: Upgrades and rollback)."""

from __future__ import annotations

import itertools
import json
import random
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from websockets.exceptions import ConnectionClosed

from contracts import project as projects
from contracts.project import Project
from contracts.release import CHECKOUT, COMMIT_DIGITS, release
from gateway.cluster.status import FORMATS
from stategate.etcd import serving_settled
from stategate.launcher import free_ports, node_command
from stategate.workers import STOPPED
from tests import appends, live, oracle, positions
from tests.appends import WATCHED
from tests.coordinator import Etcd
from tests.kafka import shared
from tests.nodes import Nodes
from tests.projects import produce_test_events, write_project
from tests.test_elastic import variables, wait_until

# The release this one must run beside and roll back to: the last commit whose formats this
# one reads and writes unchanged. A change that raises a format moves it (README: Upgrades
# and rollback).
PREVIOUS = "9faaf8e711dd7f5bdf450dcda6526fc4a4aeeee7"
# A restart within the grace moves nothing: the roll replaces processes, not placement.
SETTINGS = (
    "health_interval_s = 0.2\nsync_interval_s = 0.5\nsession_ttl_s = 2\n"
    "lost_node_grace_s = 60\ninternal_timeout_s = 1.0\ntrigger_interval_s = 0.5"
)
NODES = ("node1", "node2", "node3")
SETTLE_S = 60


@pytest.fixture(scope="module")
def previous(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The previous release's tree, checked out beside this one."""
    if shutil.which("git") is None or not (CHECKOUT / ".git").exists():
        pytest.skip("not a git checkout: the previous release cannot be checked out")
    found = subprocess.run(
        ["git", "-C", str(CHECKOUT), "cat-file", "-e", f"{PREVIOUS}^{{commit}}"], check=False
    )
    if found.returncode != 0:
        pytest.skip(f"{PREVIOUS[:10]} is not in this clone (a shallow one?)")
    if PREVIOUS[:COMMIT_DIGITS] in release():
        pytest.skip("this checkout is the previous release: nothing to roll to")
    tree = tmp_path_factory.mktemp("releases") / "previous"
    git = ["git", "-C", str(CHECKOUT), "worktree"]
    subprocess.run([*git, "add", "--detach", str(tree), PREVIOUS], check=True, capture_output=True)
    yield tree
    subprocess.run([*git, "remove", "--force", str(tree)], check=False, capture_output=True)


class Rolling:
    """An elastic cluster of 3 nodes and its continuous pipeline, each process run from a
    tree of its own; `rotation` holds the nodes a load balancer would send clients to."""

    def __init__(self, root: Path, tree: Path) -> None:
        self.etcd = Etcd(root)
        self.etcd.start()
        kafka = (shared().bootstrap, f"{root.name}-")
        path = write_project(
            root, free_ports(3), settings=SETTINGS, coordinator=(self.etcd.url, "t"), kafka=kafka
        )
        self.project: Project = projects.load(path)
        produce_test_events(self.project, seed=11)
        self.nodes = Nodes(self.project, root)
        self.log = oracle.Log(self.project)
        self.root = root
        self.pipeline: subprocess.Popen[bytes] | None = None
        self.rotation = list(NODES)
        self.lock = threading.Lock()
        self.run_pipeline(tree)
        for node in NODES:
            self.start(node, tree)
        self.settled()

    def start(self, node: str, tree: Path) -> None:
        url = self.nodes.url(node)
        command = node_command(self.project, node)
        self.nodes.processes.start(node, command, url, tls=self.project.tls, cwd=tree)

    def run_pipeline(self, tree: Path) -> None:
        """The continuous pipeline from `tree`, after the one running is stopped (SIGTERM: it
        ends its micro-batch and publishes it)."""
        if self.pipeline is not None:
            self.pipeline.terminate()
            assert self.pipeline.wait(60) in STOPPED  # its last micro-batch published
        command = ["-m", "stategate.cli", "pipeline", "--config", str(self.project.path)]
        with open(self.root / "pipeline.log", "ab") as log:
            self.pipeline = subprocess.Popen(
                [sys.executable, *command, "--follow"],
                cwd=tree,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def roll(self, node: str, tree: Path) -> None:
        """Out of the rotation, stopped (SIGTERM: it drains), started from `tree`, and back
        in once the cluster serves every partition with its replicas."""
        with self.lock:
            self.rotation.remove(node)
        time.sleep(0.3)  # what a load balancer sent it before is answered
        self.nodes.processes.stop(node)
        self.start(node, tree)
        self.settled()
        with self.lock:
            self.rotation.append(node)

    def settled(self) -> None:
        urls = {n: self.nodes.url(n) for n in NODES}
        deadline = time.monotonic() + SETTLE_S
        while not serving_settled(self.etcd.read("t"), urls, self.project):
            assert time.monotonic() < deadline, self.nodes.logs_tail()
            time.sleep(0.2)

    def status(self) -> dict[str, Any]:
        """What `stategate cluster status` (of this release) says."""
        said: dict[str, Any] = json.loads(self.nodes.cli("cluster", "status"))
        return said

    def close(self) -> None:
        if self.pipeline is not None:
            self.pipeline.terminate()
            self.pipeline.wait(60)
        self.nodes.stop_all()
        self.etcd.stop()


class Reader(threading.Thread):
    """A client asking every query kind of a node of the rotation, in turn, its last token
    with each."""

    def __init__(self, rolling: Rolling) -> None:
        super().__init__()
        self.rolling = rolling
        self.client = positions.Client(rolling.project, rolling.log)
        self.stopping = threading.Event()
        self.failed: list[str] = []

    def run(self) -> None:
        with self.client.crashes():
            self._read()

    def _read(self) -> None:
        document = positions.document(self.rolling.project)
        rng = random.Random(3)
        for i in itertools.count():
            if self.stopping.is_set():
                return
            with self.rolling.lock:
                node = rng.choice(self.rolling.rotation)
            body = self.rolling.nodes.gql(node, document, variables(self.client, i))
            if body.get("errors"):
                self.failed.append(f"{node}: {body['errors']}")
                continue
            self.client.check(body["data"], body["extensions"]["consistencyToken"])


class Subscriber(threading.Thread):
    """A dashboard's subscription to one key's totals; when its node stops, it subscribes
    again on a node of the rotation with its last token, as the README says a client does."""

    def __init__(self, rolling: Rolling, key: str) -> None:
        super().__init__()
        self.rolling, self.key = rolling, key
        self.client = positions.Client(rolling.project, rolling.log)
        self.stopping = threading.Event()
        self.moved = 0
        self.pushed: list[int] = []

    def run(self) -> None:
        with self.client.crashes():
            while not self.stopping.is_set():
                with self.rolling.lock:
                    node = self.rolling.rotation[self.moved % len(self.rolling.rotation)]
                try:
                    socket = live.Socket(self.rolling.nodes.url(node))
                    positions.follow(socket, self.client, self.key, self.stopping, self.pushed)
                except (OSError, ConnectionClosed):
                    self.moved += 1
                    time.sleep(0.1)


def test_every_process_rolls_to_this_release_and_back_while_clients_read(
    previous: Path, tmp_path: Path
) -> None:
    rolling = Rolling(tmp_path, previous)
    readers = [Reader(rolling) for _ in range(2)]
    subscribers = [Subscriber(rolling, key) for key in WATCHED]
    try:
        before = rolling.status()
        assert len(before["releases"]) == 1 and not before["mixed"], before
        with appends.producing(rolling.project):
            for client in readers + subscribers:
                client.start()
            for tree, back in ((CHECKOUT, before), (previous, None)):
                for i, node in enumerate(NODES):
                    rolling.roll(node, tree)
                    if i == 0:
                        mixed = rolling.status()
                        assert mixed["mixed"] and len(mixed["releases"]) == 2, mixed
                        said = {n["id"]: n["formats"] for n in mixed["nodes"]}
                        if tree == CHECKOUT:
                            assert said[node] == FORMATS, said
                rolling.run_pipeline(tree)
                ends = appends.produce_watched(rolling.project)
                for subscriber in subscribers:
                    end = ends[subscriber.key]
                    wait_until(
                        lambda s=subscriber, e=end: max(s.pushed, default=-1) >= e,
                        f"{subscriber.key}: {subscriber.pushed[-3:]}, not {end}",
                        30,
                    )
                now = rolling.status()
                assert not now["mixed"], now
                if back is not None:
                    assert now["releases"] != back["releases"], (now, back)
            assert rolling.status()["releases"] == before["releases"]
    finally:
        for client in readers + subscribers:
            client.stopping.set()
            client.join(30)
        rolling.close()
    for reader in readers:
        assert reader.failed == [] and reader.client.problems == []
        assert reader.client.answers > 20, reader.client.answers
    for subscriber in subscribers:
        assert subscriber.client.problems == []
        assert subscriber.moved >= 1  # its node was rolled under it, twice
