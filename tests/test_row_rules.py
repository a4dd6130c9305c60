"""Row rules ([auth.rows]) on real nodes over real HTTP and WebSocket: random rules per role
and store over every field type, random tokens (roles, claims present, missing or of the
wrong type), and every query kind asked of every node in turn: lookups and batches, key
ranges and prefixes, by-value pages and totals, a key's windows and every key's, asOf and
history, joins, subscriptions and federation's _entities. The oracle builds each rule as a
Python function beside its text and applies it to the answers computed from the raw log;
it never reads the gateway's parser or filters."""

from __future__ import annotations

import itertools
import json
import math
import os
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import jwt
import pytest

from contracts import project as projects
from contracts.project import Store
from spark_pipeline.spark import LazySpark
from tests import oracle, wire
from tests.live import Socket
from tests.nodes import Served, serve
from tests.test_by_value import (
    WIDE,
    aggregate_query,
    enum_value,
    expected_totals,
    holds,
    ordered,
    random_filter,
    random_order,
    read_totals,
    same_rows,
    span,
)
from tests.test_versions import VERSION, as_version, of
from tests.wire import as_row, iso, selection

SECRET_ENV = "STATEGATE_TEST_ROWS_SECRET"
SECRET = "a-test-hmac-secret-for-row-rules-long-enough-for-hs256"
NODES = ("node1", "node2", "node3")
ROLES = ("r0", "r1", "r2")
KEYED = ("latestBooking", "customerTotals", "trainStatus", "trainDelays", "trainHistory")
WINDOWED = ("hourlyRevenue", "delaysHopping")
RULED = (*KEYED, *WINDOWED, "timetable")
COMPARED = {"string": ("=", "!=", "<", "<=", ">", ">=", "in", "starts with", "is"),
            "int": ("=", "!=", "<", "<=", ">", ">=", "in", "is"),
            "long": ("=", "!=", "<", "<=", ">", ">=", "in", "is"),
            "double": ("=", "!=", "<", "<=", ">", ">=", "in", "is"),
            "boolean": ("=", "!=", "in", "is")}  # fmt: skip
INT_BOUNDS = {"int": 2**31, "long": 2**63}
PAGE_INFO = "pageInfo { hasNextPage endCursor }"
Row = dict[str, Any]


# -- rules, made as text and as a Python test at once --------------------------------------


@dataclass
class Claimed:
    """A claim a rule reads: the type of the field it is compared with, and whether `in`."""

    name: str
    field: str
    kind: str
    many: bool


@dataclass
class Rule:
    text: str
    test: Callable[[Row, dict[str, Any]], bool]
    claims: list[Claimed] = field(default_factory=list)
    fields: set[str] = field(default_factory=set)


def fits(value: Any, kind: str) -> bool:
    if isinstance(value, bool):
        return kind == "boolean"
    if kind == "string":
        return isinstance(value, str)
    if kind in INT_BOUNDS:
        return isinstance(value, int) and -INT_BOUNDS[kind] <= value < INT_BOUNDS[kind]
    return kind == "double" and isinstance(value, int | float)


def bound(rule: Rule, claims: dict[str, Any]) -> bool:
    """Whether every claim the rule reads is there with a value of its type."""
    for claimed in rule.claims:
        value = claims.get(claimed.name)
        values = value if claimed.many and isinstance(value, list) else [value]
        if value is None or not all(fits(v, claimed.kind) for v in values):
            return False
    return True


def spelled(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    return repr(value)


def compare(value: Any, op: str, operand: Any) -> bool:
    if value is None:
        return False
    match op:
        case "=":
            return bool(value == operand)
        case "!=":
            return bool(value != operand)
        case "<":
            return bool(value < operand)
        case "<=":
            return bool(value <= operand)
        case ">":
            return bool(value > operand)
        case ">=":
            return bool(value >= operand)
        case "starts with":
            return str(value).startswith(operand)
    raise AssertionError(op)


class Rules:
    """Random rules over a store's fields, with the values the data holds."""

    def __init__(self, rng: random.Random, fields: dict[str, str], rows: list[Row]) -> None:
        self.rng, self.fields = rng, fields
        self.seen = {f: [r[f] for r in rows if r.get(f) is not None] for f in fields}
        self.claims = 0

    def rule(self, depth: int = 0) -> Rule:
        roll = self.rng.random()
        if depth < 2 and roll < 0.25:
            parts = [self.rule(depth + 1) for _ in range(self.rng.choice([2, 3]))]
            word = self.rng.choice(["and", "or"])
            glue = all if word == "and" else any
            return Rule(
                "(" + f" {word} ".join(p.text for p in parts) + ")",
                lambda row, claims: glue(p.test(row, claims) for p in parts),
                [c for p in parts for c in p.claims],
                set().union(*(p.fields for p in parts)),
            )
        if depth < 2 and roll < 0.35:
            inner = self.rule(depth + 1)
            return Rule(f"not {inner.text}", lambda row, claims: not inner.test(row, claims),
                        inner.claims, inner.fields)  # fmt: skip
        return self.test()

    def test(self) -> Rule:
        rng = self.rng
        name = "key" if rng.random() < 0.4 else rng.choice(list(self.fields))
        kind, seen = self.fields[name], self.seen[name] or [self.nothing(name)]
        op = rng.choice(COMPARED[kind])
        if op == "is":
            null = rng.random() < 0.5
            return Rule(f"{name} is {'' if null else 'not '}null",
                        lambda row, _: (row[name] is None) is null, fields={name})  # fmt: skip
        if rng.random() < 0.6:  # from a claim
            self.claims += 1
            claimed = Claimed(f"c{self.claims}", name, kind, op == "in")
            text = f"{name} {op} claims.{claimed.name}"
            if op == "in":

                def test(row: Row, claims: dict[str, Any]) -> bool:
                    given = claims[claimed.name]
                    among = given if isinstance(given, list) else [given]
                    return row[name] is not None and row[name] in among
            else:

                def test(row: Row, claims: dict[str, Any]) -> bool:
                    return compare(row[name], op, claims[claimed.name])

            return Rule(text, test, [claimed], {name})
        if op == "in":
            among = [rng.choice(seen) for _ in range(rng.randrange(1, 4))]
            text = f"{name} in [{', '.join(map(spelled, among))}]"
            return Rule(text, lambda row, _: row[name] is not None and row[name] in among,
                        fields={name})  # fmt: skip
        operand = rng.choice(seen)
        if op == "starts with":
            operand = operand[: rng.randrange(len(operand) + 1)]
        return Rule(f"{name} {op} {spelled(operand)}",
                    lambda row, _: compare(row[name], op, operand), fields={name})  # fmt: skip

    def nothing(self, name: str) -> Any:
        return {"string": "", "boolean": False, "double": 0.0}.get(self.fields[name], 0)

    def claim_value(self, claimed: Claimed) -> Any:
        """A value for a claim: usually one the data holds; now and then missing (None) or
        of the wrong type."""
        rng, seen = self.rng, self.seen[claimed.field] or [self.nothing(claimed.field)]
        roll = rng.random()
        if roll < 0.08:
            return None
        if roll < 0.14:
            return rng.choice([[1, 2], {"a": 1}, "x" if claimed.kind != "string" else 7])
        if claimed.many and rng.random() < 0.8:
            return [rng.choice(seen) for _ in range(rng.randrange(0, 6))]
        return rng.choice(seen)


# -- the project: roles, their rules, and tokens -------------------------------------------


@dataclass
class Setup:
    served: Served
    rows: dict[str, list[Row]]  # store -> its rows, as fields
    grants: dict[str, set[str]]  # role -> stores
    rules: dict[str, dict[str, Rule]]  # role -> store -> rule
    makers: dict[str, Rules]  # store -> its rule maker (claims' values)

    def visible(self, store: str, claims: dict[str, Any], roles: set[str]) -> Callable[[Row], bool]:
        """The oracle's: whether a row passes one of the rules of the roles granting it."""
        tests = []
        for role in sorted(roles):
            if store not in self.grants[role]:
                continue
            rule = self.rules[role].get(store)
            if rule is None:
                return lambda row: True
            if bound(rule, claims):
                tests.append(rule.test)
        return lambda row: any(test(row, claims) for test in tests)

    def by_key(self, store: str, claims: dict[str, Any], roles: set[str]) -> bool:
        """Whether the key alone decides (every bound rule reads the key alone)."""
        ruled = []
        for role in sorted(roles):
            if store in self.grants[role]:
                rule = self.rules[role].get(store)
                if rule is None:
                    return False
                ruled.append(rule)
        return all(r.fields <= {"key"} for r in ruled if bound(r, claims))


def fields_of(store: Store) -> dict[str, str]:
    return {"key": store.key_type, **store.columns}


def rows_of(project: projects.Project, store: Store) -> list[Row]:
    window = ["window_start"] if store.kind == "window" else []
    names = ["key", *window, *store.columns]
    found = oracle.expected_store(project, store.name)
    return [dict(zip(names, r, strict=True)) for part in found.values() for r in part]


def auth_table(setup_rules: dict[str, dict[str, Rule]], grants: dict[str, set[str]]) -> str:
    lines = ["", "[auth]", f'jwt_secret_env = "{SECRET_ENV}"', "leeway_s = 0", "",
             "[auth.roles]", 'ops = ["*", "cluster", "stores"]']  # fmt: skip
    lines += [f"{role} = {json.dumps(sorted(stores))}" for role, stores in grants.items()]
    for role, rules in setup_rules.items():
        lines += ["", f"[auth.rows.{role}]"]
        lines += [f"{store} = {json.dumps(rule.text, ensure_ascii=False)}"
                  for store, rule in rules.items()]  # fmt: skip
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def setup(spark: LazySpark, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    rng = random.Random("rows")
    served = serve(tmp_path_factory.mktemp("rows"), spark, seed=11, start=False,
                   settings="federation = true")  # fmt: skip
    project = served.project
    rows = {name: rows_of(project, project.stores[name]) for name in RULED}
    makers = {name: Rules(rng, fields_of(project.stores[name]), rows[name]) for name in RULED}
    grants = {"r0": set(RULED), "r1": set(rng.sample(RULED, 5)), "r2": set(rng.sample(RULED, 6))}
    rules = {role: {s: makers[s].rule() for s in sorted(grants[role]) if rng.random() < 0.8}
             for role in ROLES}  # fmt: skip
    rules["r1"]["customerTotals"] = Rule(
        "key = claims.customer", lambda row, claims: row["key"] == claims["customer"],
        [Claimed("customer", "key", "string", False)], {"key"},
    )  # fmt: skip
    rules["r1"]["latestBooking"] = Rule(
        "seats >= 2 or trip starts with claims.origin",
        lambda row, claims: compare(row["seats"], ">=", 2)
        or compare(row["trip"], "starts with", claims["origin"]),
        [Claimed("origin", "trip", "string", False)], {"seats", "trip"},
    )  # fmt: skip
    rules["r1"]["trainHistory"] = Rule(
        "station in claims.stations",
        lambda row, claims: row["station"] in claims["stations"],
        [Claimed("stations", "station", "string", True)], {"station"},
    )  # fmt: skip
    grants["r1"] |= {"customerTotals", "latestBooking", "timetable", "trainHistory"}
    rules["r2"]["hourlyRevenue"] = Rule(
        "bookings >= 2", lambda row, _: row["bookings"] >= 2, fields={"bookings"}
    )
    grants["r2"].add("hourlyRevenue")
    with project.path.open("a") as file:
        file.write(auth_table(rules, grants))
    served.project = served.nodes.project = projects.load(project.path)
    os.environ[SECRET_ENV] = SECRET
    try:
        for node_id in served.nodes.ids:
            served.nodes.start(node_id)
    finally:
        del os.environ[SECRET_ENV]
    yield Setup(served, rows, grants, rules, makers)
    served.nodes.stop_all()


@dataclass
class Token:
    roles: set[str]
    claims: dict[str, Any]

    @property
    def headers(self) -> dict[str, str]:
        payload = {"sub": "fuzz", "exp": int(time.time()) + 600, "roles": sorted(self.roles),
                   **{k: v for k, v in self.claims.items() if v is not None}}  # fmt: skip
        return {"Authorization": f"Bearer {jwt.encode(payload, SECRET, algorithm='HS256')}"}


def random_token(setup: Setup, rng: random.Random) -> Token:
    roles = set(rng.sample(ROLES, rng.choice([1, 1, 2])))
    claims: dict[str, Any] = {}
    for rules in setup.rules.values():
        for store, rule in rules.items():
            for claimed in rule.claims:
                claims[claimed.name] = setup.makers[store].claim_value(claimed)
    customers = [r["key"] for r in setup.rows["customerTotals"]]
    claims["customer"] = rng.choice(customers)
    claims["origin"] = rng.choice(["Berlin", "Hamburg", "Köln", "Z"])
    claims["stations"] = rng.sample(["Berlin", "Hamburg", "München", "Köln", "Zürich"], 2)
    return Token(roles, claims)


def ask(setup: Setup, node: str, token: Token, query: str, variables: dict | None = None) -> Any:
    body = setup.served.nodes.gql(node, query, variables, token.headers)
    assert not body.get("errors"), body["errors"]
    return body["data"]


def readable(setup: Setup, token: Token) -> list[str]:
    return sorted(s for role in token.roles for s in setup.grants[role])


# -- the cases -------------------------------------------------------------------------------


def test_lookups_and_batches_show_a_withheld_key_as_forbidden(setup: Setup) -> None:
    """Present keys inside and outside the rules, and absent keys; a join's record passes
    the joined store's rules (or is null)."""
    rng, nodes = random.Random("lookups"), itertools.cycle(NODES)
    seen: set[str] = set()  # the outcomes met: the cases must cover each
    for _ in range(30):
        token = random_token(setup, rng)
        for name in [s for s in KEYED if s in readable(setup, token)]:
            store = setup.served.project.stores[name]
            rows = {r["key"]: r for r in setup.rows[name]}
            keys = rng.sample(sorted(rows, key=str), min(8, len(rows)))
            keys += ["no such key", "", "Zz"] if store.key_type == "string" else [424242, -5]
            join = " journey { key route fare }" if name == "latestBooking" else ""
            kind = "String" if store.key_type == "string" else "Int"
            query = (f"query($keys: [{kind}!]!) {{ {name}Batch(keys: $keys) {{ entries {{ key "
                     f"failure record {{ {selection(store)}{join} }} }} }} }}")  # fmt: skip
            entries = ask(setup, next(nodes), token, query, {"keys": keys})[f"{name}Batch"]
            visible = setup.visible(name, token.claims, token.roles)
            by_key = setup.by_key(name, token.claims, token.roles)
            for key, entry in zip(keys, entries["entries"], strict=True):
                row = rows.get(key)
                shown = visible(row) if row else not by_key or visible({"key": key})
                assert entry["failure"] == (None if shown else "FORBIDDEN"), (name, key)
                seen.add("absent" if row is None else "shown" if shown else "withheld")
                seen.add("joined" if join and shown and row and entry["record"]["journey"] else "")
                if not shown or row is None:
                    assert entry["record"] is None, (name, key)
                    continue
                assert as_row(store, entry["record"]) == pytest.approx(
                    tuple(row[f] for f in fields_of(store))
                )
                if join:
                    check_journey(setup, token, row, entry["record"]["journey"])
            one = (f"query($k: {kind}!) {{ {name}(key: $k) {{ failure record {{ "
                   f"{selection(store)} }} }} }}")  # fmt: skip
            for key, entry in list(zip(keys, entries["entries"], strict=True))[:3]:
                alone = ask(setup, next(nodes), token, one, {"k": key})[name]  # the key's path
                assert alone["failure"] == entry["failure"], (name, key)
                assert (alone["record"] is None) == (entry["record"] is None), (name, key)
    assert seen >= {"absent", "shown", "withheld", "joined"}, seen


def check_journey(setup: Setup, token: Token, booking: Row, journey: Any) -> None:
    trips = {r["key"]: r for r in setup.rows["timetable"]}
    trip = trips.get(booking["trip"])
    readable_trip = "timetable" in readable(setup, token) and trip is not None
    if readable_trip and setup.visible("timetable", token.claims, token.roles)(trip):
        assert journey == {"key": trip["key"], "route": trip["route"],
                           "fare": pytest.approx(trip["fare"])}  # fmt: skip
        return
    assert journey is None, (booking, journey)


def test_by_value_pages_and_totals_count_only_visible_rows(setup: Setup) -> None:
    rng, nodes = random.Random("pages"), itertools.cycle(NODES)
    narrowed = 0  # cases whose rules withheld some rows, and left some
    for _ in range(12):
        token = random_token(setup, rng)
        for name in [s for s in (*KEYED, *WINDOWED) if s in readable(setup, token)]:
            store = setup.served.project.stores[name]
            visible = setup.visible(name, token.claims, token.roles)
            rows = [r for r in setup.rows[name] if visible(r)]
            narrowed += 0 < len(rows) < len(setup.rows[name])
            where = random_filter(rng, store, setup.rows[name]) if rng.random() < 0.6 else None
            kept = [r for r in rows if holds(r, where or {})]
            order = random_order(rng, store)
            ids = ("key", "window_start") if store.kind == "window" else ("key",)
            expected = [tuple(r[f] for f in r) for r in ordered(kept, order, ids)]
            node = next(nodes)
            first = rng.choice([3, 50])
            if len(expected) // first > 40:
                first = 500  # pages enough to cross cursors, not hundreds of requests
            got = list_all(setup, node, token, store, where, order, first)
            same_rows(got, expected)
            totals = ask(setup, node, token, aggregate_query(store),
                         {"where": where, **span(store)[2]})[f"{name}Aggregate"]  # fmt: skip
            same_totals(read_totals(store, totals), expected_totals(store, kept))
    assert narrowed >= 10, narrowed


def list_all(setup: Setup, node: str, token: Token, store: Store, where: dict | None,
             order: list, first: int) -> list[tuple]:  # fmt: skip
    kind = store.name[0].upper() + store.name[1:]
    definitions, arguments, bounds = span(store)
    query = (
        f"query({definitions}$where: {kind}Filter, $orderBy: [{kind}OrderBy!], $first: Int!, "
        f"$after: String) {{ {store.name}List({arguments}where: $where, orderBy: $orderBy, "
        f"first: $first, after: $after) {{ records {{ {selection(store)} }} pageInfo "
        f"{{ hasNextPage endCursor }} }} }}"
    )
    variables = {"where": where, "orderBy": [enum_value(*o) for o in order], "first": first,
                 "after": None, **bounds}  # fmt: skip
    return paged(setup, node, token, query, variables, f"{store.name}List", store)


def paged(setup: Setup, node: str, token: Token, query: str, variables: dict, name: str,
          store: Store, records: str = "records") -> list[tuple]:  # fmt: skip
    """Every page, through its cursors: full pages until the last (the rules are part of
    the partitions' filter, so no page comes short)."""
    got: list[tuple] = []
    for _ in range(500):
        page = ask(setup, node, token, query, variables)[name]
        got += [as_row(store, r) for r in page[records]]
        if not page["pageInfo"]["hasNextPage"]:
            return got
        assert len(page[records]) == variables["first"]
        variables = {**variables, "after": page["pageInfo"]["endCursor"]}
    raise AssertionError("more than 500 pages")


def same_totals(got: dict[str, Any], expected: dict[str, Any]) -> None:
    assert got.keys() == expected.keys()
    for name, value in expected.items():
        if isinstance(value, float):
            assert math.isclose(got[name], value, rel_tol=1e-9), name
        else:
            assert got[name] == value, name


def test_key_ranges_prefixes_and_windows_of_every_key_skip_withheld_rows(setup: Setup) -> None:
    rng, nodes = random.Random("scans"), itertools.cycle(NODES)
    for _ in range(8):
        token = random_token(setup, rng)
        for name in [s for s in (*KEYED, *WINDOWED) if s in readable(setup, token)]:
            store = setup.served.project.stores[name]
            visible = setup.visible(name, token.claims, token.roles)
            rows = sorted((r for r in setup.rows[name] if visible(r)),
                          key=lambda r: (r["key"], r.get("window_start", 0)))  # fmt: skip
            as_tuples = [tuple(r.values()) for r in rows]
            first = rng.choice([7, 60])
            if store.kind == "window":
                query = (f'query($first: Int!, $after: String) {{ {name}All(from: '
                         f'"{WIDE["from"]}", to: "{WIDE["to"]}", first: $first, after: $after) '
                         f"{{ records {{ {selection(store)} }} {PAGE_INFO} }} }}")  # fmt: skip
                got = paged(setup, next(nodes), token, query, {"first": first, "after": None},
                            f"{name}All", store)  # fmt: skip
                same_rows(got, as_tuples)
                continue
            keys = sorted(r["key"] for r in setup.rows[name])
            low, high = sorted(rng.sample(keys, 2))
            kind = "String" if store.key_type == "string" else "Int"
            query = (f"query($from: {kind}, $to: {kind}, $first: Int!, $after: String) {{ "
                     f"{name}Range(from: $from, to: $to, first: $first, after: $after) {{ "
                     f"records {{ {selection(store)} }} {PAGE_INFO} }} }}")  # fmt: skip
            variables = {"from": low, "to": high, "first": first, "after": None}
            got = paged(setup, next(nodes), token, query, variables, f"{name}Range", store)
            same_rows(got, [t for t in as_tuples if low <= t[0] <= high])
            if store.key_type == "string":
                prefix = rng.choice(keys)[:1]
                query = (f"query($p: String!, $first: Int!, $after: String) {{ {name}Prefix("
                         f"prefix: $p, first: $first, after: $after) {{ records {{ "
                         f"{selection(store)} }} {PAGE_INFO} }} }}")  # fmt: skip
                variables = {"p": prefix, "first": first, "after": None}
                got = paged(setup, next(nodes), token, query, variables, f"{name}Prefix", store)
                same_rows(got, [t for t in as_tuples if t[0].startswith(prefix)])


def test_a_keys_windows_and_versions_pass_the_rules_or_say_forbidden(setup: Setup) -> None:
    rng, nodes = random.Random("one key"), itertools.cycle(NODES)
    history = oracle.expected_history(setup.served.project, "trainHistory")
    store = setup.served.project.stores["trainHistory"]
    fields = list(fields_of(store))
    met: set[str] = set()  # what the cases covered
    for _ in range(25):
        token = random_token(setup, rng)
        names = readable(setup, token)
        for name in [s for s in WINDOWED if s in names]:
            windowed = setup.served.project.stores[name]
            visible = setup.visible(name, token.claims, token.roles)
            key = rng.choice([r["key"] for r in setup.rows[name]])
            mine = sorted((r for r in setup.rows[name] if r["key"] == key),
                          key=lambda r: r["window_start"])  # fmt: skip
            low, high = iso(mine[0]["window_start"]), iso(mine[-1]["window_start"])
            query = (f'query($k: {"String" if windowed.key_type == "string" else "Int"}!) {{ '
                     f'{name}(key: $k, from: "{low}", to: "{high}") {{ failure '
                     f"windows {{ {selection(windowed)} }} }} }}")  # fmt: skip
            got = ask(setup, next(nodes), token, query, {"k": key})[name]
            shown = [r for r in mine if visible(r)]
            by_key = setup.by_key(name, token.claims, token.roles)
            withheld = len(shown) < len(mine) or (by_key and not visible({"key": key}))
            assert got["failure"] == ("FORBIDDEN" if withheld else None), (name, key)
            met.add(f"windows {'withheld' if withheld else 'shown' if mine else 'none'}")
            met.add("windows withheld by value" if withheld and not by_key else "")
            want = [] if by_key and withheld else [tuple(r.values()) for r in shown]
            same_rows([as_row(windowed, w) for w in got["windows"]], want)
        if "trainHistory" not in names:
            continue
        visible = setup.visible("trainHistory", token.claims, token.roles)
        by_key = setup.by_key("trainHistory", token.claims, token.roles)
        part = rng.choice([h for h in history.values() if h.versions])
        key = rng.choice(sorted(part.versions))
        assert part.horizon_ms is not None
        versions = part.between(key, part.horizon_ms, 2**62)
        as_dict = [dict(zip(fields, v.row or (), strict=True)) for v in versions]
        kept = [of(v) for v, row in zip(versions, as_dict, strict=True) if visible(row)]
        withheld = len(kept) < len(versions) or (by_key and not visible({"key": key}))
        version = VERSION.format(fields=selection(store))
        query = (
            f"query($k: Int!, $after: String) {{ trainHistoryHistory(key: $k, first: 2, "
            f"after: $after) {{ failure versions {{ {version} }} {PAGE_INFO} }} }}"
        )
        got, variables, failures = [], {"k": key, "after": None}, set()
        node = next(nodes)
        for _ in range(200):
            page = ask(setup, node, token, query, variables)["trainHistoryHistory"]
            failures.add(page["failure"])
            got += [as_version(setup.served, v) for v in page["versions"]]
            if not page["pageInfo"]["hasNextPage"]:
                break
            variables["after"] = page["pageInfo"]["endCursor"]
        assert got == ([] if by_key and withheld else kept), key
        if by_key and withheld:  # not a page more: nothing tells how many versions it has
            assert variables["after"] is None, key
        assert ("FORBIDDEN" in failures) == withheld, (key, failures)
        met.add(f"history {'withheld' if withheld else 'shown' if kept else 'none'}")
        met.add("history withheld by value" if withheld and not by_key else "")
        if versions:
            at = versions[-1].valid_from
            query = (f'query($k: Int!) {{ trainHistoryAsOf(key: $k, asOf: "{iso(at)}") {{ '
                     f"failure version {{ {version} }} }} }}")  # fmt: skip
            found = ask(setup, next(nodes), token, query, {"k": key})["trainHistoryAsOf"]
            shown = visible(as_dict[-1]) and not (by_key and not visible({"key": key}))
            assert found["failure"] == (None if shown else "FORBIDDEN"), key
            want = of(versions[-1]) if shown else None
            assert (found["version"] and as_version(setup.served, found["version"])) == want
    assert met >= {"windows withheld", "windows shown", "history withheld", "history shown",
                   "windows withheld by value", "history withheld by value"}, met  # fmt: skip


def test_a_subscription_sees_only_its_tokens_rows(setup: Setup) -> None:
    """Two sockets, two customers, the same documents: each gets its own row alone."""
    rows = sorted(setup.rows["customerTotals"], key=lambda r: -r["bookings"])[:2]
    sockets = []
    try:
        for row, node in zip(rows, NODES, strict=False):
            token = Token({"r1"}, {"customer": row["key"]})
            socket = Socket(setup.served.nodes.url(node), token.headers)
            sockets.append(socket)
            socket.subscribe(
                "page", "subscription { customerTotalsList { records { key bookings } } }"
            )
            socket.subscribe("count", "subscription { customerTotalsAggregate { totalCount } }")
            page, count = socket.next_of("page"), socket.next_of("count")
            assert "errors" not in page and "errors" not in count, (page, count)
            records = page["data"]["customerTotalsList"]["records"]
            assert records == [{"key": row["key"], "bookings": wire.sent(row["bookings"])}]
            assert wire.long(count["data"]["customerTotalsAggregate"]["totalCount"]) == 1
    finally:
        for socket in sockets:
            socket.close()


def test_entities_of_withheld_keys_are_forbidden_at_their_place(setup: Setup) -> None:
    mine, other = sorted(setup.rows["customerTotals"], key=lambda r: r["key"])[:2]
    token = Token({"r1"}, {"customer": mine["key"]})
    query = ("query($r: [_Any!]!) { _entities(representations: $r) { "
             "... on CustomerTotals { key bookings } } }")  # fmt: skip
    representations = [{"__typename": "CustomerTotals", "key": k}
                       for k in (mine["key"], other["key"], "no such customer")]  # fmt: skip
    body = setup.served.nodes.gql("node2", query, {"r": representations}, token.headers)
    assert body["data"]["_entities"][0] == {"key": mine["key"],
                                            "bookings": wire.sent(mine["bookings"])}  # fmt: skip
    assert body["data"]["_entities"][1:] == [None, None]
    codes = {tuple(e["path"]): e["extensions"]["code"] for e in body["errors"]}
    assert codes == {("_entities", 1): "FORBIDDEN", ("_entities", 2): "FORBIDDEN"}


def test_a_token_without_the_claims_reads_no_row(setup: Setup) -> None:
    token = Token({"r1"}, {})
    got = ask(setup, "node1", token, "{ customerTotalsAggregate { totalCount } "
              "customerTotalsList { records { key } } }")  # fmt: skip
    assert wire.long(got["customerTotalsAggregate"]["totalCount"]) == 0
    assert got["customerTotalsList"]["records"] == []
