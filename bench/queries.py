"""The GraphQL documents of the query mix, and the request bodies built from real keys.

Every body is pre-serialized JSON (bytes) so the load driver spends its time sending, not
building; keys, prefixes and heavy keys are drawn from the real key set with a fixed seed.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

import orjson

TOTALS = "bookings revenue seats cheapest dearest"
META = "meta { partial consistencyToken }"

ONE_KEY = (
    "query One($key: String!) { customerTotals(key: $key) { key partition "
    f"record {{ {TOTALS} }} {META} }} }}"
)
KEYS_LIST = (
    "query Batch($keys: [String!]!) { customerTotalsBatch(keys: $keys) { "
    f"entries {{ key failure record {{ {TOTALS} }} }} {META} }} }}"
)
PREFIX = (
    "query Prefix($prefix: String!, $first: Int!) { "
    "latestBookingPrefix(prefix: $prefix, first: $first) { records { key trip price seats } "
    f"pageInfo {{ hasNextPage endCursor }} {META} }} }}"
)
WINDOWS = (
    "query Windows($key: String!, $from: DateTime!, $to: DateTime!) { "
    "hourlyRevenue(key: $key, from: $from, to: $to) { key "
    f"windows {{ windowStart windowEnd bookings revenue }} {META} }} }}"
)
DASHBOARD = (
    "query Dashboard($key: String!, $keys: [String!]!, $prefix: String!, "
    "$from: DateTime!, $to: DateTime!) { "
    "latestBooking(key: $key) { key record { trip price seats } meta { partial } } "
    f"customerTotals(key: $key) {{ record {{ {TOTALS} }} }} "
    "customerTotalsBatch(keys: $keys) { entries { key record { bookings revenue } } "
    f"{META} }} "
    "latestBookingPrefix(prefix: $prefix, first: 20) { records { key trip price } "
    "pageInfo { hasNextPage endCursor } } "
    "hourlyRevenue(key: $key, from: $from, to: $to) { windows { windowStart bookings revenue } } "
    "cluster { node partitions { partition replicas { node role alive version lag } } } }"
)


def aliased(keys: list[str]) -> str:
    """One root field per key: `k0: customerTotals(key: "...") { key record { ... } }`."""
    fields = " ".join(
        f"k{i}: customerTotals(key: {orjson.dumps(k).decode()}) {{ key record {{ {TOTALS} }} }}"
        for i, k in enumerate(keys)
    )
    return "{ " + fields + " }"


def body(query: str, variables: Mapping[str, object] | None = None) -> bytes:
    return orjson.dumps({"query": query, "variables": variables or {}})


def iso(millis: int) -> str:
    return datetime.fromtimestamp(millis / 1000, tz=UTC).isoformat()


@dataclass(frozen=True)
class KeySet:
    """What the queries draw from: the real keys of the snapshots."""

    keys: list[str]  # every key of customerTotals
    heavy: list[str]  # the busiest keys (most bookings): long window series
    prefixes: list[str]  # prefixes with more than 100 latestBooking keys
    window_from_ms: int  # the first hour of the week
    window_to_ms: int  # 7 days minus 1 h later: 168 hourly windows


class Bodies:
    """Request bodies for each case, reproducible from a seed."""

    def __init__(self, keyset: KeySet, seed: int = 42) -> None:
        self.ks = keyset
        self.seed = seed

    def _rng(self, case: str) -> random.Random:
        return random.Random(f"{self.seed}-{case}")

    def one_key(self, n: int) -> list[bytes]:
        rng = self._rng("one")
        return [body(ONE_KEY, {"key": rng.choice(self.ks.keys)}) for _ in range(n)]

    def one_key_raw(self, n: int) -> list[str]:
        """The same keys as one_key, as plain strings (for the floor and the naive layer)."""
        rng = self._rng("one")
        return [rng.choice(self.ks.keys) for _ in range(n)]

    def key_lists(self, n: int, size: int = 1000) -> list[list[str]]:
        rng = self._rng(f"list-{size}")
        return [rng.sample(self.ks.keys, size) for _ in range(n)]

    def keys_list(self, n: int, size: int = 1000) -> list[bytes]:
        return [body(KEYS_LIST, {"keys": keys}) for keys in self.key_lists(n, size)]

    def keys_aliased(self, n: int, size: int = 1000) -> list[bytes]:
        return [body(aliased(keys)) for keys in self.key_lists(n, size)]

    def prefix_args(self, n: int) -> list[str]:
        rng = self._rng("prefix")
        return [rng.choice(self.ks.prefixes) for _ in range(n)]

    def prefix(self, n: int, first: int = 100) -> list[bytes]:
        return [body(PREFIX, {"prefix": p, "first": first}) for p in self.prefix_args(n)]

    def window_keys(self, n: int) -> list[str]:
        rng = self._rng("windows")
        return [rng.choice(self.ks.heavy) for _ in range(n)]

    def windows(self, n: int) -> list[bytes]:
        span = {"from": iso(self.ks.window_from_ms), "to": iso(self.ks.window_to_ms)}
        return [body(WINDOWS, {"key": k, **span}) for k in self.window_keys(n)]

    def dashboard(self, n: int) -> list[bytes]:
        rng = self._rng("dashboard")
        day_from = self.ks.window_to_ms - 23 * 3_600_000  # the last 24 hourly windows
        out = []
        for _ in range(n):
            variables = {
                "key": rng.choice(self.ks.heavy),
                "keys": rng.sample(self.ks.keys, 20),
                "prefix": rng.choice(self.ks.prefixes),
                "from": iso(day_from),
                "to": iso(self.ks.window_to_ms),
            }
            out.append(body(DASHBOARD, variables))
        return out
