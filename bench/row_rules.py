"""What a row rule costs (issue 54): a by-value page, totals and a one-key lookup, read by a
role with a rule against a role that reads the store whole, with and without the rule's
filter given as `where`, on the same nodes and data, alternating.

    python -m bench.row_rules --events 100000 --rounds 3

node1 of the demo's 3-node cluster (one worker a node), with [auth]: role `whole` reads every
store; role `planner` reads latestBooking where `trip in claims.trips` (3 of its 870 trips)
and customerTotals where `key = claims.customer_id`. One client's sequential requests after
a warm-up, the median of each round, and of the rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path

import jwt

from bench.one_key import demo_built, p50_ms
from bench.queries import body
from contracts import project as projects
from stategate.launcher import Processes, wait_serving

SECRET_ENV = "STATEGATE_BENCH_JWT_SECRET"
SECRET = "a-bench-hmac-secret-long-enough-for-hs256-tokens"
TRIPS = ["Berlin→Hamburg", "Hamburg→Berlin", "München→Köln"]
CUSTOMER = "C000042"
AUTH = f"""
[auth]
jwt_secret_env = "{SECRET_ENV}"

[auth.roles]
whole = ["*"]
planner = ["latestBooking", "customerTotals"]

[auth.rows.planner]
latestBooking = "trip in claims.trips"
customerTotals = "key = claims.customer_id"
"""
PAGE = """query($where: LatestBookingFilter) { latestBookingList(where: $where, first: 100,
  orderBy: [PRICE_DESC]) { records { key trip price } } }"""
TOTALS = """query($where: LatestBookingFilter) { latestBookingAggregate(where: $where) {
  totalCount sum { price } max { price } } }"""
LOOKUP = "query($k: String!) { customerTotals(key: $k) { record { bookings revenue } } }"
WHERE = {"trip": {"in": TRIPS}}


def token(role: str) -> dict[str, str]:
    claims = {"roles": [role], "exp": int(time.time()) + 3600, "trips": TRIPS,
              "customer_id": CUSTOMER}  # fmt: skip
    return {"authorization": f"Bearer {jwt.encode(claims, SECRET, algorithm='HS256')}"}


def cases() -> dict[str, tuple[bytes, str]]:
    """name -> (request body, role)."""
    return {
        "page, whole store": (body(PAGE), "whole"),
        "page, where = the rule": (body(PAGE, {"where": WHERE}), "whole"),
        "page, the row rule": (body(PAGE), "planner"),
        "totals, whole store": (body(TOTALS), "whole"),
        "totals, where = the rule": (body(TOTALS, {"where": WHERE}), "whole"),
        "totals, the row rule": (body(TOTALS), "planner"),
        "lookup, whole store": (body(LOOKUP, {"k": CUSTOMER}), "whole"),
        "lookup, the row rule": (body(LOOKUP, {"k": CUSTOMER}), "planner"),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.row_rules")
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    measured: dict[str, list[float]] = {name: [] for name in cases()}
    with tempfile.TemporaryDirectory(prefix="stategate-bench-") as work:
        project = demo_built(Path(work), args.events)
        with project.path.open("a") as file:
            file.write(AUTH)
        project = projects.load(project.path)
        processes = Processes(Path(work) / "logs")
        os.environ[SECRET_ENV] = SECRET
        try:
            processes.start_nodes(project)
            wait_serving(project, [n.id for n in project.cluster.nodes])
            url = f"{project.cluster.nodes[0].url}/graphql"
            print(f"load {os.getloadavg()[0]:.2f} at start", flush=True)
            for number in range(args.rounds):
                asked = list(cases().items())
                for name, (request, role) in asked if number % 2 == 0 else reversed(asked):
                    measured[name].append(asyncio.run(p50_ms(url, [request], headers=token(role))))
                    print(f"{name}: p50 {measured[name][-1]:.3f} ms", flush=True)
            print(f"load {os.getloadavg()[0]:.2f} at the end", flush=True)
        finally:
            processes.stop_all()
    print("\n| node1 of 3, one client | p50 (median of rounds) | against the whole store |")
    print("| --- | --- | --- |")
    for name, times in measured.items():
        whole = statistics.median(measured[name.split(",")[0] + ", whole store"])
        p50 = statistics.median(times)
        print(f"| {name} | {p50:.3f} ms | {p50 / whole:.2f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
