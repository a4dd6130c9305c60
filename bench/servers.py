"""The HTTP server itself (issue 52): uvicorn with httptools, as `stategate node` runs it,
against granian (a Rust HTTP server, its ASGI interface) serving the same app, on the same
nodes' data, alternating.

    python -m bench.servers --events 100000 --rounds 4 --seconds 10

node1 of the demo's 3-node cluster runs under the server being measured (one worker); the
other two under `stategate node`. Per round: GET /health and one-key lookups of keys whose
partition node1 serves as active (no hop), each by 16 clients on kept-alive connections
(bench/rawhttp.py, this process) for --seconds, with node1's CPU per request (its processes'
user + system time over the run, psutil); one client's lookup p50; and one-key lookups to
node1 of keys node2 serves as active (each hops: node1's CPU and node2's, per request). A
subscription over WebSocket is checked once per server: does it answer?
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil
from websockets.sync.client import connect

from bench import one_key
from bench.one_key import CUSTOMERS, demo_built
from bench.rawhttp import Pool, Reply
from contracts.partitioner import partition_for
from contracts.project import Project
from stategate.launcher import Processes, node_command, wait_healthy, wait_serving

SUBSCRIPTION = 'subscription { customerTotals(key: "C000001") { record { bookings } } }'
SERVERS = ("uvicorn", "granian")


@dataclass
class Server:
    name: str
    health_rps: list[float] = field(default_factory=list)
    health_cpu_ms: list[float] = field(default_factory=list)
    lookup_rps: list[float] = field(default_factory=list)
    lookup_cpu_ms: list[float] = field(default_factory=list)
    p50_ms: list[float] = field(default_factory=list)
    hop_rps: list[float] = field(default_factory=list)
    hop_cpu_ms: list[float] = field(default_factory=list)
    websocket: str = ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.servers")
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument(
        "--granian", default="", help='more of granian\'s options, e.g. "--runtime-mode st"'
    )
    args = parser.parse_args(argv)
    options = args.granian.split()
    servers = [Server(name) for name in SERVERS]
    with tempfile.TemporaryDirectory(prefix="stategate-bench-") as work:
        project = demo_built(Path(work), args.events)
        processes = Processes(Path(work) / "logs")
        try:
            processes.start_nodes(project, ["node2", "node3"])
            print(f"load {os.getloadavg()[0]:.2f} at start", flush=True)
            for number in range(args.rounds):
                for server in servers if number % 2 == 0 else reversed(servers):
                    _round(server, project, args.seconds, options, processes.pid("node2"))
        finally:
            processes.stop_all()
        print(f"load {os.getloadavg()[0]:.2f} at the end", flush=True)
    _report(servers)
    return 0


def _command(server: str, project: Project, options: list[str]) -> list[str]:
    if server == "uvicorn":
        return node_command(project, "node1")
    host, port = project.cluster.node("node1").address.rsplit(":", 1)
    return [sys.executable, "-m", "granian", "--interface", "asgi", "--factory",
            "--workers", "1", "--loop", "uvloop", "--host", host, "--port", port,
            "--no-access-log", *options, "bench.granian_app:app"]  # fmt: skip


def _round(
    server: Server, project: Project, seconds: float, options: list[str], node2: int
) -> None:
    env = {**os.environ, "STATEGATE_CONFIG": str(project.path), "STATEGATE_NODE": "node1"}
    url = project.cluster.node("node1").url
    log = open(Path(project.path.parent / "logs" / f"node1-{server.name}.log"), "ab")  # noqa: SIM115
    command = _command(server.name, project, options)
    proc = subprocess.Popen(command, stdout=log, stderr=log, env=env)
    try:
        wait_healthy(url, proc)
        wait_serving(project, ["node1"])
        tree = psutil.Process(proc.pid)
        health = _load(lambda pool, n: pool.get(f"{url}/health"), seconds, [tree])
        bodies = one_key.lookups(_keys_of(project, "node1"))
        lookups = _load(
            lambda pool, n: pool.post(f"{url}/graphql", bodies[n % len(bodies)]), seconds, [tree]
        )
        p50 = asyncio.run(one_key.p50_ms(f"{url}/graphql", bodies))
        hopping = one_key.lookups(_keys_of(project, "node2"))
        hops = _load(
            lambda pool, n: pool.post(f"{url}/graphql", hopping[n % len(hopping)]),
            seconds,
            [tree, psutil.Process(node2)],
        )
        if not server.websocket:
            server.websocket = _subscribes(url)
    finally:
        proc.terminate()
        proc.wait(30)
        log.close()
    server.health_rps.append(health[0])
    server.health_cpu_ms.append(health[1])
    server.lookup_rps.append(lookups[0])
    server.lookup_cpu_ms.append(lookups[1])
    server.p50_ms.append(p50)
    server.hop_rps.append(hops[0])
    server.hop_cpu_ms.append(hops[1])
    print(
        f"{server.name}: /health {health[0]:,.0f} req/s ({health[1]:.3f} ms CPU each), "
        f"lookups {lookups[0]:,.0f} req/s ({lookups[1]:.3f} ms CPU each), p50 {p50:.3f} ms, "
        f"hops {hops[0]:,.0f} req/s ({hops[1]:.3f} ms CPU each, both nodes)",
        flush=True,
    )


def _keys_of(project: Project, node: str) -> list[str]:
    """Keys whose partition `node` serves as active (node1 answers them without a hop)."""
    mine = {p for p, nodes in project.cluster.replica_map.items() if nodes[0] == node}
    partitions = project.cluster.partitions
    keys = (f"C{i:06d}" for i in range(CUSTOMERS))
    return [k for k in keys if partition_for(k, "string", partitions) in mine][:500]


def _cpu_s(tree: psutil.Process) -> float:
    total = 0.0
    for proc in [tree, *tree.children(recursive=True)]:
        times = proc.cpu_times()
        total += times.user + times.system
    return total


def _load(
    ask: Callable[[Pool, int], Awaitable[Reply]], seconds: float, trees: list[psutil.Process]
) -> tuple[float, float]:
    """(requests/s, the servers' CPU ms per request) of one_key.CLIENTS clients."""
    cpu = sum(_cpu_s(tree) for tree in trees)
    ran = asyncio.run(one_key.throughput(ask, seconds))
    return ran.rate, (sum(_cpu_s(tree) for tree in trees) - cpu) / ran.requests * 1000


def _subscribes(url: str) -> str:
    """Whether a graphql-transport-ws subscription answers: "yes", or what went wrong."""
    try:
        with connect("ws" + url.removeprefix("http") + "/graphql",
                     subprotocols=["graphql-transport-ws"], open_timeout=10) as ws:  # type: ignore[list-item]  # fmt: skip
            ws.send(json.dumps({"type": "connection_init"}))
            assert json.loads(ws.recv(10))["type"] == "connection_ack"
            ws.send(
                json.dumps({"id": "1", "type": "subscribe", "payload": {"query": SUBSCRIPTION}})
            )
            answer = json.loads(ws.recv(10))
            return "yes" if answer["type"] == "next" else f"no: {answer}"
    except Exception as exc:  # noqa: BLE001 - what a server's failure looks like, reported
        return f"no: {exc!r}"


def _report(servers: list[Server]) -> None:
    uvicorn, granian = servers
    print("\n| one worker, 16 clients | uvicorn + httptools | granian (ASGI) | granian / uvicorn |")
    print("| --- | --- | --- | --- |")
    for label, attribute, unit in (
        ("GET /health, req/s", "health_rps", ",.0f"),
        ("GET /health, server CPU per request, ms", "health_cpu_ms", ".3f"),
        ("one-key lookup, req/s", "lookup_rps", ",.0f"),
        ("one-key lookup, server CPU per request, ms", "lookup_cpu_ms", ".3f"),
        ("one-key lookup, 1 client, p50 ms", "p50_ms", ".3f"),
        ("one-key lookup hopping to node2, req/s", "hop_rps", ",.0f"),
        ("the same, CPU per request of node1 and node2, ms", "hop_cpu_ms", ".3f"),
    ):
        a = statistics.median(getattr(uvicorn, attribute))
        b = statistics.median(getattr(granian, attribute))
        print(f"| {label} | {a:{unit}} | {b:{unit}} | {b / a:.2f}x |")
    print(
        f"| a subscription over WebSocket answers | {uvicorn.websocket} | {granian.websocket} | |"
    )


if __name__ == "__main__":
    sys.exit(main())
