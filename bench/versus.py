"""Side by side with PostgreSQL + PostGraphile (bench/peer.py): the latestBooking rows the
gateway serves, copied into PostgreSQL; the same keys, the same client, the same four reads,
each server alone on the machine while it is measured.

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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
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


async def measure(
    label: str,
    url: str,
    b: Bodies,
    servers: Servers,
    duration: float,
    cluster: routing.ClusterMap | None = None,
) -> list[Stats]:
    """The four reads against one server, one case at a time; with a cluster map, the
    one-key reads routed too."""
    cases: list[tuple[str, int, list[bytes], int, int, Callable[[bytes], str] | None]] = [
        (ONE, 1, b.one, 1, 50, None),
        (ONE_16, 16, b.one, 1, 50, None),
        (LIST, 1, b.lists, 1000, 5, None),
        (ALIASES, 1, b.aliased, 1000, 2, None),
    ]
    if cluster is not None:
        route = router(cluster)
        cases += [(ROUTED, 1, b.one, 1, 50, route), (ROUTED_16, 16, b.one, 1, 50, route)]
    out = []
    async with http_client() as client:
        for name, concurrency, requests, rows, warmup, routed in cases:
            operation = graphql_operation(client, [url], requests, _count(rows), routed)
            stats = await run_async(
                f"{label} {name}", operation, concurrency, duration, 1_000_000,
                warmup=warmup, servers=servers, min_count=5,
            )  # fmt: skip
            out.append(stats)
    return out
