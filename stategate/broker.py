"""A local Apache Kafka for the demo, the tests and the benchmark: a KRaft broker (broker and
controller in one JVM, no ZooKeeper) run from Maven Central's jars, on loopback ports and a
data folder of its own, stopped and started again like a machine.

    python -m stategate.broker fetch       # the broker's jars, once

Jars are fetched once with Maven into the cache (`$STATEGATE_CACHE`, else
~/.cache/stategate): a folder per artifact set, complete once its stamp file is written, so a
second run starts no Maven at all. Kafka 4.4.0 is the newest Maven Central serves here.

A broker starts in 2-4 s on 2 cores (C1 only, serial GC, a 256 MiB heap) and logs WARN and
its ready line to <folder>/server.log. Its records carry the broker's append time
(LogAppendTime), which freshness counts from (contracts/freshness.py).
"""

from __future__ import annotations

import argparse
import base64
import ctypes
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from stategate.launcher import free_ports

KAFKA_VERSION = "4.4.0"
LOG4J_VERSION = "2.25.5"  # kafka-server 4.4.0's log4j-core: its slf4j 1.7 binding matches it
READY_LINE = b"Kafka Server started"  # KafkaRaftServer, once the broker is unfenced
READY_S = 90.0
STOP_S = 15.0
STAMP = "complete"


@dataclass(frozen=True)
class Artifact:
    group: str
    name: str
    version: str


# The broker: kafka_2.13 brings every jar it runs on but a logging binding; without
# log4j-slf4j-impl it logs nothing at all, its start-up errors included.
BROKER = (
    Artifact("org.apache.kafka", "kafka_2.13", KAFKA_VERSION),
    Artifact("org.apache.logging.log4j", "log4j-slf4j-impl", LOG4J_VERSION),
)

_POM = """<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>stategate.jars</groupId>
  <artifactId>{name}</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
{dependencies}
  </dependencies>
</project>
"""
_DEPENDENCY = """    <dependency>
      <groupId>{group}</groupId><artifactId>{name}</artifactId><version>{version}</version>
    </dependency>"""
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
# C1 only and a serial GC: a JVM that starts in half the CPU and leaves the cores to the rest
JVM = ["-Xms128m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
       "-XX:-UsePerfData", "-Djava.awt.headless=true"]  # fmt: skip


def cache() -> Path:
    return Path(os.environ.get("STATEGATE_CACHE") or Path.home() / ".cache" / "stategate")


def jars(name: str, artifacts: tuple[Artifact, ...]) -> Path:
    """The folder holding `artifacts`' jars (and their dependencies'), fetched with Maven
    the first time only."""
    folder = cache() / name
    if (folder / STAMP).exists():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    dependencies = "\n".join(
        _DEPENDENCY.format(group=a.group, name=a.name, version=a.version) for a in artifacts
    )
    with tempfile.TemporaryDirectory(dir=folder.parent) as work:
        pom = Path(work) / "pom.xml"
        pom.write_text(_POM.format(name=name, dependencies=dependencies))
        fetched = Path(work) / "jars"
        command = ["mvn", "-B", "-q", "-f", str(pom), "dependency:copy-dependencies",
                   f"-DoutputDirectory={fetched}", "-DincludeScope=runtime"]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"maven could not fetch {name}: {done.stdout[-2000:]}")
        shutil.rmtree(folder, ignore_errors=True)
        fetched.rename(folder)
    (folder / STAMP).write_text("".join(f"{p.name}\n" for p in sorted(folder.glob("*.jar"))))
    return folder


def broker_jars() -> Path:
    return jars(f"kafka-{KAFKA_VERSION}", BROKER)


def cluster_id() -> str:
    """What `kafka-storage random-uuid` prints, without a JVM: a UUID in unpadded base64 (it
    may start with '-': pass it as `--cluster-id=...`, never as an argument of its own)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def server_properties(data: Path, port: int, controller_port: int) -> str:
    properties: dict[str, object] = {
        "process.roles": "broker,controller",
        "node.id": 1,
        "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(data / "logs"),
        "log.message.timestamp.type": "LogAppendTime",
        "auto.create.topics.enable": "false",
        "num.partitions": 1,
        "default.replication.factor": 1,
        "min.insync.replicas": 1,
        # internal topics of one replica and partition (50 partitions by default: seconds)
        "offsets.topic.replication.factor": 1,
        "offsets.topic.num.partitions": 1,
        "transaction.state.log.replication.factor": 1,
        "transaction.state.log.min.isr": 1,
        "transaction.state.log.num.partitions": 1,
        "share.coordinator.state.topic.replication.factor": 1,
        "share.coordinator.state.topic.min.isr": 1,
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
        "controlled.shutdown.enable": "false",  # one node: no leader to move first
    }
    return "".join(f"{key}={value}\n" for key, value in properties.items())


class Broker:
    """One KRaft broker in `folder`: formatted on its first start, its data kept across
    stops (a restart recovers every record, after kill -9 too)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port, self.controller_port = free_ports(2)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        return self.folder / "server.log"

    def start(self) -> None:
        lib = broker_jars()
        self.folder.mkdir(parents=True, exist_ok=True)
        config = self.folder / "server.properties"
        config.write_text(server_properties(self.folder, self.port, self.controller_port))
        logging = self.folder / "log4j2.properties"
        logging.write_text(_LOG4J2.format(log=self.log))
        (self.folder / "tmp").mkdir(exist_ok=True)  # where it unpacks snappy's and lz4's
        jvm = [*JVM, f"-Dlog4j2.configurationFile={logging}", f"-Dkafka.logs.dir={self.folder}",
               f"-Djava.io.tmpdir={self.folder / 'tmp'}"]  # fmt: skip
        if not (self.folder / "logs" / "meta.properties").exists():
            format_ = [
                "kafka.tools.StorageTool",
                "format",
                f"--cluster-id={cluster_id()}",
                "-c",
                str(config),
            ]
            done = subprocess.run(_java(lib, jvm, format_), capture_output=True, text=True)
            if done.returncode != 0:
                raise RuntimeError(f"kafka-storage format failed: {done.stdout}{done.stderr}")
        seen = self.log.stat().st_size if self.log.exists() else 0
        with open(self.folder / "stdout.log", "ab") as out:
            self.proc = subprocess.Popen(
                _java(lib, jvm, ["kafka.Kafka", str(config)]),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # Ctrl-C in a terminal reaches its owner, not it
                preexec_fn=_ends_with_parent,
            )
        self._wait_ready(seen)

    def _wait_ready(self, seen: int) -> None:
        deadline = time.monotonic() + READY_S
        while True:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"kafka exited with {self.proc.returncode}: {self._tail()}")
            if self.log.exists():
                with open(self.log, "rb") as log:
                    log.seek(seen)
                    if READY_LINE in log.read():
                        return
            if time.monotonic() > deadline:
                self.kill()
                raise TimeoutError(f"kafka not ready in {READY_S:g} s: {self._tail()}")
            time.sleep(0.05)

    def _tail(self) -> str:
        logs = (self.log, self.folder / "stdout.log")
        return "\n".join(p.read_text(errors="replace")[-1500:] for p in logs if p.exists())

    def stop(self) -> None:
        """SIGTERM: the broker closes its logs cleanly (0.2-0.5 s); SIGKILL past STOP_S."""
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(STOP_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


def _java(lib: Path, jvm: list[str], main: list[str]) -> list[str]:
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else "java"
    return [java, *jvm, "-cp", f"{lib}/*", *main]


def _ends_with_parent() -> None:
    """In the broker's process: SIGTERM once its parent dies, by kill -9 too (Linux's
    PR_SET_PDEATHSIG), so that no broker outlives the demo or test run that started it."""
    pr_set_pdeathsig = 1
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


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
