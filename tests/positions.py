"""Answers checked against the oracle at the positions they state, for a cluster whose state
moves while it is read: every partition's answer must be what the raw log's records before
its stated offset make, and a client's positions must never go back (it sends its last
consistency token with every request)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from threading import Event
from typing import Any

import pytest

from contracts.project import Project
from tests import live, oracle, wire
from tests.projects import HOUR_MS, START_MS
from tests.wire import as_row, iso, selection

TOPIC = "bookings"
PREFIX = "C00001"  # 10 keys, spread over the partitions
RANGE = ("C00002", "C00003")  # from <= key <= to: C000020 .. C000029 and "C00003"?
PAGE = 50  # more than the keys of the prefix and of the range: each page is all of them
WINDOWS = (START_MS, START_MS + 6 * HOUR_MS)
META = (
    "meta { partial consistencyToken "
    "partitions { partition node failure message position { topic offset } } }"
)


def document(project: Project) -> str:
    """One request of every query kind on the bookings topic's stores."""
    totals, latest, hourly = (
        selection(project.stores[n]) for n in ("customerTotals", "latestBooking", "hourlyRevenue")
    )
    c = "consistency: { token: $token }"
    return f"""query($key: String!, $keys: [String!]!, $token: String) {{
  lookup: customerTotals(key: $key, {c}) {{ key partition record {{ {totals} }} {META} }}
  latest: latestBooking(key: $key, {c}) {{ key partition record {{ {latest} }} {META} }}
  batch: customerTotalsBatch(keys: $keys, {c}) {{
    entries {{ key partition failure record {{ {totals} }} }} {META} }}
  prefix: customerTotalsPrefix(prefix: "{PREFIX}", first: {PAGE}, {c}) {{
    records {{ {totals} }} {META} }}
  range: latestBookingRange(from: "{RANGE[0]}", to: "{RANGE[1]}", first: {PAGE}, {c}) {{
    records {{ {latest} }} {META} }}
  windows: hourlyRevenue(key: $key, from: "{iso(WINDOWS[0])}", to: "{iso(WINDOWS[1])}", {c}) {{
    key partition windows {{ {hourly} }} {META} }}
}}"""


def subscription(project: Project) -> str:
    """One key's totals, live."""
    totals = selection(project.stores["customerTotals"])
    return f"""subscription($key: String!, $token: String) {{
  lookup: customerTotals(key: $key, consistency: {{ token: $token }}) {{
    key partition record {{ {totals} }} {META} }}
}}"""


def follow(
    socket: live.Socket, client: Client, key: str, stopping: Event, pushed: list[int]
) -> None:
    """Subscribe to one key's totals on `socket` with the client's last token, and check
    every push until `stopping`; each push's offset in the key's partition goes to `pushed`.
    The socket is closed at the end, or when its node closes it (ConnectionClosed)."""
    try:
        socket.subscribe("s", subscription(client.project), {"key": key, "token": client.token})
        while not stopping.is_set():
            try:
                payload = socket.next_of("s", timeout=0.5)
            except TimeoutError:
                continue
            lookup = payload["data"]["lookup"]
            client.check(payload["data"], lookup["meta"]["consistencyToken"])
            pushed.append(client.seen.get(lookup["partition"], -1))
    finally:
        socket.close()


STORES = {
    "lookup": "customerTotals",
    "latest": "latestBooking",
    "batch": "customerTotals",
    "prefix": "customerTotals",
    "range": "latestBooking",
    "windows": "hourlyRevenue",
}


class Client:
    """What one client saw: its last token, the highest offset per partition, and every
    answer that was not the oracle's at its positions (as text, for the failure message).

    With `partial_ok`, a partial answer is counted (`partial`) rather than a problem, and the
    partitions it did answer are checked as any others: what a partition cut off from the
    node asked may cost is an answer without it, never a wrong one."""

    def __init__(self, project: Project, log: oracle.Log, partial_ok: bool = False) -> None:
        self.project, self.log = project, log
        self.partial_ok = partial_ok
        self.token: str | None = None
        self.seen: dict[int, int] = {}
        self.answers = 0
        self.partial = 0
        self.problems: list[str] = []

    @contextlib.contextmanager
    def crashes(self) -> Iterator[None]:
        """A client thread's end by an exception, kept as a problem (a thread's exception
        would otherwise only be a warning)."""
        try:
            yield
        except Exception as exc:  # noqa: BLE001 - whatever ended it fails the test
            self.problems.append(f"crashed: {exc!r}")

    def check(self, data: dict[str, Any], token: str | None) -> frozenset[str]:
        """A response of `document`, or a subscription's payload of some of its fields; the
        failures of the partitions that failed (none: it was whole)."""
        self.answers += 1
        failures: set[str] = set()
        before = dict(self.seen)  # what the token sent with this request promised
        for name, answer in data.items():
            failures.update(p["failure"] for p in answer["meta"]["partitions"] if p["failure"])
            offsets = self._positions(name, answer["meta"], before)
            if offsets is not None:
                self._values(name, answer, offsets)
        self.partial += bool(failures)
        if token is not None:
            self.token = token
        return frozenset(failures)

    def _positions(
        self, name: str, meta: dict[str, Any], before: dict[int, int]
    ) -> dict[int, int] | None:
        """Each answered partition's offset, once checked: none went back from what earlier
        answers showed (the fields of one answer may each come from another replica, each
        at least as fresh as the token), and none failed (unless partial answers are ok)."""
        failed = [p for p in meta["partitions"] if p["failure"]]
        if (meta["partial"] or failed) and not self.partial_ok:
            self.problems.append(f"{name}: partial {failed}")
            return None
        offsets = {
            p["partition"]: wire.offsets(p["position"])[TOPIC]
            for p in meta["partitions"]
            if not p["failure"]
        }
        for partition, offset in offsets.items():
            if offset < before.get(partition, 0):
                by = [p["node"] for p in meta["partitions"] if p["partition"] == partition]
                self.problems.append(f"{name}: p{partition} on {by} back to {offset} from {before}")
            self.seen[partition] = max(offset, self.seen.get(partition, 0))
        return offsets

    def _values(self, name: str, answer: dict[str, Any], offsets: dict[int, int]) -> None:
        store = self.project.stores[STORES[name]]
        if "entries" in answer:
            for entry in answer["entries"]:
                if entry["partition"] in offsets:
                    self._keyed(name, entry, offsets[entry["partition"]])
        elif "partition" in answer and answer["partition"] not in offsets:
            return  # one key, of a partition that failed
        elif "windows" in answer:
            rows = self.log.rows(store.name, answer["partition"], offsets[answer["partition"]])
            want = [r for i, r in sorted(rows.items()) if i[0] == answer["key"]]
            self._same(name, [as_row(store, w) for w in answer["windows"]], want)
        elif "records" in answer:
            inside = _prefix if name == "prefix" else _range
            want = sorted(
                row
                for partition, offset in offsets.items()
                for (key, *_), row in self.log.rows(store.name, partition, offset).items()
                if inside(key)
            )[:PAGE]
            self._same(name, [as_row(store, r) for r in answer["records"]], want)
        else:
            self._keyed(name, answer, offsets[answer["partition"]])

    def _keyed(self, name: str, answer: dict[str, Any], offset: int) -> None:
        store = self.project.stores[STORES[name]]
        row = self.log.rows(store.name, answer["partition"], offset).get((answer["key"],))
        got = None if answer["record"] is None else as_row(store, answer["record"])
        self._same(name, [got] if got else [], [row] if row else [])

    def _same(self, name: str, got: list[tuple], want: list[tuple]) -> None:
        if len(got) != len(want) or any(
            g != pytest.approx(w) for g, w in zip(got, want, strict=True)
        ):
            self.problems.append(f"{name}: {got} is not the oracle's {want}")


def _prefix(key: str) -> bool:
    return key.startswith(PREFIX)


def _range(key: str) -> bool:
    return RANGE[0] <= key <= RANGE[1]
