"""Java servers run from Maven Central's jars (Kafka's broker: stategate/broker.py; an S3 API
server: stategate/s3server.py), fetched once with Maven into the cache (`$STATEGATE_CACHE`,
else ~/.cache/stategate): a folder per artifact set, complete once its stamp file is
written, so a second run starts no Maven at all.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from contracts.tls import Tls
from stategate.launcher import free_ports

STAMP = "complete"


@dataclass(frozen=True)
class Artifact:
    group: str
    name: str
    version: str


_POM = """<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>stategate.jars</groupId>
  <artifactId>{name}</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencyManagement>
    <dependencies>
{managed}
    </dependencies>
  </dependencyManagement>
  <dependencies>
{dependencies}
  </dependencies>
</project>
"""
_DEPENDENCY = """    <dependency>
      <groupId>{group}</groupId><artifactId>{name}</artifactId><version>{version}</version>
    </dependency>"""
# A bom that manages a set's versions: imported, as the artifact's own build does (Maven does
# not pass a dependency's imported boms on to who depends on it).
_MANAGED = """      <dependency>
        <groupId>{group}</groupId><artifactId>{name}</artifactId><version>{version}</version>
        <type>pom</type><scope>import</scope>
      </dependency>"""
# C1 only and a serial GC: a JVM that starts in half the CPU and leaves the cores to the rest
JVM = ["-Xms128m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
       "-XX:-UsePerfData", "-Djava.awt.headless=true"]  # fmt: skip


def cache() -> Path:
    return Path(os.environ.get("STATEGATE_CACHE") or Path.home() / ".cache" / "stategate")


def jars(name: str, artifacts: tuple[Artifact, ...], boms: tuple[Artifact, ...] = ()) -> Path:
    """The folder holding `artifacts`' jars (and their dependencies', at the versions `boms`
    manage), fetched with Maven the first time only."""
    folder = cache() / name
    if (folder / STAMP).exists():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    dependencies = "\n".join(
        _DEPENDENCY.format(group=a.group, name=a.name, version=a.version) for a in artifacts
    )
    with tempfile.TemporaryDirectory(dir=folder.parent) as work:
        pom = Path(work) / "pom.xml"
        managed = "\n".join(
            _MANAGED.format(group=a.group, name=a.name, version=a.version) for a in boms
        )
        pom.write_text(_POM.format(name=name, dependencies=dependencies, managed=managed))
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


class JavaServer:
    """A JVM server with a folder of its own: its output in `<folder>`/stdout.log, started in
    a session of its own and ended with its parent (ends_with_parent), stopped by SIGTERM and
    killed past `stop_s`. It listens on `host`:`port` (a free loopback port by default),
    with `tls` when given; `on_host` runs it where that address is (a network namespace of
    stategate/hosts.py). Subclasses name its `log` and build its command."""

    stop_s = 15.0

    def __init__(
        self,
        folder: Path,
        host: str = "127.0.0.1",
        port: int | None = None,
        on_host: Sequence[str] = (),
        tls: Tls | None = None,
    ) -> None:
        self.folder = folder
        self.host, self.port = host, port or free_ports(1)[0]
        self.on_host, self.tls = list(on_host), tls
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def log(self) -> Path:
        raise NotImplementedError

    def spawn(self, command: list[str]) -> None:
        """Start `command` on its host."""
        with open(self.folder / "stdout.log", "ab") as out:
            self.proc = subprocess.Popen(
                [*self.on_host, *command],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # Ctrl-C in a terminal reaches its owner, not it
                preexec_fn=ends_with_parent,
            )

    def tail(self) -> str:
        """The ends of its log and its output, for an error that says why it did not start."""
        logs = (self.log, self.folder / "stdout.log")
        return "\n".join(p.read_text(errors="replace")[-1500:] for p in logs if p.exists())

    def stop(self) -> None:
        """SIGTERM, and SIGKILL past `stop_s`."""
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(self.stop_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


def java(lib: Path, jvm: list[str], main: list[str]) -> list[str]:
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else "java"
    return [java, *jvm, "-cp", f"{lib}/*", *main]


def ends_with_parent() -> None:
    """In a server's process: SIGTERM once its parent dies, by kill -9 too (Linux's
    PR_SET_PDEATHSIG), so that no server outlives the demo or test run that started it."""
    pr_set_pdeathsig = 1
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)
