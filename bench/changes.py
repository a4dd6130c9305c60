"""A store added to a running deployment (issue 53), on a built workload: three nodes serve
it while a client asks one key at a time of the nodes in rotation; then the store is declared
in the project file, `stategate apply` follows the change, the pipeline builds every
partition again (one run, on local Spark or in its driver), and each node is restarted with
the file in turn (out of the rotation meanwhile, as a load balancer's health check takes it).

    python -m bench.changes --workload main --reuse

Printed: how long the build and the whole change took, the client's failed and partial
answers during it, its p50 / p99 idle and during the change (with the machine's load), and
the snapshot store's extra bytes while the rebuilt chains sit beside the old ones.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

from bench.elastic import built
from bench.freshness import copy_workload
from bench.queries import ONE_KEY, body
from bench.workload import NAMES
from contracts import project as projects
from contracts.project import Project
from stategate.launcher import Processes, node_command, wait_serving

NEW_STORE = """
[[stores]]
name = "seatsByCustomer"
kind = "aggregate"
topic = "bookings"
aggregates = { seats = "sum(seats)", bookings = "count" }
"""
IDLE_S = 20.0
STATEGATE = [sys.executable, "-m", "stategate.cli"]


class Client(threading.Thread):
    """One key at a time, of a node of the rotation; latencies by phase, and what failed."""

    def __init__(self, project: Project, customers: int) -> None:
        super().__init__(daemon=True)
        self.urls = {n.id: n.url + "/graphql" for n in project.cluster.nodes}
        self.rotation = list(self.urls)
        self.lock = threading.Lock()
        self.customers = customers
        self.phase = "idle"
        self.took: dict[str, list[float]] = {"idle": [], "change": []}
        self.failed: list[str] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        rng = random.Random(5)
        headers = {"content-type": "application/json"}
        with httpx.Client(timeout=10) as client:
            while not self.stopping.is_set():
                with self.lock:
                    node = rng.choice(self.rotation)
                key = f"C{rng.randrange(self.customers):06d}"
                began = time.perf_counter()
                try:
                    reply = client.post(
                        self.urls[node], content=body(ONE_KEY, {"key": key}), headers=headers
                    )
                    answer = reply.json()
                except (httpx.HTTPError, ValueError) as exc:
                    self.failed.append(f"{node}: {exc!r}")
                    continue
                took = time.perf_counter() - began
                if answer.get("errors") or answer["data"]["customerTotals"]["meta"]["partial"]:
                    self.failed.append(f"{node}: {str(answer)[:200]}")
                    continue
                self.took[self.phase].append(took * 1000)

    def out(self, node: str) -> None:
        with self.lock:
            self.rotation.remove(node)

    def back(self, node: str) -> None:
        with self.lock:
            self.rotation.append(node)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.changes")
    parser.add_argument("--workload", default="main", choices=NAMES)
    parser.add_argument("--reuse", action="store_true", help="reuse the workload when built")
    args = parser.parse_args(argv)
    workload = built(args.workload, args.reuse)
    project = copy_workload(workload, prefix="changes")
    processes = Processes(project.path.parent / "logs")
    ids = [n.id for n in project.cluster.nodes]
    processes.start_nodes(project)
    wait_serving(project, ids)
    client = Client(project, workload.customers)
    try:
        client.start()
        time.sleep(IDLE_S)
        idle_load = os.getloadavg()[0]
        stored = _bytes(Path(project.snapshot_store))
        client.phase = "change"
        began = time.monotonic()
        project.path.write_text(project.path.read_text() + NEW_STORE)
        grown = projects.load(project.path)
        config = ["--config", str(grown.path)]
        applying = subprocess.Popen([*STATEGATE, "apply", *config, "--wait", "1800"])
        build = time.monotonic()
        subprocess.run([*STATEGATE, "pipeline", *config], check=True, capture_output=True)
        built_s = time.monotonic() - build
        extra = _bytes(Path(grown.snapshot_store)) - stored
        for node in ids:
            client.out(node)
            time.sleep(0.3)  # what the balancer sent it before is answered
            processes.stop(node)
            url = grown.cluster.node(node).url
            processes.start(node, node_command(grown, node), url)
            wait_serving(grown, [node])
            client.back(node)
        assert applying.wait(1800) == 0, "apply did not see the change through"
        change_s = time.monotonic() - began
        change_load = os.getloadavg()[0]
    finally:
        client.stopping.set()
        client.join(30)
        processes.stop_all()
    idle, during = (sorted(client.took[p]) for p in ("idle", "change"))
    print(f"\n{workload.events:,} events; load {idle_load:.2f} idle, {change_load:.2f} after")
    print("| adding a store | value |\n| --- | --- |")
    print(f"| the pipeline's rebuild | {built_s:.1f} s |")
    print(f"| from the file's edit to every node serving it | {change_s:.1f} s |")
    print(
        f"| answers during the change / failed or partial | {len(during)} / {len(client.failed)} |"
    )
    print(f"| one key p50 idle / during | {_q(idle, 0.5):.2f} / {_q(during, 0.5):.2f} ms |")
    print(f"| one key p99 idle / during | {_q(idle, 0.99):.2f} / {_q(during, 0.99):.2f} ms |")
    print(f"| the snapshot store's extra bytes after the rebuild | {extra / 2**20:,.0f} MiB |")
    for failure in client.failed[:5]:
        print(f"failed: {failure}")
    return 0 if not client.failed else 1


def _q(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q * 100) - 1] if len(values) > 1 else 0.0


def _bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


if __name__ == "__main__":
    sys.exit(main())
