"""What TLS costs a client's reads (issue 51), measured in the same run on the same nodes and
data: one-key lookups to node1 of a 3-node cluster (a third of them through the hop to a
peer), in clear and with mutual TLS on every link, alternating.

    python -m bench.tls --events 100000 --rounds 2 --seconds 10

Per side and round: the p50 of one client's sequential lookups, and the requests per second
of 16 clients on kept-alive connections (as a dashboard's or a service's pool keeps them,
so handshakes are amortized). The load generator is this process (bench/rawhttp.py, on
Python's ssl with TLS): its CPU counts on the same 2 cores, as a client's would.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from bench.one_key import CLIENTS, demo_built, node1_lookups
from contracts import project as projects
from contracts.project import Project
from stategate import certificates
from stategate.launcher import Processes, wait_serving


@dataclass
class Side:
    name: str
    project: Project
    p50_ms: list[float] = field(default_factory=list)
    rps: list[float] = field(default_factory=list)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.tls")
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=10.0, help="of each 16-client run")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="stategate-bench-") as work:
        sides = _sides(Path(work), args.events)
        print(f"load {os.getloadavg()[0]:.2f} at start", flush=True)
        for number in range(args.rounds):
            for side in sides if number % 2 == 0 else reversed(sides):
                _measure(side, Path(work) / "logs", args.seconds)
        print(f"load {os.getloadavg()[0]:.2f} at the end", flush=True)
    _report(sides)
    return 0


def _sides(root: Path, events: int) -> list[Side]:
    """One project built once, and the same with [tls]: the same files, data and ports."""
    project = demo_built(root, events)
    (root / "tls.toml").write_text(project.path.read_text() + certificates.table("certs"))
    certificates.create(root / "certs", ["node1", "node2", "node3"], [])
    return [Side("clear", project), Side("tls", projects.load(root / "tls.toml"))]


def _measure(side: Side, logs: Path, seconds: float) -> None:
    project = side.project
    processes = Processes(logs)
    try:
        processes.start_nodes(project)
        ids = [n.id for n in project.cluster.nodes]
        wait_serving(project, ids)
        p50, rps = asyncio.run(node1_lookups(project, seconds))
    finally:
        processes.stop_all()
    side.p50_ms.append(p50)
    side.rps.append(rps)
    print(f"{side.name}: one key p50 {p50:.3f} ms, {CLIENTS} clients {rps:,.0f} req/s", flush=True)


def _report(sides: list[Side]) -> None:
    clear, tls = sides
    p50 = statistics.median(tls.p50_ms) / statistics.median(clear.p50_ms)
    rps = statistics.median(tls.rps) / statistics.median(clear.rps)
    print("\n| read (node1 of 3, a third through the hop) | in clear | mutual TLS | ratio |")
    print("| --- | --- | --- | --- |")
    print(
        f"| one key, 1 client, p50 (median of rounds) | {statistics.median(clear.p50_ms):.3f} ms "
        f"| {statistics.median(tls.p50_ms):.3f} ms | {p50:.2f}x |"
    )
    print(
        f"| one key, {CLIENTS} clients, req/s | {statistics.median(clear.rps):,.0f} "
        f"| {statistics.median(tls.rps):,.0f} | {rps:.2f}x (TLS costs {1 - rps:.0%}) |"
    )


if __name__ == "__main__":
    raise SystemExit(main())
