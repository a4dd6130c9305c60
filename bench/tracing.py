"""What tracing costs a client's reads (issue 54): one-key lookups to node1 of a 3-node
cluster (a third through the hop), with tracing off, sampled at 1% and at 100%, on the same
nodes and data, alternating.

    python -m bench.tracing --events 100000 --rounds 2 --seconds 10

The nodes export OTLP over HTTP to a receiver in this process that reads and drops each
request (a collector's cost is not the node's). Per side and round: one client's p50, and
16 clients' requests per second on kept-alive connections (bench/one_key.py).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from unittest import mock

from bench.one_key import CLIENTS, demo_built, node1_lookups
from contracts.project import Project
from stategate.launcher import Processes, wait_serving


@dataclass
class Side:
    name: str
    environment: dict[str, str]
    p50_ms: list[float] = field(default_factory=list)
    rps: list[float] = field(default_factory=list)


class _Drop(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["content-length"]))
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


def sides(endpoint: str) -> list[Side]:
    exporting = {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint}
    ratio = {"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.01"}
    return [
        Side("off", {}),
        Side("sampled 1%", {**exporting, **ratio}),
        Side("sampled 100%", exporting),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.tracing")
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=10.0, help="of each 16-client run")
    args = parser.parse_args(argv)
    receiver = ThreadingHTTPServer(("127.0.0.1", 0), _Drop)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    measured = sides(f"http://127.0.0.1:{receiver.server_address[1]}")
    with tempfile.TemporaryDirectory(prefix="stategate-bench-") as work:
        project = demo_built(Path(work), args.events)
        print(f"load {os.getloadavg()[0]:.2f} at start", flush=True)
        for number in range(args.rounds):
            for side in measured if number % 2 == 0 else reversed(measured):
                _measure(side, project, Path(work) / "logs", args.seconds)
        print(f"load {os.getloadavg()[0]:.2f} at the end", flush=True)
    receiver.shutdown()
    _report(measured)
    return 0


def _measure(side: Side, project: Project, logs: Path, seconds: float) -> None:
    processes = Processes(logs)
    try:
        with mock.patch.dict(os.environ, side.environment):  # the nodes' environment
            processes.start_nodes(project)
        wait_serving(project, [n.id for n in project.cluster.nodes])
        p50, rps = asyncio.run(node1_lookups(project, seconds))
    finally:
        processes.stop_all()
    side.p50_ms.append(p50)
    side.rps.append(rps)
    print(f"{side.name}: one key p50 {p50:.3f} ms, {CLIENTS} clients {rps:,.0f} req/s", flush=True)


def _report(measured: list[Side]) -> None:
    off = measured[0]
    base_p50, base_rps = statistics.median(off.p50_ms), statistics.median(off.rps)
    print("\n| node1 of 3, one key (median of rounds) | 1 client p50 | 16 clients | against off |")
    print("| --- | --- | --- | --- |")
    for side in measured:
        p50, rps = statistics.median(side.p50_ms), statistics.median(side.rps)
        print(
            f"| tracing {side.name} | {p50:.3f} ms ({p50 / base_p50:.2f}x) | {rps:,.0f} req/s "
            f"| {rps / base_rps:.2f}x |"
        )


if __name__ == "__main__":
    raise SystemExit(main())
