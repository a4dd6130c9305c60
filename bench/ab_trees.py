"""Two checkouts of the code on the same workload at once, asked in turn: a change's effect
measured against the commit before it on a machine whose speed drifts by half within
minutes (issue 52's machines), where two runs one after the other compare the machine.

    git worktree add /tmp/before <commit>
    python -m bench.ab_trees --trees /tmp/before . [--workload main] [--requests 200]
        [--list-sizes 100 300]

Each tree's 3 nodes run at once: the first tree's on the workload's own project, the
second's on a copy of it whose nodes listen on other ports and install into copies of the
data folders (the snapshot store is shared: nodes only read it). Every node process runs in
its tree (`python -m` imports the tree's packages). One client then asks each case's
requests of the two clusters in turn, one at a time, so both meet the same machine; it
prints each case's p50 and the nodes' CPU per request (their processes' user + system time
over the case, hops included) for each tree, their ratios, and the load. Last, 16 clients
ask node1 one-key lookups (bench.run's versus bodies) of one cluster, then the other, in
short rounds alternating who goes first: each tree's median requests per second and CPU
per request. `--list-sizes` adds lists of those sizes to node1 (three times as many).
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import statistics
import time
from collections.abc import Awaitable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import httpx
import orjson
import psutil

from bench import one_key, versus
from bench.floor import Floor
from bench.queries import Bodies, KeySet
from bench.rawhttp import Pool, Reply
from bench.run import keyset
from bench.workload import NAMES, Workload
from contracts import project as projects
from contracts.project import Project
from stategate.launcher import Processes, node_command, wait_serving

PORT_SHIFT = 7  # the second tree's ports: the workload's plus this
CASES = ("one key, to node1", "1000 keys as a list, to node1", "1000 aliased fields, to node1",
         "prefix scan of 100, round-robin")  # fmt: skip
HEADERS = {"content-type": "application/json"}
LOADED = "one key, 16 clients to node1"
ROUNDS = 6  # of the loaded case, each tree's
ROUND_S = 5.0


@dataclass
class Cluster:
    tree: Path
    project: Project
    processes: Processes
    took: list[float]
    cpu_s: float = 0.0

    @property
    def urls(self) -> list[str]:
        return [node.url + "/graphql" for node in self.project.cluster.nodes]

    def cpu_now(self) -> float:
        total = 0.0
        for proc in self.procs():
            times = proc.cpu_times()
            total += times.user + times.system
        return total

    def procs(self) -> list[psutil.Process]:
        started = [psutil.Process(p.pid) for p in self.processes.procs.values()]
        return [q for p in started for q in [p, *p.children(recursive=True)]]


def second_project(workload: Workload, folder: Path) -> Path:
    """The workload's project with other ports and copies of its nodes' data folders."""
    root = workload.root
    text = workload.project_path.read_text()
    for node in projects.load(workload.project_path).cluster.nodes:
        copy = folder / node.id
        if not copy.exists():
            shutil.copytree(root / node.id, copy)
    text = re.sub(
        r'address = "127\.0\.0\.1:(\d+)"',
        lambda m: f'address = "127.0.0.1:{int(m.group(1)) + PORT_SHIFT}"',
        text,
    )
    text = re.sub(r'data_dir = "(\w+)"', lambda m: f'data_dir = "{folder / m.group(1)}"', text)
    text = text.replace('store = "snapshots"', f'store = "{root / "snapshots"}"')
    text = text.replace('dir = "log"', f'dir = "{root / "log"}"')  # fmt: skip
    path = folder / "stategate.toml"
    path.write_text(text)
    return path


def start(tree: Path, project: Project, logs: Path) -> Cluster:
    processes = Processes(logs)
    for node in project.cluster.nodes:
        processes.start(f"ab-{node.id}", node_command(project, node.id), node.url, cwd=tree)
    wait_serving(project, [n.id for n in project.cluster.nodes], 120)
    return Cluster(tree, project, processes, [])


def ask(client: httpx.Client, url: str, sent: bytes) -> float:
    began = time.perf_counter()
    reply = client.post(url, content=sent, headers=HEADERS)
    took = time.perf_counter() - began
    data = orjson.loads(reply.content)
    if reply.status_code != 200 or data.get("errors"):
        raise RuntimeError(f"{url}: {reply.status_code} {reply.text[:300]}")
    return took


def interleaved(clusters: list[Cluster], bodies: list[bytes], spread: bool) -> None:
    """Each request asked of each cluster in turn (first one, then the other, alternating
    who goes first); p50s and CPU per request into the clusters."""
    with httpx.Client(timeout=60) as client:

        def url_of(cluster: Cluster, i: int) -> str:
            return cluster.urls[i % 3 if spread else 0]

        for cluster in clusters:  # warm: documents, connections
            for i, sent in enumerate(bodies[:20]):
                ask(client, url_of(cluster, i), sent)
        for cluster in clusters:
            cluster.took, cluster.cpu_s = [], -cluster.cpu_now()
        for i, sent in enumerate(bodies):
            for cluster in clusters if i % 2 == 0 else reversed(clusters):
                cluster.took.append(ask(client, url_of(cluster, i), sent))
        for cluster in clusters:
            cluster.cpu_s += cluster.cpu_now()


def cases(
    ks: KeySet, requests: int, list_sizes: Sequence[int] = ()
) -> list[tuple[str, list[bytes], bool]]:
    """(name, bodies, round-robin over the nodes or to node1): the reads bench.run weighs
    against PostGraphile (bench/versus.py), prefix scans, and lists of `list_sizes` keys."""
    gateway = versus.bodies(versus.GATEWAY, ks.keys)
    return [
        (CASES[0], gateway.one[: requests * 10], False),
        (CASES[1], gateway.lists[:requests], False),
        (CASES[2], gateway.aliased * max(1, requests // 60), False),  # 60 sets, one document
        (CASES[3], Bodies(ks).prefix(requests * 5), True),
        *((f"{size} keys as a list, to node1", Bodies(ks).keys_list(requests * 3, size), False)
          for size in list_sizes),
    ]  # fmt: skip


def loaded(clusters: list[Cluster], bodies: list[bytes]) -> list[tuple[float, float]]:
    """Each cluster's median requests per second and CPU per request (ms) of one_key.CLIENTS
    clients asking node1, in ROUNDS short rounds each, alternating who goes first."""
    rates: list[list[float]] = [[] for _ in clusters]
    cpus: list[list[float]] = [[] for _ in clusters]
    for number in range(ROUNDS):
        order = list(enumerate(clusters))
        for index, cluster in order if number % 2 == 0 else reversed(order):
            url = cluster.urls[0]

            def ask_node1(pool: Pool, n: int, url: str = url) -> Awaitable[Reply]:
                return pool.post(url, bodies[n % len(bodies)])

            before = cluster.cpu_now()
            ran = asyncio.run(one_key.throughput(ask_node1, ROUND_S))
            rates[index].append(ran.rate)
            cpus[index].append((cluster.cpu_now() - before) / ran.requests * 1000)
    return [(statistics.median(r), statistics.median(c)) for r, c in zip(rates, cpus, strict=True)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ab_trees")
    parser.add_argument("--workload", choices=NAMES, default="main")
    parser.add_argument("--trees", nargs=2, type=Path, required=True)
    parser.add_argument("--requests", type=int, default=200, help="1000-key lists per tree")
    parser.add_argument("--loaded-only", action="store_true", help=f"only {LOADED!r}")
    parser.add_argument("--list-sizes", type=int, nargs="*", default=[], help="more list cases")
    args = parser.parse_args(argv)
    workload = Workload.built(args.workload)
    if workload is None:
        parser.error(f"the {args.workload} workload is not built: run `make bench` first")
    first = projects.load(workload.project_path)
    folder = Path("/tmp") / f"stategate-ab-{workload.root.name}"
    folder.mkdir(exist_ok=True)
    second = projects.load(second_project(workload, folder))
    with ExitStack() as stack:
        floor = Floor(workload.root / "snapshots", first.cluster.partitions)
        stack.callback(floor.close)
        ks = keyset(floor)
        clusters = []
        for tree, project, name in zip(args.trees, (first, second), "ab", strict=True):
            cluster = start(tree.resolve(), project, folder / f"logs-{name}")
            stack.callback(cluster.processes.stop_all)
            clusters.append(cluster)
        print(f"| case | {args.trees[0]} p50 | {args.trees[1]} p50 | ratio | "
              "CPU per request | ratio | load |")  # fmt: skip
        print("| --- | --- | --- | --- | --- | --- | --- |")
        asked = cases(ks, args.requests, args.list_sizes)
        for name, bodies, spread in [] if args.loaded_only else asked:
            interleaved(clusters, bodies, spread)
            p50s = [statistics.median(c.took) * 1000 for c in clusters]
            cpus = [c.cpu_s / len(c.took) * 1000 for c in clusters]
            print(f"| {name} | {p50s[0]:.2f} ms | {p50s[1]:.2f} ms | {p50s[1] / p50s[0]:.2f}x | "
                  f"{cpus[0]:.3f} / {cpus[1]:.3f} ms | {cpus[1] / cpus[0]:.2f}x | "
                  f"{psutil.getloadavg()[0]:.2f} |", flush=True)  # fmt: skip
        (rate_a, cpu_a), (rate_b, cpu_b) = loaded(clusters, asked[0][1])
        print(f"| {LOADED}, req/s | {rate_a:,.0f} | {rate_b:,.0f} | {rate_b / rate_a:.2f}x | "
              f"{cpu_a:.3f} / {cpu_b:.3f} ms | {cpu_b / cpu_a:.2f}x | "
              f"{psutil.getloadavg()[0]:.2f} |", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
