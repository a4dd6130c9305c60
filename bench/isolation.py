"""Isolation: what one client sending the most expensive request the limits allow, in a
loop, costs the other clients of the same node.

    python -m bench.isolation --workload main --seconds 10 --rounds 3

On the 3 nodes of a built workload: 4 clients (the raw asyncio driver) send one-key lookups
to node1 for `--seconds`, idle; then again while a separate process sends the heavy request
to node1 in a loop, one at a time; `--rounds` times, and the median ratio is the figure
(this machine's load moves between minutes). Four clients in a closed loop keep node1 busy
all the time; so each phase also sends the lookups in an open loop, at PACED_SHARE of the
rate the closed loop reached idle, each timed from the moment it was due (a stall then
delays every lookup due during it, as it would independent clients').

The heavy request is the costliest the default limits allow: a customerTotalsBatch of
max_keys_per_field keys, every column selected (cost 10,000 x 7 = 70,000 of
max_request_cost's 100,000). The target: the lookups' p99 loaded within 2x of idle, in both
loops. Each figure is printed with the machine's load average.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import orjson

from bench.driver import (
    Stats,
    graphql_operation,
    http_client,
    percentile,
    run_async,
    run_paced,
)
from bench.procs import NodeProcesses
from bench.workload import Workload
from contracts.project import Project, load

NODE = "node1"
VICTIMS = 4
LOOKUP = "query L($k: String!) { customerTotals(key: $k) { record { bookings revenue } } }"
HEAVY = (
    "query H($keys: [String!]!) { customerTotalsBatch(keys: $keys) { entries { key record {"
    " bookings revenue seats cheapest dearest averagePrice } } } }"
)
TARGET = 2.0  # loaded p99 / idle p99
PACED_SHARE = 0.5  # the open loop's rate, as a share of the closed loop's idle rate


def heavy_body(project: Project, customers: int) -> bytes:
    count = project.settings.max_keys_per_field
    step = max(1, customers // count)
    keys = [f"C{i:06d}" for i in range(0, step * count, step)][:count]
    return orjson.dumps({"query": HEAVY, "variables": {"keys": keys}})


async def victims(
    project: Project, customers: int, seconds: float, name: str, rate: float | None = None
) -> Stats:
    """The one-key lookups: VICTIMS clients in a closed loop, or at `rate` in an open one."""
    url = project.cluster.node(NODE).url + "/graphql"
    bodies = [
        orjson.dumps({"query": LOOKUP, "variables": {"k": f"C{i * 7919 % customers:06d}"}})
        for i in range(997)
    ]
    client = http_client()
    operation = graphql_operation(client, [url], bodies)
    if rate is not None:
        return await run_paced(name, operation, rate, seconds, warmup=50)
    return await run_async(name, operation, VICTIMS, seconds, 10**9, warmup=50)


def loop_heavy(url: str, body_path: Path, seconds: float) -> None:
    """The heavy client (its own process): the heavy request in a loop; prints its stats."""
    body = body_path.read_bytes()
    latencies, errors = [], 0
    deadline = time.monotonic() + seconds
    with httpx.Client(timeout=60, headers={"content-type": "application/json"}) as client:
        while time.monotonic() < deadline:
            started = time.perf_counter()
            answer = client.post(url, content=body)
            latencies.append(time.perf_counter() - started)
            # not decoded: 30 ms of this machine's CPU per answer, taken from the nodes
            errors += answer.status_code != 200 or b'"errors":' in answer.content
    ordered = sorted(latencies)
    print(orjson.dumps({"count": len(ordered), "errors": errors,
                        "p50_ms": percentile(ordered, 50) * 1000}).decode())  # fmt: skip


def measure(workload: Workload, seconds: float, rounds: int) -> list[dict[str, object]]:
    """`rounds` of (idle, loaded) on one set of nodes; each round's stats and ratios."""
    project = load(workload.project_path)
    logs = workload.root.parent / "logs" / "isolation"
    nodes = NodeProcesses.gateway(project, logs)
    body_path = logs / "heavy.json"
    logs.mkdir(parents=True, exist_ok=True)
    body_path.write_bytes(heavy_body(project, workload.customers))
    url = project.cluster.node(NODE).url + "/graphql"
    results = []
    try:
        nodes.start()
        nodes.wait_serving()
        for _ in range(rounds):
            idle = asyncio.run(victims(project, workload.customers, seconds, "idle"))
            rate = idle.qps * PACED_SHARE
            paced_idle = asyncio.run(victims(project, workload.customers, seconds, "idle", rate))
            heavy = subprocess.Popen(
                [sys.executable, "-m", "bench.isolation", "--heavy", url, str(body_path),
                 str(2 * seconds + 6)],
                stdout=subprocess.PIPE,
            )  # fmt: skip
            time.sleep(2)  # the heavy loop is running
            loaded = asyncio.run(victims(project, workload.customers, seconds, "loaded"))
            paced = asyncio.run(victims(project, workload.customers, seconds, "loaded", rate))
            heavy_out, _ = heavy.communicate(timeout=2 * seconds + 60)
            results.append(
                {
                    "idle": idle,
                    "loaded": loaded,
                    "paced_idle": paced_idle,
                    "paced": paced,
                    "heavy": orjson.loads(heavy_out),
                    "ratio_p99": loaded.p99_ms / idle.p99_ms,
                    "ratio_p50": loaded.p50_ms / idle.p50_ms,
                    "paced_ratio_p99": paced.p99_ms / paced_idle.p99_ms,
                }
            )
            print(report_round(results[-1]), flush=True)
    finally:
        nodes.processes_.stop_all()
    return results


def report_round(result: dict[str, Any]) -> str:
    idle, loaded, heavy = result["idle"], result["loaded"], result["heavy"]
    paced_idle, paced = result["paced_idle"], result["paced"]
    return (
        f"  closed loop: idle {idle.p50_ms:.1f} / {idle.p99_ms:.1f} ms (load {idle.load1}), "
        f"loaded {loaded.p50_ms:.1f} / {loaded.p99_ms:.1f} ms (load {loaded.load1}): "
        f"p99 {result['ratio_p99']:.2f}x, p50 {result['ratio_p50']:.2f}x\n"
        f"  open loop at {paced.note}: idle {paced_idle.p50_ms:.1f} / {paced_idle.p99_ms:.1f}"
        f" ms, loaded {paced.p50_ms:.1f} / {paced.p99_ms:.1f} ms (load {paced.load1}): "
        f"p99 {result['paced_ratio_p99']:.2f}x\n"
        f"  heavy: {heavy['count']} requests, p50 {heavy['p50_ms']:.0f} ms, "
        f"{heavy['errors']} with errors"
    )


def report(results: list[dict[str, Any]]) -> str:
    lines = []
    for label, key in (("closed loop", "ratio_p99"), ("open loop", "paced_ratio_p99")):
        ratio = statistics.median(r[key] for r in results)
        verdict = "pass" if ratio <= TARGET else "miss"
        lines.append(
            f"median over {len(results)} rounds, {label}: p99 loaded / idle {ratio:.2f}x "
            f"(target <= {TARGET}x: {verdict})"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", default="main", help="a workload bench.run built")
    parser.add_argument("--seconds", type=float, default=10.0, help="of each phase")
    parser.add_argument("--rounds", type=int, default=3, help="idle and loaded phases")
    parser.add_argument("--heavy", nargs=3, metavar=("URL", "BODY", "SECONDS"), help="internal")
    args = parser.parse_args()
    if args.heavy:
        url, body, seconds = args.heavy
        loop_heavy(url, Path(body), float(seconds))
        return 0
    workload = Workload.built(args.workload)
    if workload is None:
        print(f"build the {args.workload!r} workload first: make bench", file=sys.stderr)
        return 2
    print(f"load average at start: {os.getloadavg()[0]:.2f}", flush=True)
    print(f"one-key lookups, {VICTIMS} clients on {NODE}: p50 / p99, idle then loaded")
    print(report(measure(workload, args.seconds, args.rounds)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
