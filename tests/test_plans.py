"""The compiled path (and a compiled one-key read's KeyLookup) and the general path give
identical responses.

Documents are generated from the real generated schema: random root fields of every store
with random aliases, selections, fragments, literal or variable arguments (real keys, missing
keys, and inputs that raise coded errors). Each is sent over HTTP twice: as generated (a
compiled plan answers it when one covers it) and with a trailing comment holding "@" (the node
leaves any text with a directive to graphql-core's general path); data, errors with their
paths and codes, and extensions must be equal.
"""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta
from typing import Any

import graphql
import httpx
import pytest
from graphql import (
    GraphQLField,
    GraphQLInputObjectType,
    GraphQLInputType,
    GraphQLList,
    GraphQLNamedType,
    GraphQLNonNull,
    GraphQLObjectType,
    GraphQLOutputType,
    GraphQLScalarType,
    get_named_type,
    is_enum_type,
    is_leaf_type,
)
from prometheus_client.parser import text_string_to_metric_families

from contracts import names
from contracts.cluster_secret import SECRET_HEADER
from contracts.partitioner import partition_for
from gateway.model.queries import Get, SubQuery
from gateway.runtime.lanes import SLICE
from gateway.wire.protocol import decode_answers, encode_request
from resolvers.execution.executors import Compiled
from resolvers.execution.operations import Operations
from resolvers.execution.persisted import Source, sha256
from resolvers.execution.plans import compile_plan
from resolvers.schema.build import build_schema
from tests import oracle

CLOCKED = ("newestRecordAgeMs",)  # never aliased by the generator: found by name
DOCUMENTS = 240
GENERAL = " # @ general path"
KNOWN = ("stategate_graphql_read_at_once", "stategate_graphql_read_routed")  # the known reads'
GRAPHQL_RESPONSE = "application/graphql-response+json"
DAY = datetime(2026, 1, 1, tzinfo=UTC)


class Documents:
    """A random document generator over one schema, with keys taken from the served data."""

    def __init__(self, served: Any, rng: random.Random) -> None:
        self.schema = build_schema(served.project)._schema
        self.rng = rng
        self.keys: dict[str, list[Any]] = {}
        for name in served.project.stores:
            rows = [
                r for part in oracle.expected_store(served.project, name).values() for r in part
            ]
            self.keys[name] = sorted({r[0] for r in rows}, key=str)
        self.fragments: list[str] = []
        self.variables: dict[str, Any] = {}
        self.definitions: list[str] = []

    def document(self) -> tuple[str, dict[str, Any]]:
        self.fragments, self.variables, self.definitions = [], {}, []
        query = self.schema.query_type
        assert query is not None
        names = [n for n in query.fields if n not in ("stores", "cluster")]
        parts = []
        for i in range(self.rng.choice([1, 1, 2, 3])):
            name = self.rng.choice(names)
            alias = f"a{i}: " if i or self.rng.random() < 0.3 else ""
            parts.append(alias + self.field(name, query.fields[name], store=name))
        if self.rng.random() < 0.1:
            parts.append("__typename")
        variables = f"({', '.join(self.definitions)})" if self.definitions else ""
        text = f"query Q{variables} {{ {' '.join(parts)} }}"
        return "\n".join([text, *self.fragments]), self.variables

    def field(self, name: str, field: GraphQLField, store: str = "") -> str:
        arguments = []
        for arg_name, arg in field.args.items():
            required = isinstance(arg.type, GraphQLNonNull)
            if not required and self.rng.random() < 0.6:
                continue
            value = self.value(arg_name, arg.type, _store(store))
            if self.rng.random() < 0.5:
                variable = f"v{len(self.definitions)}"
                self.definitions.append(f"${variable}: {arg.type}")
                self.variables[variable] = value
                arguments.append(f"{arg_name}: ${variable}")
            else:
                arguments.append(f"{arg_name}: {_literal(value, arg.type)}")
        args = f"({', '.join(arguments)})" if arguments else ""
        return f"{name}{args}{self.selection(field.type)}"

    def selection(self, output: GraphQLOutputType) -> str:
        named = get_named_type(output)
        if is_leaf_type(named):
            return ""
        assert isinstance(named, GraphQLObjectType)
        names = list(named.fields)
        chosen = self.rng.sample(names, self.rng.randint(1, len(names)))
        parts = []
        for i, name in enumerate(chosen):
            alias = f"x{i}: " if self.rng.random() < 0.15 and name not in CLOCKED else ""
            parts.append(alias + name + self.selection(named.fields[name].type))
        if self.rng.random() < 0.1:
            parts.append("__typename")
        roll = self.rng.random()
        if roll < 0.1:
            return f" {{ ... on {named.name} {{ {' '.join(parts)} }} }}"
        if roll < 0.2:
            fragment = f"F{len(self.fragments)}"
            self.fragments.append(f"fragment {fragment} on {named.name} {{ {' '.join(parts)} }}")
            return f" {{ ...{fragment} }}"
        return f" {{ {' '.join(parts)} }}"

    def value(self, name: str, kind: GraphQLInputType, store: str) -> Any:
        rng = self.rng
        inner = kind.of_type if isinstance(kind, GraphQLNonNull) else kind
        if name in ("key", "prefix") or (name in ("from", "to") and _scalar(inner) != "DateTime"):
            key = self.key(store)
            if name == "prefix":
                return str(key)[: rng.randint(0, 4)]
            return key
        if name == "keys":
            return [self.key(store) for _ in range(rng.choice([0, 1, 3, 12]))]
        if name in ("from", "to", "asOf"):
            start = DAY + timedelta(hours=rng.randint(-30, 200))
            return start.isoformat()
        if name == "first":
            return rng.choice([1, 2, 5, 40, 0, -1])
        if name == "after":
            return rng.choice(["garbage", "", "eyJ4IjoxfQ"])
        if name == "partitions":
            return rng.sample(range(12), rng.randint(0, 3))
        if name == "consistency":
            assert isinstance(get_named_type(inner), GraphQLInputObjectType)
            return rng.choice(
                [
                    {"requireActive": True},
                    {"maxLag": 0},
                    {"token": "nonsense"},
                    {"maxAgeMs": 10**12},
                    {},
                ]
            )
        if name == "orderBy":
            named = get_named_type(inner)
            assert is_enum_type(named)
            return rng.sample(list(named.values), rng.choice([0, 1, 1, 2]))  # type: ignore[attr-defined]
        if name == "where":
            return self.where(get_named_type(inner), store, 0)
        raise AssertionError(f"no value for argument {name}")

    def where(self, filter_type: Any, store: str, depth: int) -> dict[str, Any]:
        """A random filter: conditions on random fields (a null operand now and then, which
        is refused), and a random combinator."""
        rng = self.rng
        fields = [f for f in filter_type.fields if f not in ("and", "or", "not")]
        where: dict[str, Any] = {}
        for field in rng.sample(fields, rng.choice([0, 1, 1, 2])):
            condition_type = get_named_type(filter_type.fields[field].type)
            op = rng.choice(list(condition_type.fields))
            scalar = _scalar(condition_type.fields[op].type)
            one = self.key(store) if field == "key" else _operand(rng, scalar)
            if rng.random() < 0.05:
                one = None
            where[field] = {op: [one, one] if op == "in" else rng.random() < 0.5 if op == "isNull"
                            else one}  # fmt: skip
        if depth < 2 and rng.random() < 0.2:
            combinator = rng.choice(["and", "or", "not"])
            inner = self.where(filter_type, store, depth + 1)
            where[combinator] = inner if combinator == "not" else [inner]
        return where

    def key(self, store: str) -> Any:
        keys = self.keys.get(store) or [0]
        if self.rng.random() < 0.75:
            return self.rng.choice(keys)
        return "zz-missing" if isinstance(keys[0], str) else 987_654_321


def _store(field_name: str) -> str:
    for suffix in ("Batch", "Range", "Prefix", "All", "List", "Aggregate"):
        if field_name.endswith(suffix):
            return field_name[: -len(suffix)]
    return field_name


def _operand(rng: random.Random, scalar: str) -> Any:
    match scalar:
        case "String":
            return rng.choice(["", "C0", "Köln", "Z", "zz"])
        case "Int":
            return rng.choice([0, 1, 3, -1, 2**31 - 1])
        case "Long":
            return str(rng.choice([0, 2, 10**12]))
        case "Float":
            return rng.choice([0.0, 99.5, 150, -1.5])
        case "Boolean":
            return rng.random() < 0.5
    raise AssertionError(scalar)


def _scalar(kind: GraphQLInputType) -> str:
    named: GraphQLNamedType = get_named_type(kind)
    return named.name if isinstance(named, GraphQLScalarType) else ""


def _literal(value: Any, kind: GraphQLInputType) -> str:
    inner = kind.of_type if isinstance(kind, GraphQLNonNull) else kind
    if value is None:
        return "null"
    if isinstance(inner, GraphQLList):
        return "[" + ", ".join(_literal(v, inner.of_type) for v in value) + "]"
    if isinstance(inner, GraphQLInputObjectType):
        fields = (f"{k}: {_literal(v, inner.fields[k].type)}" for k, v in value.items())
        return "{" + ", ".join(fields) + "}"
    if is_enum_type(inner):
        return str(value)
    return json.dumps(value, ensure_ascii=False)


def comparable(response: dict[str, Any]) -> dict[str, Any]:
    """A response without what differs between two runs of the same request (timings, ages
    read off the clock: checked for shape only), with errors in path order (the order of
    concurrent root fields' errors is not specified)."""
    out = unclocked(response)
    routing = (out.get("extensions") or {}).get("routing")
    if routing is not None:
        out["extensions"] = {**out["extensions"], "routing": {**routing, "millis": 0}}
    if "errors" in out:
        out["errors"] = sorted(out["errors"], key=lambda e: json.dumps(e.get("path")))
    return out


def unclocked(value: Any) -> Any:
    """`value` with each CLOCKED field's value (a decimal Long, or null) made "clocked"."""
    if isinstance(value, list):
        return [unclocked(item) for item in value]
    if not isinstance(value, dict):
        return value
    out = {}
    for key, item in value.items():
        if key in CLOCKED:
            assert item is None or (isinstance(item, str) and item.isdigit()), (key, item)
            item = "clocked"
        out[key] = unclocked(item)
    return out


@pytest.mark.parametrize("node", ["node1", "node3"])
def test_compiled_and_general_paths_answer_alike(served: Any, node: str) -> None:
    rng = random.Random(7 if node == "node1" else 8)
    documents = Documents(served, rng)
    schema = build_schema(served.project)
    client, url = served.nodes.client, f"{served.nodes.url(node)}/graphql"
    planned = errors = 0
    for _ in range(DOCUMENTS):
        query, variables = documents.document()
        planned += compile_plan(schema, graphql.parse(query), None) is not None
        fast = client.post(url, json={"query": query, "variables": variables})
        general = client.post(url, json={"query": query + GENERAL, "variables": variables})
        assert (fast.status_code, fast.headers["content-type"]) == (
            general.status_code,
            general.headers["content-type"],
        ), query
        answer = fast.json()
        assert comparable(answer) == comparable(general.json()), (query, variables)
        errors += bool(answer.get("errors"))
    assert planned > DOCUMENTS * 0.8, "most generated documents must take the compiled path"
    assert DOCUMENTS * 0.1 < errors < DOCUMENTS * 0.9, "both answers and errors are compared"


@pytest.mark.parametrize("node", ["node1", "node3"])
def test_key_reads_answer_as_the_plan_does(served: Any, node: str) -> None:
    """A document whose root fields each read the record of one key, one field or several
    aliased (of one store or several, a key asked twice), is answered in one step
    (resolvers/execution/key_lookup.py): a one-field document where the node reads that
    key's partition at once, by the plan elsewhere; either way as the general path answers
    it, present keys and missing ones, variables and literals, global stores, joins (left to
    the plan) included. Sent again, a one-field document the node prepared before is
    answered from its bytes (resolvers/transport/known.py), from memory where it reads the
    key at once and through the router where another node serves it, by its text or by its
    persisted hash, POSTed or in a GET's parameters: as the general path answers it too, in
    either media type."""
    rng = random.Random(11 if node == "node1" else 12)
    documents = Documents(served, rng)
    operations = Operations(build_schema(served.project), served.project.settings)
    query_type = documents.schema.query_type
    assert query_type is not None
    stores = [s for s in served.project.stores.values() if s.kind != "window"]
    client, url = served.nodes.client, f"{served.nodes.url(node)}/graphql"
    looked_up = several = 0
    at_once, routed = (counted(served, node, family) for family in KNOWN)
    for _ in range(DOCUMENTS // 2):
        documents.fragments = []
        declared, fields, variables = [], [], {}
        for number in range(rng.choice([1, 1, 2, 3, 6])):
            if number == 0 or rng.random() < 0.8:  # else the key the last field asked, again
                store = rng.choice(stores)
                key = documents.key(store.name)
            name = names.root_fields(store)["lookup"]
            field = query_type.fields[name]
            selection, alias = documents.selection(field.type), f"f{number}: "
            if rng.random() < 0.6:
                declared.append(f"$k{number}: {field.args['key'].type}")
                fields.append(f"{alias}{name}(key: $k{number}){selection}")
                variables[f"k{number}"] = key
            else:
                literal = _literal(key, field.args["key"].type)
                fields.append(f"{alias}{name}(key: {literal}){selection}")
        signature = f"query Q({', '.join(declared)})" if declared else "query Q"
        text = f"{signature} {{ {' '.join(fields)} }}"
        query = "\n".join([text, *documents.fragments])
        executor = operations.prepare(Source(query, None), variables).executor
        keyed = isinstance(executor, Compiled) and executor.key is not None
        looked_up += keyed
        several += keyed and len(fields) > 1
        accept = {"accept": rng.choice([GRAPHQL_RESPONSE, "application/json"])}
        request = {"query": query, "variables": variables, "operationName": "Q"}
        repeated = request
        if rng.random() < 0.5:  # as Apollo's persisted queries: the text and its hash, then it
            hashed = {"extensions": {"persistedQuery": {"version": 1, "sha256Hash": sha256(query)}}}
            request = {**request, **hashed}
            repeated = {**hashed, "variables": variables, "operationName": "Q"}
        if rng.random() < 0.3:  # GET, each entry a parameter (variables, extensions: JSON)
            fast = client.get(url, params=as_params(request), headers=accept)
            again = client.get(url, params=as_params(repeated), headers=accept)
        else:
            fast = client.post(url, json=request, headers=accept)
            again = client.post(url, json=repeated, headers=accept)
        general = client.post(
            url, json={"query": query + GENERAL, "variables": variables}, headers=accept
        )
        for answer in (fast, again):
            assert answer.status_code == general.status_code == 200, query
            assert answer.headers["content-type"] == general.headers["content-type"]
            assert comparable(answer.json()) == comparable(general.json()), (query, variables)
    assert looked_up > DOCUMENTS // 4, "most of these documents are key reads"
    assert several > DOCUMENTS // 12, "many of them of several fields"
    assert counted(served, node, KNOWN[0]) - at_once > DOCUMENTS // 20, "memory at once ran"
    assert counted(served, node, KNOWN[1]) - routed > DOCUMENTS // 40, "the routed read ran"


CLOCKED_HEADERS = ("date", "connection", "content-length")  # the length: of the answer's millis


def test_a_read_the_protocol_answers_has_the_apps_headers(served: Any) -> None:
    """A known read a node answers from memory is written by the HTTP server's protocol
    (stategate/inline.py) on a kept-alive connection, and by the app on one the client
    closes: the same status, headers (the date and the close aside) and body."""
    store = next(s for s in served.project.stores.values() if s.kind == "table")
    documents = Documents(served, random.Random(5))
    field = names.root_fields(store)["lookup"]
    key_type = documents.schema.query_type.fields[field].args["key"].type  # type: ignore[union-attr]
    query = f"query K($k: {key_type}) {{ {field}(key: $k) {{ key }} }}"
    url = f"{served.nodes.url('node1')}/graphql"
    at_once = counted(served, "node1", KNOWN[0])
    with httpx.Client() as kept, httpx.Client() as closing:
        for key in documents.keys[store.name][:30]:
            request = {"query": query, "variables": {"k": key}}
            kept.post(url, json=request)  # prepared: the next one is known
            close = {"connection": "close"}
            answers = [kept.post(url, json=request), closing.post(url, json=request, headers=close)]
            inline, app = (
                {k: v for k, v in a.headers.items() if k not in CLOCKED_HEADERS} for a in answers
            )
            assert (answers[0].status_code, inline) == (answers[1].status_code, app)
            assert comparable(answers[0].json()) == comparable(answers[1].json()), key
            assert answers[1].headers["connection"] == "close"
    assert counted(served, "node1", KNOWN[0]) - at_once > 10, "node1 read some at once"


def test_a_peer_read_the_protocol_answers_is_the_apps(served: Any) -> None:
    """A peer's sub-queries a node reads from memory at once (a hop's other end) are
    answered by the HTTP server's protocol on a kept-alive connection, and by the app's
    /internal/query on one the client closes: the same status, headers and answers; for
    a few keys, and for more than a SLICE of them (small bulk work, read at once when no
    other request is in flight)."""
    project = served.project
    store = next(s for s in project.stores.values() if s.kind == "table")
    keys = Documents(served, random.Random(6)).keys[store.name][:40]
    url = f"{served.nodes.url('node1')}/internal/query"
    secret = {SECRET_HEADER: project.cluster.secret, "content-type": "application/json"}
    close = {**secret, "connection": "close"}
    bodies = []
    for number in range(0, len(keys), 4):
        asked = [(k, partition_for(k, store.key_type, project.cluster.partitions))
                 for k in keys[number : number + 4]]  # fmt: skip
        bodies.append(
            encode_request(
                [SubQuery(i, p, store.name, Get((k,))) for i, (k, p) in enumerate(asked)]
            )
        )
    partitions = project.cluster.partitions
    absent = tuple(f"absent-{n}" for n in range(SLICE))
    for partition in range(partitions):  # more than a SLICE: its keys, and some it has not
        ones = tuple(k for k in keys if partition_for(k, store.key_type, partitions) == partition)
        bodies.append(encode_request([SubQuery(0, partition, store.name, Get(ones + absent))]))
    read = 0
    with httpx.Client() as kept, httpx.Client() as closing:
        for body in bodies:
            answers = [kept.post(url, content=body, headers=secret),
                       closing.post(url, content=body, headers=close)]  # fmt: skip
            inline, app = (
                {k: v for k, v in a.headers.items() if k not in ("date", "connection")}
                for a in answers
            )
            assert (answers[0].status_code, inline) == (answers[1].status_code, app)
            assert answers[0].content == answers[1].content
            read += sum(bool(a.rows) for a in decode_answers(answers[0].content))
    assert read > 5, "node1 read some of the keys itself"


def as_params(request: dict[str, Any]) -> dict[str, str]:
    """A request's entries as GET's URL parameters."""
    return {k: v if isinstance(v, str) else json.dumps(v) for k, v in request.items()}


def counted(served: Any, node: str, name: str) -> float:
    """A counter of the node's, all its workers'."""
    exposition = served.nodes.client.get(f"{served.nodes.url(node)}/metrics").text
    for family in text_string_to_metric_families(exposition):
        if family.name == name:
            return sum(sample.value for sample in family.samples if sample.name.endswith("_total"))
    raise AssertionError(f"no {name} in /metrics")
