"""What a federation gateway's references cost (issue 54): `_entities` for 1000
representations against the same 1000 keys as one list field and as 1000 aliased one-key
fields, on the same nodes and data, alternating.

    python -m bench.entities --events 100000 --rounds 3

node1 of the demo's 3-node cluster (federation on, one worker a node), 1000 keys of
customerTotals spread over every partition (two thirds through the hop to a peer); one
client's sequential requests after a warm-up, the median of each round, and of the rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path

import orjson

from bench.one_key import CUSTOMERS, WARM, demo_built
from bench.queries import body
from bench.rawhttp import Pool
from stategate.launcher import Processes, wait_serving

KEYS = 1000
REQUESTS = 100
LIST = """query($k: [String!]!) {
  customerTotalsBatch(keys: $k) { entries { key record { bookings revenue } } } }"""
ENTITIES = """query($r: [_Any!]!) {
  _entities(representations: $r) { ... on CustomerTotals { key bookings revenue } } }"""


def bodies() -> dict[str, bytes]:
    keys = [f"C{i:06d}" for i in range(0, CUSTOMERS, CUSTOMERS // KEYS)][:KEYS]
    fields = " ".join(f'a{i}: customerTotals(key: "{k}") {{ key record {{ bookings revenue }} }}'
                      for i, k in enumerate(keys))  # fmt: skip
    representations = [{"__typename": "CustomerTotals", "key": k} for k in keys]
    return {
        "1000 keys as one list field": body(LIST, {"k": keys}),
        "_entities of 1000 representations": body(ENTITIES, {"r": representations}),
        "1000 aliased one-key fields": body("{ " + fields + " }", {}),
    }


async def p50_ms(url: str, request: bytes) -> float:
    async with Pool() as pool:
        times = []
        for _ in range(WARM // 20 + REQUESTS):
            started = time.perf_counter()
            reply = await pool.post(url, request)
            times.append(time.perf_counter() - started)
            answer = orjson.loads(reply.content)
            assert reply.status_code == 200 and "errors" not in answer, reply.text[:500]
    return statistics.median(times[WARM // 20 :]) * 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.entities")
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    cases = bodies()
    measured: dict[str, list[float]] = {name: [] for name in cases}
    with tempfile.TemporaryDirectory(prefix="stategate-bench-") as work:
        project = demo_built(Path(work), args.events, "federation = true\n")
        processes = Processes(Path(work) / "logs")
        try:
            processes.start_nodes(project)
            wait_serving(project, [n.id for n in project.cluster.nodes])
            url = f"{project.cluster.nodes[0].url}/graphql"
            print(f"load {os.getloadavg()[0]:.2f} at start", flush=True)
            for number in range(args.rounds):
                names = list(cases) if number % 2 == 0 else list(reversed(cases))
                for name in names:
                    measured[name].append(asyncio.run(p50_ms(url, cases[name])))
                    print(f"{name}: p50 {measured[name][-1]:.2f} ms", flush=True)
            print(f"load {os.getloadavg()[0]:.2f} at the end", flush=True)
        finally:
            processes.stop_all()
    listed = statistics.median(measured["1000 keys as one list field"])
    print("\n| node1 of 3, 1000 keys, one client | p50 (median of rounds) | against the list |")
    print("| --- | --- | --- |")
    for name, times in measured.items():
        p50 = statistics.median(times)
        print(f"| {name} | {p50:.2f} ms | {p50 / listed:.2f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
