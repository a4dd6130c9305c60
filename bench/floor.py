"""The storage floor: the gateway's lookups done directly on the same DuckDB snapshot files
from one Python process, in the best query shape found (several shapes are measured).

One in-memory DuckDB connection with every partition's file ATTACHed read-only, configured
like a node's hub (threads=2, memory_limit 1GB). Rows are fetched into Python lists, as the
gateway fetches them.
"""

from __future__ import annotations

import heapq
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb

from contracts.manifest import read_manifest
from contracts.partitioner import partition_for

TOTALS = '"key", "bookings", "revenue", "seats", "cheapest", "dearest"'
LATEST = '"key", "trip", "price", "seats"'
HOURLY = '"key", "window_start", "bookings", "revenue"'
Rows = list[tuple[Any, ...]]


class Floor:
    def __init__(self, store_dir: Path, partitions: int, threads: int = 2) -> None:
        manifest = read_manifest(store_dir)
        self.partitions = partitions
        # the bench's state is built in one run: every chain is a base alone
        if any(len(entry.layers) > 1 for entry in manifest.partitions.values()):
            raise RuntimeError(f"{store_dir}: chains with deltas; rebuild the bench state")
        bases = {c: store_dir / entry.base.path for c, entry in manifest.partitions.items()}
        # chain p holds partition p's partitioned stores, chain partitions + p its global
        # ones (contracts/chains.py): attached as p<p> and g<p>
        self.files = {c: path for c, path in bases.items() if c < partitions}
        self.global_files = {c - partitions: path for c, path in bases.items() if c >= partitions}
        if sorted(self.files) != list(range(partitions)):
            raise RuntimeError(f"{store_dir}: manifest lists partitions {sorted(self.files)}")
        self.con = duckdb.connect(":memory:", config={"threads": threads, "memory_limit": "1GB"})
        for p, path in sorted(self.files.items()):
            self.con.execute(f"ATTACH '{path}' AS p{p} (READ_ONLY)")
        for p, path in sorted(self.global_files.items()):
            self.con.execute(f"ATTACH '{path}' AS g{p} (READ_ONLY)")

    def close(self) -> None:
        self.con.close()

    def part(self, key: str) -> int:
        return partition_for(key, "string", self.partitions)

    # -- the key set the queries draw from ------------------------------------------------

    def all_keys(self, store: str = "customerTotals") -> list[str]:
        keys: list[str] = []
        for p in range(self.partitions):
            keys += [r[0] for r in self.con.execute(f'SELECT key FROM p{p}."{store}"').fetchall()]
        return sorted(keys)

    def heavy_keys(self, n: int) -> list[str]:
        union = " UNION ALL ".join(
            f'SELECT key, bookings FROM p{p}."customerTotals"' for p in range(self.partitions)
        )
        sql = f"SELECT key FROM ({union}) ORDER BY bookings DESC, key LIMIT {int(n)}"
        return [r[0] for r in self.con.execute(sql).fetchall()]

    def prefixes(self, minimum: int = 101, wanted: int = 50) -> list[str]:
        """Prefixes of latestBooking keys with at least `minimum` keys, longest length first."""
        keys = self.all_keys("latestBooking")
        for length in range(6, 0, -1):
            counts = Counter(k[:length] for k in keys)
            found = sorted(p for p, c in counts.items() if c >= minimum)
            if len(found) >= min(wanted, 10) or length == 1:
                return found[:wanted] if len(found) <= wanted else found[:: len(found) // wanted]
        return []

    def table_rows(self, store: str) -> int:
        return sum(
            self.con.execute(f'SELECT count(*) FROM p{p}."{store}"').fetchone()[0]  # type: ignore[index]
            for p in range(self.partitions)
        )

    # -- one key -----------------------------------------------------------------------------

    def one_eq(self, key: str) -> Rows:
        sql = f'SELECT {TOTALS} FROM p{self.part(key)}."customerTotals" WHERE key = ?'
        return self.con.execute(sql, [key]).fetchall()

    def one_in(self, key: str) -> Rows:
        sql = (
            f'SELECT {TOTALS} FROM p{self.part(key)}."customerTotals" '
            "WHERE key IN (SELECT unnest(?))"
        )
        return self.con.execute(sql, [[key]]).fetchall()

    # -- many keys ---------------------------------------------------------------------------

    def _grouped(self, keys: list[str]) -> dict[int, list[str]]:
        grouped: dict[int, list[str]] = defaultdict(list)
        for key in keys:
            grouped[self.part(key)].append(key)
        return grouped

    def many_per_partition(self, keys: list[str]) -> Rows:
        """One `key IN (SELECT unnest(?))` statement per partition (the gateway's shape)."""
        rows: Rows = []
        for p, group in sorted(self._grouped(keys).items()):
            sql = f'SELECT {TOTALS} FROM p{p}."customerTotals" WHERE key IN (SELECT unnest(?))'
            rows += self.con.execute(sql, [group]).fetchall()
        return rows

    def many_union(self, keys: list[str]) -> Rows:
        """All partitions in one UNION ALL statement, one list parameter each."""
        grouped = sorted(self._grouped(keys).items())
        sql = " UNION ALL ".join(
            f'SELECT {TOTALS} FROM p{p}."customerTotals" WHERE key IN (SELECT unnest(?))'
            for p, _ in grouped
        )
        return self.con.execute(sql, [g for _, g in grouped]).fetchall()

    def many_join(self, keys: list[str]) -> Rows:
        """One semi-join per partition against an unnested list."""
        rows: Rows = []
        for p, group in sorted(self._grouped(keys).items()):
            sql = (
                f'SELECT {TOTALS} FROM p{p}."customerTotals" '
                "SEMI JOIN (SELECT unnest(?) AS k) ON key = k"
            )
            rows += self.con.execute(sql, [group]).fetchall()
        return rows

    # -- prefix ------------------------------------------------------------------------------

    def prefix_merge(self, prefix: str, limit: int = 100) -> Rows:
        """ORDER BY key LIMIT n per partition, then a k-way merge in Python."""
        upper = prefix[:-1] + chr(ord(prefix[-1]) + 1)
        runs = []
        for p in range(self.partitions):
            sql = (
                f'SELECT {LATEST} FROM p{p}."latestBooking" WHERE key >= ? AND key < ? '
                f"ORDER BY key LIMIT {int(limit)}"
            )
            runs.append(self.con.execute(sql, [prefix, upper]).fetchall())
        return list(heapq.merge(*runs, key=lambda r: r[0]))[:limit]

    def prefix_union(self, prefix: str, limit: int = 100) -> Rows:
        """One statement: the per-partition pages in a UNION ALL, ordered and limited."""
        upper = prefix[:-1] + chr(ord(prefix[-1]) + 1)
        parts = " UNION ALL ".join(
            f'(SELECT {LATEST} FROM p{p}."latestBooking" WHERE key >= $lo AND key < $hi '
            f"ORDER BY key LIMIT {int(limit)})"
            for p in range(self.partitions)
        )
        sql = f"SELECT * FROM ({parts}) ORDER BY key LIMIT {int(limit)}"
        return self.con.execute(sql, {"lo": prefix, "hi": upper}).fetchall()

    # -- windows -----------------------------------------------------------------------------

    def windows(self, key: str, start_ms: int, end_ms: int) -> Rows:
        sql = (
            f'SELECT {HOURLY} FROM p{self.part(key)}."hourlyRevenue" '
            "WHERE key = ? AND window_start BETWEEN ? AND ? ORDER BY window_start"
        )
        return self.con.execute(sql, [key, start_ms, end_ms]).fetchall()


Shape = tuple[str, Callable[..., Rows]]


def shapes(floor: Floor) -> dict[str, list[Shape]]:
    """The candidate shapes per case; the runner measures each and keeps the fastest."""
    return {
        "one key": [("point key = ?", floor.one_eq), ("key IN unnest([key])", floor.one_in)],
        "1000 keys": [
            ("IN unnest(?) per partition", floor.many_per_partition),
            ("UNION ALL of 9 IN unnest(?)", floor.many_union),
            ("SEMI JOIN unnest(?) per partition", floor.many_join),
        ],
        "prefix 100": [
            ("LIMIT per partition + heapq merge", floor.prefix_merge),
            ("UNION ALL ORDER BY LIMIT", floor.prefix_union),
        ],
    }
