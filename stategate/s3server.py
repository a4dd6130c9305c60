"""A local S3 API server for the tests, the demo's multi-host mode and the benchmark: S3Proxy
(org.gaul:s3proxy, Maven Central) on its file-system backend, on a loopback port and a
folder of its own, with credentials of its own: what a bucket on AWS S3, Ceph's RADOS
gateway or MinIO is to a deployment.

    python -m stategate.s3server fetch     # its jars, once (stategate/jars.py)

`env()` is what a process needs to reach it: the standard AWS variables
(snapshot_store/s3.py reads them). A bucket is a folder of its data folder, made by
`bucket()`. With `tls` it serves https only, on the certificate of the holder STORE (its
PEM files made a PKCS#12 keystore, which S3Proxy's Jetty reads), and `env()` names the CA.
"""

from __future__ import annotations

import argparse
import json
import secrets
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import httpx

from contracts.tls import Tls, verify
from stategate import certificates
from stategate.jars import JVM, Artifact, JavaServer, jars, java

S3PROXY_VERSION = "4.1.0"
SERVER = (Artifact("org.gaul", "s3proxy", S3PROXY_VERSION),)
# s3proxy 4.1.0's own build imports these; without them Maven picks jackson-annotations
# 2.18 (through google-cloud-storage) and its Main dies on a class it lacks.
BOMS = (
    Artifact("tools.jackson", "jackson-bom", "3.2.2"),
    Artifact("io.opentelemetry", "opentelemetry-bom", "1.65.0"),
)
PROVIDER = "filesystem-nio2"  # honours If-Match and If-None-Match on PUT
READY_S = 60.0
REGION = "us-east-1"
STORE = "store"  # with TLS, the server's certificate: store.pem and store.key
_LOGBACK = """<configuration>
  <appender name="FILE" class="ch.qos.logback.core.FileAppender">
    <file>{log}</file>
    <encoder><pattern>%d %-5level %logger{{20}} - %msg%n</pattern></encoder>
  </appender>
  <root level="WARN"><appender-ref ref="FILE"/></root>
</configuration>
"""


def server_jars() -> Path:
    return jars(f"s3proxy-{S3PROXY_VERSION}", SERVER, BOMS)


class S3Server(JavaServer):
    """One S3Proxy in `folder`: its objects in `folder`/data, kept across stops; its
    credentials made on its first start and kept in `folder`/credentials.json."""

    stop_s = 10.0  # it ends in 1-3 s after SIGTERM

    def __init__(
        self,
        folder: Path,
        host: str = "127.0.0.1",
        port: int | None = None,
        on_host: Sequence[str] = (),
        tls: Tls | None = None,
    ) -> None:
        super().__init__(folder, host, port, on_host, tls)
        folder.mkdir(parents=True, exist_ok=True)
        stored = folder / "credentials.json"
        if not stored.exists():
            made = {"identity": f"sg{secrets.token_hex(8)}", "credential": secrets.token_hex(20)}
            stored.write_text(json.dumps(made))
        self.credentials: dict[str, str] = json.loads(stored.read_text())

    @property
    def endpoint(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.port}"

    @property
    def log(self) -> Path:
        return self.folder / "s3proxy.log"

    def env(self) -> dict[str, str]:
        """The AWS variables a client of this server needs."""
        env = {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_REGION": REGION,
            "AWS_ACCESS_KEY_ID": self.credentials["identity"],
            "AWS_SECRET_ACCESS_KEY": self.credentials["credential"],
        }
        return env if self.tls is None else {**env, "AWS_CA_BUNDLE": str(self.tls.ca)}

    def bucket(self, name: str) -> str:
        """Make the bucket `name` (a folder of the data folder); its s3:// URL."""
        (self.folder / "data" / name).mkdir(parents=True, exist_ok=True)
        return f"s3://{name}"

    def start(self) -> None:
        lib = server_jars()
        (self.folder / "data").mkdir(exist_ok=True)
        properties = self.folder / "s3proxy.properties"
        properties.write_text(
            self._listening() + "s3proxy.authorization=aws-v2-or-v4\n"
            f"s3proxy.identity={self.credentials['identity']}\n"
            f"s3proxy.credential={self.credentials['credential']}\n"
            f"jclouds.provider={PROVIDER}\n"
            f"jclouds.filesystem.basedir={self.folder / 'data'}\n"
        )
        logback = self.folder / "logback.xml"
        logback.write_text(_LOGBACK.format(log=self.log))
        jvm = [*JVM, f"-Dlogback.configurationFile={logback}"]
        main = ["org.gaul.s3proxy.Main", "--properties", str(properties)]
        self.spawn(java(lib, jvm, main))
        self._wait_ready()

    def _listening(self) -> str:
        """Its properties saying where it listens: in clear, or with TLS only."""
        if self.tls is None:
            return f"s3proxy.endpoint={self.endpoint}\n"
        keystore, password = certificates.keystore(self.tls, STORE, self.folder)
        return (
            f"s3proxy.secure-endpoint={self.endpoint}\n"
            f"s3proxy.keystore-path={keystore}\ns3proxy.keystore-password={password}\n"
        )

    def _wait_ready(self) -> None:
        """Until it answers HTTP (an anonymous request: refused, but answered)."""
        deadline = time.monotonic() + READY_S
        while True:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"s3proxy exited with {self.proc.returncode}: {self.tail()}")
            try:
                httpx.get(self.endpoint, timeout=1, verify=verify(self.tls))
                return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                self.kill()
                raise TimeoutError(f"s3proxy not ready in {READY_S:g} s: {self.tail()}")
            time.sleep(0.1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stategate.s3server")
    parser.add_argument("action", choices=["fetch"])
    parser.parse_args(argv)
    started = time.monotonic()
    try:
        print(server_jars())
    except RuntimeError as exc:
        print(f"stategate: {exc}", file=sys.stderr)
        return 2
    print(f"in {time.monotonic() - started:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
