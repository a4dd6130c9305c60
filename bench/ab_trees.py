"""Two checkouts of the code, measured alternately on the same nodes' data: a redesign that
should change nothing of the speed is checked against the commit before it, in one run.

    git worktree add /tmp/before <commit>
    python -m bench.ab_trees --workload main --trees /tmp/before . --rounds 2

Each round starts the 3 nodes from each tree in turn (a subprocess whose working folder is
the tree, so that its packages are the ones imported), asks 2,000 prefix scans round-robin,
then 20 requests of 1,000 aliased `latestBooking` fields, one at a time, and prints the p50
of each with the machine's load. The trees must read the workload's snapshot format.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from bench.workload import NAMES, Workload

PREFIXES = 2000
ALIASED = 20
# Run inside a tree: its own packages come first on sys.path (the working folder).
MEASURE = """
import os, random, statistics, sys, time
from pathlib import Path
import httpx
from bench.queries import PREFIX, body
from contracts import project as projects
from stategate.launcher import Processes, wait_serving

project = projects.load(sys.argv[1])
processes = Processes(Path(sys.argv[2]))
processes.start_nodes(project)
wait_serving(project, [n.id for n in project.cluster.nodes])
urls = [n.url + "/graphql" for n in project.cluster.nodes]
rng = random.Random(1)
client = httpx.Client()

def p50(bodies):
    took = []
    for i, sent in enumerate(bodies):
        began = time.perf_counter()
        reply = client.post(urls[i % 3], content=sent, headers={"content-type": "application/json"})
        took.append(time.perf_counter() - began)
        assert reply.status_code == 200 and "errors" not in reply.json(), reply.text[:300]
    return statistics.median(took) * 1000

try:
    prefixes = [f"C{rng.randrange(100_000):05d}" for _ in range(int(sys.argv[3]))]
    scans = [body(PREFIX, {"prefix": p, "first": 100}) for p in prefixes]
    p50(scans[:300])
    prefix = p50(scans)
    keys = [f"C{rng.randrange(1_000_000):06d}" for _ in range(1000)]
    fields = " ".join(f'k{i}: latestBooking(key: "{k}") {{ record {{ price }} }}'
                      for i, k in enumerate(keys))
    aliased = [body("{ " + fields + " }")] * int(sys.argv[4])
    p50(aliased[:3])
    print(f"prefix p50 {prefix:.2f} ms, aliases p50 {p50(aliased):.1f} ms, "
          f"load {os.getloadavg()[0]:.2f}")
finally:
    processes.stop_all()
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ab_trees")
    parser.add_argument("--workload", choices=NAMES, default="main")
    parser.add_argument("--trees", nargs=2, type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    workload = Workload.built(args.workload)
    if workload is None:
        parser.error(f"the {args.workload} workload is not built: run `make bench` first")
    project = workload.project_path
    for round_ in range(args.rounds):
        for tree in args.trees:
            logs = Path("/tmp") / f"stategate-ab-{tree.resolve().name}"
            command = [sys.executable, "-c", MEASURE, str(project), str(logs)]
            command += [str(PREFIXES), str(ALIASED)]
            done = subprocess.run(command, cwd=tree, capture_output=True, text=True)
            said = done.stdout.strip() or done.stderr.strip()[-2000:]
            print(f"round {round_ + 1}, {tree}: {said}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
