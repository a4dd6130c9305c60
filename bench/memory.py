"""A node's memory through the heaviest requests the limits admit, and a minute after (issue 22).

    python -m bench.memory --workload small

On a built workload (bench/workload.py; built first when missing, as bench.calibrate does),
the same steps run twice, each time on 3 fresh nodes: with the settings as they are, and
with `document_cache_mb` out of the way (the document cache bounded by count alone, as it
was). node1's RSS is read when it serves, after a few small requests (the baseline), after
each of ROUNDS rounds of DOCUMENTS distinct documents of ALIASES one-key lookups (as a
dashboard that writes its keys into the text sends them), after BURST of the costliest page
request the cost limit admits, and REST_S later. Each figure beside the machine's load.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path

import orjson

from bench.calibrate import NODE, SIZES, build, kinds
from bench.procs import NodeProcesses
from bench.rawhttp import Connection
from bench.workload import Workload
from contracts.project import load
from resolvers.schema.costs import PAGE_ROW_WEIGHT

ROUNDS = 3
DOCUMENTS = 20
ALIASES = 2000
BURST = 3
REST_S = 60.0
PROJECT_FILE = "memory.toml"
UNBOUNDED_MB = 1_000_000  # document_cache_mb that bounds nothing


def document(salt: int) -> bytes:
    fields = " ".join(
        f'a{i}_{salt}: customerTotals(key: "C{i * 13:06d}") {{ record {{ bookings }} }}'
        for i in range(ALIASES)
    )
    return orjson.dumps({"query": f"{{ {fields} }}"})


async def send(url: str, bodies: list[bytes]) -> int:
    """Each body once, in turn; how many were answered with errors."""
    host, port = url.removeprefix("http://").split(":")
    connection = await Connection.open(host, int(port))
    try:
        failed = 0
        for body in bodies:
            status, reply = await connection.request("POST", "/graphql", body)
            failed += status != 200 or b'"errors":' in reply
        return failed
    finally:
        connection.close()


def heaviest_pages(limit: int) -> bytes:
    """The prefix-page request of the most pages of 1000 rows the cost limit admits."""
    prefix = next(k for k in kinds([]) if k.operation == "prefix")
    return prefix.body(limit // (prefix.values * PAGE_ROW_WEIGHT))


def measure(workload: Workload, settings: str, label: str) -> list[str]:
    project = workload.write_project(file=PROJECT_FILE)
    with project.path.open("a") as file:
        file.write(f"\n[settings]\n{settings}\n")
    project = load(project.path)
    nodes = NodeProcesses.gateway(project, workload.root.parent / "logs" / "memory")
    url = project.cluster.node(NODE).url
    lines = []

    def note(what: str, failed: int = 0) -> None:
        errors = f", {failed} with errors" if failed else ""
        load_ = os.getloadavg()[0]
        lines.append(f"| {label} | {what} | {nodes.rss_mib(NODE):.0f} | {load_:.2f}{errors} |")
        print(lines[-1], flush=True)

    try:
        nodes.start()
        nodes.wait_serving()
        note("serving")
        note("after 10 small requests", asyncio.run(send(url, [small()] * 10)))
        for r in range(ROUNDS):
            bodies = [document(r * DOCUMENTS + d) for d in range(DOCUMENTS)]
            note(f"after {DOCUMENTS * (r + 1)} distinct documents", asyncio.run(send(url, bodies)))
        pages = heaviest_pages(project.settings.max_request_cost)
        note(f"after {BURST} costliest page requests", asyncio.run(send(url, [pages] * BURST)))
        time.sleep(REST_S)
        note(f"{REST_S:.0f} s later")
    finally:
        nodes.stop()
    return lines


def small() -> bytes:
    return orjson.dumps({"query": '{ customerTotals(key: "C000001") { record { bookings } } }'})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", default="small", choices=sorted(SIZES))
    args = parser.parse_args()
    workload = Workload.built(args.workload) or build(args.workload)
    head = "| document cache | node1 | RSS (MiB) | load (1 min) |\n| --- | --- | --- | --- |"
    rows = measure(workload, "", "count and memory (default)")
    rows += measure(workload, f"document_cache_mb = {UNBOUNDED_MB}", "count alone (before)")
    print("\n".join([head, *rows]))
    Path(workload.root.parent / "memory.md").write_text("\n".join([head, *rows]) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
