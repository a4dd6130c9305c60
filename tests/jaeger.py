"""A real trace collector for the tests: Jaeger (v2, an OpenTelemetry Collector distribution),
built from the Go module proxy by `make collector` into the cache. It receives OTLP/HTTP,
keeps the traces in memory for its query API, and passes every span on to a receiver of the
test's (tests/otlp.py), so the tests read what went through a real collector."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import httpx

from stategate.launcher import free_ports

VERSION = "v1.76.0"
READY_S = 30.0
CONFIG = """
service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [jaeger_storage_exporter, otlphttp]
  telemetry:
    metrics:
      level: none
extensions:
  jaeger_storage:
    backends:
      memory_store:
        memory:
          max_traces: 10000
  jaeger_query:
    storage:
      traces: memory_store
    http:
      endpoint: 127.0.0.1:{query}
    grpc:
      endpoint: 127.0.0.1:{query_grpc}
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:{otlp}
exporters:
  jaeger_storage_exporter:
    trace_storage: memory_store
  otlphttp:
    endpoint: {forward}
    compression: none
"""


def binary() -> Path:
    cache = os.environ.get("STATEGATE_CACHE") or Path.home() / ".cache" / "stategate"
    return Path(cache) / f"jaeger-{VERSION}" / "jaeger"


class Jaeger:
    """One Jaeger on loopback ports of its own, forwarding to `forward` (an OTLP/HTTP URL)."""

    def __init__(self, folder: Path, forward: str) -> None:
        if not binary().is_file():
            raise RuntimeError(f"{binary()} is missing: `make collector` builds it")
        self.folder = folder
        self.otlp, self.query, query_grpc = free_ports(3)
        config = CONFIG.format(otlp=self.otlp, query=self.query, query_grpc=query_grpc,
                               forward=forward)  # fmt: skip
        (folder / "jaeger.yaml").write_text(config)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        """Where OTLP/HTTP exporters send to."""
        return f"http://127.0.0.1:{self.otlp}"

    def start(self) -> None:
        log = (self.folder / "jaeger.log").open("ab")
        command = [str(binary()), "--config", str(self.folder / "jaeger.yaml")]
        self.proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + READY_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"jaeger exited: {self.log_tail()}")
            try:
                if httpx.get(f"http://127.0.0.1:{self.query}/api/services").is_success:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"jaeger did not answer in {READY_S:g} s: {self.log_tail()}")

    def trace(self, trace_id: str) -> list[dict[str, object]]:
        """The spans of a trace, as Jaeger's query API gives them (none when unknown)."""
        reply = httpx.get(f"http://127.0.0.1:{self.query}/api/traces/{trace_id}")
        if reply.status_code == 404:
            return []
        reply.raise_for_status()
        found: list[dict[str, object]] = []
        for data in reply.json().get("data") or []:
            processes = data["processes"]
            for span in data["spans"]:
                tags = {t["key"]: t["value"] for t in processes[span["processID"]]["tags"]}
                found.append({**span, "instance": tags.get("service.instance.id")})
        return found

    def log_tail(self, lines: int = 20) -> str:
        path = self.folder / "jaeger.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        """It keeps nothing worth a graceful stop (its exporter's retries would hold it)."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(10)
            self.proc = None
