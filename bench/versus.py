"""Side by side with PostgreSQL + PostGraphile (bench/peer.py): the latestBooking rows the
gateway serves, copied into PostgreSQL; the same keys, the same client, the same four reads.
Both servers run at once, and each case is asked of one, then the other, in short rounds
(`measure`): the one not asked idles (the gateway's nodes poll each other a little).

- one key: `latestBooking(key: $key) { record {...} }` vs `latestBookingByKey(key: $key)`;
- 1000 keys as one list: `latestBookingBatch(keys: $keys)` vs `latestBookingByKeys(keys:)`;
- 1000 aliased fields, the keys as variables: `k0: latestBooking(key: $k0)` ... vs
  `k0: latestBookingByKey(key: $k0)` ...

The gateway's one-key reads are measured twice more, sent as a routing client sends them
(clients/python/routing.py: each to the active replica of its key's partition, chosen per
request) instead of all to node1.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import duckdb
import httpx
import orjson

from bench.driver import Servers, Stats, graphql_operation, http_client, run_async
from bench.queries import body
from clients.python import routing
from contracts.project import Project

TABLE = "latest_booking"
STORE = "latestBooking"
FIELDS = "key trip price seats"
PG_TYPES = {"string": "text", "int": "integer", "long": "bigint", "double": "double precision",
            "boolean": "boolean"}  # fmt: skip
ONE, ONE_16, LIST, ALIASES = "one key", "one key, 16 clients", "1000 keys, one list", "1000 aliased"
ROUTED, ROUTED_16 = "one key, routed", "one key, 16 clients, routed"


@dataclass(frozen=True)
class Dialect:
    """How one server spells the three reads."""

    one: str
    many: str
    alias: str  # one aliased field, with {i}

    def aliased(self, keys: Sequence[str]) -> bytes:
        definitions = ", ".join(f"$k{i}: String!" for i in range(len(keys)))
        fields = " ".join(self.alias.replace("{i}", str(i)) for i in range(len(keys)))
        query = f"query Batch({definitions}) {{ {fields} }}"
        return body(query, {f"k{i}": k for i, k in enumerate(keys)})


GATEWAY = Dialect(
    one=f"query One($key: String!) {{ {STORE}(key: $key) {{ record {{ {FIELDS} }} }} }}",
    many=f"query Many($keys: [String!]!) {{ {STORE}Batch(keys: $keys) "
    f"{{ entries {{ record {{ {FIELDS} }} }} }} }}",
    alias=f"k{{i}}: {STORE}(key: $k{{i}}) {{ record {{ {FIELDS} }} }}",
)
POSTGRAPHILE = Dialect(
    one=f"query One($key: String!) {{ latestBookingByKey(key: $key) {{ {FIELDS} }} }}",
    many=f"query Many($keys: [String]!) {{ latestBookingByKeys(keys: $keys) "
    f"{{ nodes {{ {FIELDS} }} }} }}",
    alias=f"k{{i}}: latestBookingByKey(key: $k{{i}}) {{ {FIELDS} }}",
)


def export_rows(project: Project, files: dict[int, Path], out: Path) -> list[str]:
    """Write the store's rows as CSV (header: key, then the columns); return every key."""
    store = project.stores[STORE]
    con = duckdb.connect(":memory:")
    columns = ", ".join(["key", *(f'"{c}"' for c in store.columns)])
    union = []
    for p, path in sorted(files.items()):
        con.execute(f"ATTACH '{path}' AS p{p} (READ_ONLY)")
        union.append(f'SELECT {columns} FROM p{p}."{STORE}"')
    con.execute(f"COPY ({' UNION ALL '.join(union)}) TO '{out}' (HEADER, DELIMITER ',')")
    keys = [r[0] for r in con.execute(f"SELECT key FROM ({' UNION ALL '.join(union)})").fetchall()]
    con.close()
    return keys


def pg_columns(project: Project) -> dict[str, str]:
    return {name: PG_TYPES[kind] for name, kind in project.stores[STORE].columns.items()}


@dataclass(frozen=True)
class Bodies:
    one: list[bytes]
    lists: list[bytes]
    aliased: list[bytes]


def bodies(dialect: Dialect, keys: list[str], seed: int = 10) -> Bodies:
    """The same keys for both servers: a seeded sample of the served keys."""
    rng = random.Random(seed)
    ones = [rng.choice(keys) for _ in range(20_000)]
    lists = [rng.sample(keys, 1000) for _ in range(200)]
    return Bodies(
        one=[body(dialect.one, {"key": k}) for k in ones],
        lists=[body(dialect.many, {"keys": ks}) for ks in lists],
        aliased=[dialect.aliased(ks) for ks in lists[:60]],
    )


def _count(expected: int) -> Callable[[Any], str | None]:
    """A check that the answer has `expected` non-null rows somewhere in it."""

    def rows(value: Any) -> int:
        if isinstance(value, dict):
            if "trip" in value:
                return 1
            return sum(rows(v) for v in value.values())
        if isinstance(value, list):
            return sum(rows(v) for v in value)
        return 0

    def check(data: Any) -> str | None:
        found = rows(data)
        return None if found == expected else f"{found} rows, expected {expected}"

    return check


def cluster_map(base: str) -> routing.ClusterMap:
    """The partition map a routing client reads from the node at `base`."""
    return routing.ClusterMap.read(httpx.get(f"{base}/cluster").json(), "http")


def router(cluster: routing.ClusterMap) -> Callable[[bytes], str]:
    """Where a routing client sends a request: its keys' best node."""

    def route(content: bytes) -> str:
        keys = routing.keys_asked(orjson.loads(content), cluster.routes)
        return f"{cluster.addresses[cluster.nodes_for(keys)[0]]}/graphql"

    return route


@dataclass(frozen=True)
class Side:
    """One server as versus asks it: its rows' label, its URL, its bodies, its processes;
    with a cluster map, its one-key reads are also sent routed."""

    label: str
    url: str
    bodies: Bodies
    servers: Servers
    cluster: routing.ClusterMap | None = None


Case = tuple[str, int, Callable[[Bodies], list[bytes]], int, int, bool]
CASES: list[Case] = [  # name, concurrency, bodies, rows of each answer, warm-up, routed
    (ONE, 1, lambda b: b.one, 1, 50, False),
    (ONE_16, 16, lambda b: b.one, 1, 50, False),
    (LIST, 1, lambda b: b.lists, 1000, 5, False),
    (ALIASES, 1, lambda b: b.aliased, 1000, 2, False),
    (ROUTED, 1, lambda b: b.one, 1, 50, True),
    (ROUTED_16, 16, lambda b: b.one, 1, 50, True),
]
ROUNDS = 4  # of each case, each side's, in turn: both meet the machine's same minutes


async def measure(sides: Sequence[Side], duration: float) -> list[Stats]:
    """The reads of every side, case by case: each case's duration cut into ROUNDS rounds
    asked of one side, then the other (who goes first alternating). This machine's speed
    drifts by half within minutes; two servers measured one after the other would compare
    the minutes. Each round starts with its side's warm-up calls (untimed: the other side's
    round went between). A side's row of a case: its rounds' median p50 and p99, its
    requests over its seconds."""
    out = []
    async with http_client() as client:
        for name, concurrency, of, rows, warmup, routed in CASES:
            asked = [side for side in sides if side.cluster is not None or not routed]
            rounds: dict[str, list[Stats]] = {side.label: [] for side in asked}
            for number in range(ROUNDS):
                for side in asked if number % 2 == 0 else list(reversed(asked)):
                    route = router(side.cluster) if routed and side.cluster else None
                    operation = graphql_operation(client, [side.url], of(side.bodies),
                                                  _count(rows), route)  # fmt: skip
                    rounds[side.label].append(
                        await run_async(
                            f"{side.label} {name}",
                            operation,
                            concurrency,
                            duration / ROUNDS,
                            1_000_000,
                            warmup=warmup,
                            servers=side.servers,
                            min_count=2,
                        )
                    )
            out += [merged(stats) for stats in rounds.values()]
    return out


def merged(rounds: list[Stats], note: str = "") -> Stats:
    """One row of a side's rounds of a case."""
    count = sum(s.count for s in rounds)
    seconds = sum(s.seconds for s in rounds)
    cpu = [s.server_cpu_ms * s.count for s in rounds if s.server_cpu_ms is not None]
    return replace(
        rounds[0],
        count=count,
        errors=sum(s.errors for s in rounds),
        seconds=round(seconds, 3),
        p50_ms=statistics.median(s.p50_ms for s in rounds),
        p99_ms=statistics.median(s.p99_ms for s in rounds),
        mean_ms=sum(s.mean_ms * s.count for s in rounds) / count,
        qps=count / seconds,
        client_cpu=sum(s.client_cpu * s.seconds for s in rounds) / seconds,
        server_cpu_ms=sum(cpu) / count if len(cpu) == len(rounds) else None,
        first_error=next((s.first_error for s in rounds if s.first_error), None),
        note=note or f"median of {len(rounds)} rounds, in turn with the other side",
        load1=round(statistics.mean(s.load1 for s in rounds), 2),
    )
