"""A cluster with every process on a host of its own (stategate/hosts.py): a 3-member etcd,
a Kafka broker holding the topics (stategate/broker.py), an S3 API server holding the
snapshots (S3Proxy: stategate/s3server.py), the continuous pipeline and three nodes, each
configured as it would be on separate machines (its address, the secret and the store's
credentials from the environment, the broker's and the bucket's addresses, every etcd
member); no folder is shared. Every link is mutual TLS, on certificates of a CA of its own
valid for the hosts' addresses, and tcpdump captures the bridge throughout (`Capture`). The
test process is the clients' host and the producer: it produces to the broker, reads and
subscribes through the bridge, and checks every answer against the oracle (which reads the
topics back from the broker with a client of its own)."""

from __future__ import annotations

import contextlib
import itertools
import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from websockets.exceptions import ConnectionClosed, InvalidHandshake

from contracts import project as projects
from contracts.cluster_secret import secret_headers
from contracts.coordination import State
from contracts.eventlog import Record
from contracts.partitioner import partition_for
from contracts.tls import verify
from stategate import certificates
from stategate.broker import BROKER_HOLDER, Broker, client_properties
from stategate.etcd import ETCD_HOLDER, Ensemble
from stategate.hosts import Network
from stategate.launcher import Processes
from stategate.s3server import STORE, S3Server
from tests import live, oracle, positions
from tests.nodes import Nodes
from tests.projects import HOUR_MS, START_MS, produce_test_events, write_project
from topics import open_log

NODES = ("node1", "node2", "node3")
ETCD = ("etcd1", "etcd2", "etcd3")
HOSTS = (*ETCD, "store", "pipeline", *NODES, "kafka")
NODE_PORT, STORE_PORT, KAFKA_PORT = 8000, 8100, 9092
BUCKET = "snapshots"
SECRET_ENV = "STATEGATE_HOSTS_SECRET"
SECRET = "a-secret-long-enough-for-a-real-network-0123456789"
# sync_interval_s is long on purpose: the pipeline's notification is how nodes learn of new
# layers here, so a notification held up by one node shows as staleness on the others.
SETTINGS = (
    "health_interval_s = 0.2\nsync_interval_s = 5\nsession_ttl_s = 2\nlost_node_grace_s = 3\n"
    "internal_timeout_s = 1.0\ntrigger_interval_s = 0.5\nmax_warmups = 6"
)
KEYS = [f"C{i:06d}" for i in range(0, 300, 7)] + ["Zoë", "gone", "日本語"]
WATCHED = dict(zip(NODES, ("C000014", "C000021", "C000042"), strict=True))
PRODUCE_EVERY_S = 0.05
TCPDUMP = "/usr/bin/tcpdump"  # Debian's, installed by `make network`
# what the readers send as their Authorization: a JWT's shape (no [auth] checks it here)
BEARER = "Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ3aXJlLXByb29mIn0.c2lnbmF0dXJlLW9uLXRoZS13aXJl"
READY_S = 120


class MultiHost:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.network = Network(HOSTS)  # its addresses now, its namespaces at start()
        self.processes = Processes(root / "logs")
        self.etcd = Ensemble(root / "etcd", self.network, ETCD)
        on_store = self.network.command("store", [])
        self.store = S3Server(root / "s3", self.address("store"), STORE_PORT, on_store)
        self.pipeline: subprocess.Popen[bytes] | None = None
        os.environ[SECRET_ENV] = SECRET
        self.project = projects.load(self._write_project())
        tls = self.project.tls
        assert tls is not None
        self.tls = tls
        on_kafka = self.network.command("kafka", [])
        self.broker = Broker(
            root / "kafka", host=self.address("kafka"), port=KAFKA_PORT, on_host=on_kafka
        )
        self.etcd.tls = self.store.tls = self.broker.tls = self.tls
        os.environ.update(self.store.env())  # the pipeline's and the nodes' (and this one's)
        self.capture = Capture(root / "bridge.pcap", self.network.bridge)
        self.nodes = Nodes(self.project, root / "logs")
        self.nodes.processes = self.processes
        self.log = oracle.Log(self.project)
        self._stop_producing = threading.Event()
        self._producer = threading.Thread(target=self._produce)

    def _write_project(self) -> Path:
        ports = [NODE_PORT + i for i in range(1, 4)]
        elastic = (self.etcd.url, "hosts")
        kafka = (f"{self.address('kafka')}:{KAFKA_PORT}", "hosts-")
        path = write_project(
            self.root, ports, settings=SETTINGS, coordinator=elastic, kafka=kafka, tls=True
        )
        addresses = [self.address(host) for host in HOSTS]
        holders = [*NODES, ETCD_HOLDER, STORE, BROKER_HOLDER]
        certificates.create(self.root / "certs", holders, addresses)
        text = path.read_text().replace('secret = "test-secret"', f'secret_env = "{SECRET_ENV}"')
        for i, node in enumerate(NODES, start=1):
            text = text.replace(f"127.0.0.1:{NODE_PORT + i}", f"{self.address(node)}:{NODE_PORT}")
        bucket = self.store.bucket(BUCKET)
        text = text.replace(
            'store = "snapshots"\n', f'store = "snapshots"\nurl = "{bucket}/hosts"\n'
        )
        path.write_text(text)
        # librdkafka's TLS properties for every client of the broker: the pipeline's, the
        # producer's here (the oracle's kafka-python reads the same: tests/oracle.py)
        properties = client_properties(projects.load(path).tls)
        client = ", ".join(f'"{name}" = "{value}"' for name, value in properties.items())
        prefix = 'prefix = "hosts-"\n'
        path.write_text(text.replace(prefix, f"{prefix}client = {{ {client} }}\n"))
        return path

    def address(self, host: str) -> str:
        return self.network.address(host)

    def start(self) -> None:
        """Everything up, the state published and served by every node, the producer on."""
        self.network.up()
        self.capture.start()
        self.etcd.start()
        self.broker.start()
        produce_test_events(self.project, seed=11)
        self.store.start()
        self._start_pipeline()
        for node in NODES:
            self.start_node(node)
        self.settled(set(NODES))
        self._producer.start()

    def start_node(self, node: str) -> None:
        command = self.network.command(node, _stategate("node", self.project.path))
        url = self.nodes.url(node)
        self.processes.start(node, [*command, "--node", node], url, tls=self.tls)

    def close(self) -> None:
        self._stop_producing.set()
        if self._producer.is_alive():
            self._producer.join()
        with contextlib.suppress(Exception):
            self.network.heal()
        self.processes.stop_all()
        if self.pipeline is not None:
            self.pipeline.terminate()
            self.pipeline.wait(30)
        self.etcd.stop()
        oracle.close_kafka()
        self.broker.stop()
        self.store.stop()
        self.nodes.client.close()
        self.capture.stop()
        self.network.down()

    def _start_pipeline(self) -> None:
        log = self.root / "logs" / "pipeline.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        command = [*_stategate("pipeline", self.project.path), "--follow"]
        with log.open("ab") as out:
            self.pipeline = subprocess.Popen(
                self.network.command("pipeline", command),
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        deadline = time.monotonic() + READY_S
        while b"spark_pipeline.loop: following " not in log.read_bytes():
            if self.pipeline.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the pipeline did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.5)

    def state(self) -> State:
        from stategate.etcd import read

        return read(self.etcd.url, self.project.cluster.name, self.tls)

    def settled(self, members: set[str], timeout_s: float = 60) -> State:
        """Until the members serve every partition with its replicas, nothing warming."""
        from stategate.etcd import serving_settled

        urls = {n: self.nodes.url(n) for n in members}
        deadline = time.monotonic() + timeout_s
        last: object = "nothing read"
        while True:
            try:
                state = last = self.state()
                if serving_settled(state, urls, self.project):
                    return state
            except Exception as exc:  # noqa: BLE001 - a read or a node may fail meanwhile
                last = exc
            if time.monotonic() > deadline:
                raise AssertionError(f"not settled: {last!r}\n{self.nodes.logs_tail()}")
            time.sleep(0.2)

    def peer_up(self, node: str, peer: str) -> bool | None:
        """What `node` believes of `peer` (its stategate_peer_up), None if it does not say."""
        samples = self.nodes.metrics(node)
        value = samples.get(("stategate_peer_up", (("peer", peer),)))
        return None if value is None else value == 1

    def serving_in_view_of(self, viewer: str, node: str) -> list[int]:
        """The partitions `node` serves in the assignment `viewer` routes by (its /cluster)."""
        mapped = self.nodes.client.get(f"{self.nodes.url(viewer)}/cluster").json()
        return [
            p["partition"]
            for p in mapped["partitions"]
            if any(r["node"] == node for r in p["replicas"])
        ]

    def gauge(self, node: str, name: str) -> float | None:
        return self.nodes.metrics(node).get((name, ()))

    def ask_actives(self, node: str) -> dict[int, tuple[str, str | None]]:
        """A requireActive batch of KEYS (every partition) asked of `node`: partition ->
        (the node that answered, its failure)."""
        query = (
            "query($keys: [String!]!) { customerTotalsBatch(keys: $keys, "
            "consistency: { requireActive: true }) { meta { partitions { partition node "
            "failure } } } }"
        )
        body = self.nodes.gql(node, query, {"keys": KEYS})
        meta = body["data"]["customerTotalsBatch"]["meta"]
        return {p["partition"]: (p["node"], p["failure"]) for p in meta["partitions"]}

    def ask_past(self, node: str, partition: int, offset: int) -> tuple[str, str | None]:
        """A lookup of a key of `partition` asked of `node` with a position bound of
        `offset`: (the node that answered, its failure)."""
        keys = (f"C{i:06d}" for i in itertools.count())
        key = next(k for k in keys if self.partition_of(k) == partition)
        query = (
            "query($key: String!, $p: Int!, $o: Long!) { customerTotals(key: $key, consistency: "
            '{ position: [{ topic: "bookings", partition: $p, offset: $o }] }) { meta { '
            "partitions { node failure } } } }"
        )
        body = self.nodes.gql(node, query, {"key": key, "p": partition, "o": str(offset)})
        (answer,) = body["data"]["customerTotals"]["meta"]["partitions"]
        return answer["node"], answer["failure"]

    def partition_of(self, key: str) -> int:
        topic = self.project.topics["bookings"]
        return partition_for(key, topic.key_type, self.project.cluster.partitions)

    def offsets(self, node: str) -> dict[int, int]:
        """The bookings offset of each partition the node serves now."""
        return {p: s["offsets"]["bookings"] for p, s in self._partitions(node).items()}

    def versions(self, node: str) -> dict[int, int]:
        """The version of each partition the node serves now."""
        return {p: s["version"] for p, s in self._partitions(node).items()}

    def _partitions(self, node: str) -> dict[int, Any]:
        """The partitions' chains the node serves, not the global stores' (contracts/chains.py)."""
        chains = self._status(node)["partitions"].items()
        return {int(p): s for p, s in chains if int(p) < self.project.cluster.partitions}

    def _status(self, node: str) -> dict[str, Any]:
        response = self.nodes.client.get(
            f"{self.nodes.url(node)}/internal/status",
            headers=secret_headers(self.project.cluster.secret),
            timeout=5,
        )
        body: dict[str, Any] = response.json()
        return body

    def _produce(self) -> None:
        rng = random.Random(7)
        topic = self.project.topics["bookings"]
        log = open_log(self.project)
        try:
            while not self._stop_producing.wait(PRODUCE_EVERY_S):
                key = f"C{rng.randrange(300):06d}"
                value = {"trip": "Köln→Zürich", "price": rng.randint(10, 200), "seats": 1}
                log.append(topic, [Record(key, value, START_MS + rng.randrange(6 * HOUR_MS))])
        finally:
            log.close()


def _stategate(command: str, config: Path) -> list[str]:
    return [sys.executable, "-m", "stategate.cli", command, "--config", str(config)]


@dataclass
class Tally:
    """One client's answers, each with when it came and whether it was whole."""

    # (monotonic, the failures of the partitions that failed: none when it was whole)
    answers: list[tuple[float, frozenset[str]]] = field(default_factory=list)
    failed: list[tuple[float, str]] = field(default_factory=list)  # no answer: why

    def between(self, start: float, end: float) -> tuple[int, int, int]:
        """(answers, partial, failed) in [start, end)."""
        inside = [bool(failures) for t, failures in self.answers if start <= t < end]
        failed = sum(1 for t, _ in self.failed if start <= t < end)
        return len(inside), inside.count(True), failed

    def failures(self, start: float, end: float) -> set[str]:
        """Why partitions failed in the answers of [start, end)."""
        return {f for t, failures in self.answers if start <= t < end for f in failures}

    def last_bad(self, after: float) -> float | None:
        bad = [t for t, failures in self.answers if t >= after and failures]
        bad += [t for t, _ in self.failed if t >= after]
        return max(bad, default=None)


class Reader(threading.Thread):
    """A client asking every query kind of one node in a loop, its last token with each."""

    def __init__(self, cluster: MultiHost, node: str) -> None:
        super().__init__(daemon=True)
        self.cluster, self.node = cluster, node
        self.client = positions.Client(cluster.project, cluster.log, partial_ok=True)
        self.tally = Tally()
        self.stopping = threading.Event()
        self.http = httpx.Client(
            timeout=5, verify=verify(cluster.tls), headers={"authorization": BEARER}
        )

    def run(self) -> None:
        with self.client.crashes():
            self._read()

    def _read(self) -> None:
        document = positions.document(self.cluster.project)
        url = f"{self.cluster.nodes.url(self.node)}/graphql"
        for i in itertools.count():
            if self.stopping.is_set():
                return
            variables = {"key": KEYS[i % len(KEYS)], "keys": KEYS, "token": self.client.token}
            try:
                response = self.http.post(url, json={"query": document, "variables": variables})
            except httpx.HTTPError as exc:
                self.tally.failed.append((time.monotonic(), type(exc).__name__))
                time.sleep(0.1)
                continue
            body = response.json()
            if response.status_code != 200 or body.get("errors"):
                self.tally.failed.append((time.monotonic(), str(body.get("errors"))[:200]))
                continue
            failures = self.client.check(body["data"], body["extensions"]["consistencyToken"])
            self.tally.answers.append((time.monotonic(), failures))


class Subscriber(threading.Thread):
    """A dashboard's subscription to one key's totals on one node; when its connection
    breaks, it subscribes again with its last token."""

    def __init__(self, cluster: MultiHost, node: str) -> None:
        super().__init__(daemon=True)
        self.cluster, self.node, self.key = cluster, node, WATCHED[node]
        self.client = positions.Client(cluster.project, cluster.log, partial_ok=True)
        self.tally = Tally()
        self.stopping = threading.Event()

    def run(self) -> None:
        with self.client.crashes():
            while not self.stopping.is_set():
                try:
                    url, tls = self.cluster.nodes.url(self.node), self.cluster.tls.client()
                    self._follow(live.Socket(url, open_timeout=5, ssl=tls))
                except (ConnectionClosed, InvalidHandshake, OSError, TimeoutError) as exc:
                    self.tally.failed.append((time.monotonic(), type(exc).__name__))
                    time.sleep(0.2)

    def _follow(self, socket: live.Socket) -> None:
        try:
            document = positions.subscription(self.cluster.project)
            socket.subscribe("s", document, {"key": self.key, "token": self.client.token})
            while not self.stopping.is_set():
                try:
                    payload = socket.next_of("s", timeout=0.5)
                except TimeoutError:
                    continue
                if payload.get("errors"):
                    self.tally.failed.append((time.monotonic(), str(payload["errors"])[:200]))
                    continue
                token = payload["data"]["lookup"]["meta"]["consistencyToken"]
                failures = self.client.check(payload["data"], token)
                self.tally.answers.append((time.monotonic(), failures))
        finally:
            socket.close()


class Clients:
    """A reader and a subscriber on every node, throughout."""

    def __init__(self, cluster: MultiHost) -> None:
        self.readers = {n: Reader(cluster, n) for n in NODES}
        self.subscribers = {n: Subscriber(cluster, n) for n in NODES}

    @property
    def all(self) -> list[Reader | Subscriber]:
        return [*self.readers.values(), *self.subscribers.values()]

    def start(self) -> None:
        for client in self.all:
            client.start()

    def stop(self) -> None:
        for client in self.all:
            client.stopping.set()
        for client in self.all:
            client.join(30)

    def wrong(self) -> list[str]:
        return [f"{type(c).__name__} of {c.node}: {p}" for c in self.all for p in c.client.problems]


def wait_for(done: Callable[[], Any], what: str, timeout_s: float) -> float:
    """Seconds until `done()` is true (errors count as not yet); fails after `timeout_s`."""
    start = time.monotonic()
    while True:
        with contextlib.suppress(Exception):
            if done():
                return time.monotonic() - start
        if time.monotonic() - start > timeout_s:
            raise AssertionError(f"not within {timeout_s} s: {what}")
        time.sleep(0.1)


class Capture:
    """tcpdump on the bridge every host's traffic crosses, into a pcap file, packet by
    packet (-U), from `start` to `stop`: what anyone on the path could read."""

    def __init__(self, path: Path, bridge: str) -> None:
        self.path, self.bridge = path, bridge
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        command = [TCPDUMP, "-i", self.bridge, "-U", "-n", "-s", "0", "-w", str(self.path)]
        self.proc = subprocess.Popen(command, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while not self.path.exists():  # tcpdump writes the file's header once it listens
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"tcpdump did not start on {self.bridge}")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(10)
            self.proc = None

    def found(self, needles: dict[str, bytes]) -> list[str]:
        """The names of the needles the capture holds in clear so far."""
        captured = self.path.read_bytes()
        return [name for name, needle in needles.items() if needle in captured]


@contextlib.contextmanager
def running(root: Path) -> Iterator[MultiHost]:
    cluster = MultiHost(root)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.close()
