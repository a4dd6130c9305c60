"""A local Apache Kafka for the demo, the tests and the benchmark: a KRaft broker (broker and
controller in one JVM, no ZooKeeper) run from Maven Central's jars, on loopback ports and a
data folder of its own, stopped and started again like a machine.

    python -m stategate.broker fetch       # the broker's jars, once

Its jars are fetched once with Maven into the cache (stategate/jars.py). Kafka 4.4.0 is the
newest Maven Central serves here.

A broker starts in 2-4 s on 2 cores (C1 only, serial GC, a 256 MiB heap) and logs WARN and
its ready line to <folder>/server.log. Its records carry the broker's append time
(LogAppendTime), which freshness counts from (contracts/freshness.py).

With TLS ([tls]: contracts/tls.py) a broker's clients reach it on an SSL listener only, its
certificate the holder BROKER's (a PKCS#12 keystore made from the PEM files), the CA its
truststore, and with mutual TLS a client certificate required; `client_properties` is what
a client (librdkafka: the project file's [kafka] client table) sets to reach it.
"""

from __future__ import annotations

import argparse
import base64
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from contracts.tls import CLIENT, Tls
from stategate import certificates
from stategate.jars import JVM, Artifact, JavaServer, jars, java
from stategate.launcher import free_ports

KAFKA_VERSION = "4.4.0"
LOG4J_VERSION = "2.25.5"  # kafka-server 4.4.0's log4j-core: its slf4j 1.7 binding matches it
READY_LINE = b"Kafka Server started"  # KafkaRaftServer, once the broker is unfenced
READY_S = 90.0
STOP_S = 15.0
BROKER_HOLDER = "broker"  # with TLS, the broker's certificate: broker.pem and broker.key

# The broker: kafka_2.13 brings every jar it runs on but a logging binding; without
# log4j-slf4j-impl it logs nothing at all, its start-up errors included.
BROKER = (
    Artifact("org.apache.kafka", "kafka_2.13", KAFKA_VERSION),
    Artifact("org.apache.logging.log4j", "log4j-slf4j-impl", LOG4J_VERSION),
)

_LOG4J2 = """status = warn
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.file.ref = FILE
logger.started.name = kafka.server.KafkaRaftServer
logger.started.level = INFO
"""


def broker_jars() -> Path:
    return jars(f"kafka-{KAFKA_VERSION}", BROKER)


def cluster_id() -> str:
    """What `kafka-storage random-uuid` prints, without a JVM: a UUID in unpadded base64 (it
    may start with '-': pass it as `--cluster-id=...`, never as an argument of its own)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


@dataclass(frozen=True)
class Quorum:
    """Who a broker is among the KRaft nodes (each a broker and a controller): its id, every
    controller's address, the cluster's id, and how many replicas a partition has."""

    node_id: int = 1
    voters: str = ""  # id@host:port,...; "" for a broker alone
    cluster: str = ""  # "" for a new id when formatting
    replicas: int = 1


@dataclass(frozen=True)
class Listening:
    """Where a broker listens: its clients' host and port; with TLS, on SSL only, the
    brokers' own traffic on loopback `internal_port` (a broker alone: inside its host)."""

    host: str
    port: int
    controller_port: int
    internal_port: int = 0
    tls: Tls | None = None
    keystore: tuple[Path, str] | None = None  # with TLS: its path and password


def client_properties(tls: Tls | None) -> dict[str, str]:
    """librdkafka's properties for a client of a broker listening with `tls`."""
    if tls is None:
        return {}
    properties = {"security.protocol": "SSL", "ssl.ca.location": str(tls.ca)}
    if tls.mutual:
        cert, key = tls.files(CLIENT)
        properties |= {"ssl.certificate.location": str(cert), "ssl.key.location": str(key)}
    return properties


def _listeners(at: Listening) -> dict[str, object]:
    controller = f"CONTROLLER://127.0.0.1:{at.controller_port}"
    if at.tls is None or at.keystore is None:
        return {
            "listeners": f"PLAINTEXT://{at.host}:{at.port},{controller}",
            "advertised.listeners": f"PLAINTEXT://{at.host}:{at.port}",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        }
    internal = f"INTERNAL://127.0.0.1:{at.internal_port}"
    path, password = at.keystore
    return {
        "listeners": f"SSL://{at.host}:{at.port},{internal},{controller}",
        "advertised.listeners": f"SSL://{at.host}:{at.port},{internal}",
        "inter.broker.listener.name": "INTERNAL",
        "listener.security.protocol.map": "SSL:SSL,INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": path,
        "ssl.keystore.password": password,
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": at.tls.ca,
        "ssl.client.auth": "required" if at.tls.mutual else "none",
    }


def server_properties(data: Path, at: Listening, quorum: Quorum) -> str:
    replicas = quorum.replicas
    in_sync = min(2, replicas)  # a write needs 2 of 3 replicas: one broker may be lost
    properties: dict[str, object] = {
        "process.roles": "broker,controller",
        "node.id": quorum.node_id,
        "controller.quorum.voters": quorum.voters
        or f"{quorum.node_id}@127.0.0.1:{at.controller_port}",
        **_listeners(at),
        "controller.listener.names": "CONTROLLER",
        "log.dirs": str(data / "logs"),
        "log.message.timestamp.type": "LogAppendTime",
        "auto.create.topics.enable": "false",
        "num.partitions": 1,
        "default.replication.factor": replicas,
        "min.insync.replicas": in_sync,
        # internal topics of one partition (50 by default: seconds), replicated as the rest
        "offsets.topic.replication.factor": replicas,
        "offsets.topic.num.partitions": 1,
        "transaction.state.log.replication.factor": replicas,
        "transaction.state.log.min.isr": in_sync,
        "transaction.state.log.num.partitions": 1,
        "share.coordinator.state.topic.replication.factor": replicas,
        "share.coordinator.state.topic.min.isr": in_sync,
        "share.coordinator.state.topic.num.partitions": 1,
        "group.initial.rebalance.delay.ms": 0,
        "num.network.threads": 2,
        "num.io.threads": 2,
        "background.threads": 2,
        "num.recovery.threads.per.data.dir": 1,
        "log.cleaner.threads": 1,
        "log.cleaner.backoff.ms": 1000,  # a compacted topic's dirty segments: within a second
        "log.cleaner.dedupe.buffer.size": 8 << 20,  # 128 MiB by default, on the heap
        "log.index.size.max.bytes": 1 << 20,  # preallocated per partition: 10 MiB by default
        # every record kept: a week's retention by record time would delete the demo's and
        # the tests' history (timestamps days or months old) at the first check, 5 min in
        "log.retention.ms": -1,
        # a restarted broker waits for its old registration's session (9 s by default)
        "broker.session.timeout.ms": 2000,
        "broker.heartbeat.interval.ms": 500,
        "controlled.shutdown.enable": replicas > 1,  # alone: no leader to move first
    }
    return "".join(f"{key}={str(value).lower() if isinstance(value, bool) else value}\n"
                   for key, value in properties.items())  # fmt: skip


class Broker(JavaServer):
    """One KRaft broker in `folder`: formatted on its first start, its data kept across
    stops (a restart recovers every record, after kill -9 too). A stop lets it close its
    logs cleanly (0.2-0.5 s)."""

    stop_s = STOP_S

    def __init__(
        self,
        folder: Path,
        quorum: Quorum | None = None,
        host: str = "127.0.0.1",
        port: int | None = None,
        on_host: Sequence[str] = (),
        tls: Tls | None = None,
    ) -> None:
        free, self.controller_port, self.internal_port = free_ports(3)  # distinct, at once
        super().__init__(folder, host, port or free, on_host, tls)
        self.quorum = quorum or Quorum()

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def log(self) -> Path:
        return self.folder / "server.log"

    def start(self) -> None:
        self.wait_ready(self.launch())

    def launch(self) -> int:
        """Start the JVM without waiting for it; returns where its log's new lines begin."""
        lib = broker_jars()
        self.folder.mkdir(parents=True, exist_ok=True)
        config = self.folder / "server.properties"
        keystore = None
        if self.tls is not None:
            keystore = certificates.keystore(self.tls, BROKER_HOLDER, self.folder)
        at = Listening(
            self.host, self.port, self.controller_port, self.internal_port, self.tls, keystore
        )
        config.write_text(server_properties(self.folder, at, self.quorum))
        logging = self.folder / "log4j2.properties"
        logging.write_text(_LOG4J2.format(log=self.log))
        (self.folder / "tmp").mkdir(exist_ok=True)  # where it unpacks snappy's and lz4's
        jvm = [*JVM, f"-Dlog4j2.configurationFile={logging}", f"-Dkafka.logs.dir={self.folder}",
               f"-Djava.io.tmpdir={self.folder / 'tmp'}"]  # fmt: skip
        if not (self.folder / "logs" / "meta.properties").exists():
            format_ = [
                "kafka.tools.StorageTool",
                "format",
                f"--cluster-id={self.quorum.cluster or cluster_id()}",
                "-c",
                str(config),
            ]
            done = subprocess.run(java(lib, jvm, format_), capture_output=True, text=True)
            if done.returncode != 0:
                raise RuntimeError(f"kafka-storage format failed: {done.stdout}{done.stderr}")
        seen = self.log.stat().st_size if self.log.exists() else 0
        self.spawn(java(lib, jvm, ["kafka.Kafka", str(config)]))
        return seen

    def wait_ready(self, seen: int) -> None:
        """Until its log says it serves (past `seen`); a quorum's nodes only once most of
        them run."""
        deadline = time.monotonic() + READY_S
        while True:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"kafka exited with {self.proc.returncode}: {self.tail()}")
            if self.log.exists():
                with open(self.log, "rb") as log:
                    log.seek(seen)
                    if READY_LINE in log.read():
                        return
            if time.monotonic() > deadline:
                self.kill()
                raise TimeoutError(f"kafka not ready in {READY_S:g} s: {self.tail()}")
            time.sleep(0.05)


class Brokers:
    """A KRaft cluster of `size` nodes, each a broker and a controller of one quorum, every
    partition on `size` replicas and a write needing 2 (min.insync.replicas): one node may be
    lost with nothing stopping, two stop the writes. The tests' cluster for broker faults."""

    def __init__(self, folder: Path, size: int = 3) -> None:
        self.brokers = [Broker(folder / f"broker{i}") for i in range(1, size + 1)]
        voters = ",".join(
            f"{i}@127.0.0.1:{b.controller_port}" for i, b in enumerate(self.brokers, start=1)
        )
        cluster = cluster_id()
        for i, broker in enumerate(self.brokers, start=1):
            broker.quorum = Quorum(i, voters, cluster, size)

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers)

    def by_id(self, node_id: int) -> Broker:
        return self.brokers[node_id - 1]

    def start(self) -> None:
        """Every node at once (none is ready before most of the quorum runs)."""
        seen = [b.launch() for b in self.brokers]
        for broker, at in zip(self.brokers, seen, strict=True):
            broker.wait_ready(at)

    def stop(self) -> None:
        """Each running node stopped in turn, but the last killed: alone, the quorum gone, it
        waits for a controlled shutdown no controller can grant, then STOP_S for nothing."""
        running = [b for b in self.brokers if b.proc is not None]
        for broker in running[:-1]:
            broker.stop()
        for broker in running[-1:]:
            broker.kill()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stategate.broker")
    parser.add_argument("action", choices=["fetch"])
    parser.parse_args(argv)
    started = time.monotonic()
    try:
        print(broker_jars())
    except RuntimeError as exc:
        print(f"stategate: {exc}", file=sys.stderr)
        return 2
    print(f"in {time.monotonic() - started:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
