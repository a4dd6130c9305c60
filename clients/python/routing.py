"""Routing for the typed client: a query that reads by key goes straight to a replica of the
key's partition, skipping the hop a node makes for a key it does not hold (README: Routing
clients). As Kafka Streams' metadata-aware clients do, with the partition map any node serves
on GET /cluster and the partitioner of Kafka's Java client.

    transport = RoutingTransport(["http://127.0.0.1:8101", "http://127.0.0.1:8102"])
    async with StategateClient(url=..., http_client=httpx.AsyncClient(transport=transport)):

Routing only chooses where a request goes; any node answers any query, so a stale map or a
query the client cannot route costs a hop, never an answer:
- A request whose root fields read by key (the map's routes: customerTotals(key:),
  customerTotalsBatch(keys:), ...) goes to the node holding most of their partitions, the
  active replica first; anything else to the URL the client was given.
- A node that cannot be reached is skipped for DOWN_FOR_S, the request sent to the next
  replica and then any node, and the map read again.
- Every answer names the placement version its node knows (the stategate-assignment header):
  a newer one than the map's has the map read again before the next request.

Only httpx, graphql-core (to find the keys in a query) and the standard library: the module is
copied into the generated package (ariadne-codegen's files_to_include).
"""

from __future__ import annotations

import asyncio
import json
import struct
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import httpx
from graphql import (
    DocumentNode,
    FieldNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    InlineFragmentNode,
    OperationDefinitionNode,
    SelectionSetNode,
    ValueNode,
    VariableNode,
    parse,
    value_from_ast_untyped,
)
from graphql.error import GraphQLError

ASSIGNMENT_HEADER = "stategate-assignment"  # the placement version the answering node knows
DOWN_FOR_S = 5.0  # how long a node that could not be reached is skipped
PARSED_DOCUMENTS = 256  # distinct query texts whose keys' places are kept parsed
# Safe to send again elsewhere: the request did not arrive, or its answer did not.
FAILOVER_ERRORS = (httpx.NetworkError, httpx.RemoteProtocolError, httpx.ConnectTimeout)
_M, _SEED, _MASK = 0x5BD1E995, 0x9747B28C, 0xFFFFFFFF
_INT_RANGE, _LONG_RANGE = (-(2**31), 2**31 - 1), (-(2**63), 2**63 - 1)


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (seed 0x9747b28c), as the unsigned 32 bits of Java's int."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    whole = length & ~3
    for (k,) in struct.iter_unpack("<I", data[:whole]):
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    tail = length & 3
    if tail == 3:
        h ^= data[whole + 2] << 16
    if tail >= 2:
        h ^= data[whole + 1] << 8
    if tail >= 1:
        h ^= data[whole]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    return h ^ (h >> 15)


def partition_of(key: Any, key_type: str, partitions: int) -> int:
    """Kafka's default partitioner over the bytes of its String, Integer or Long serializer."""
    if key_type == "string":
        data = str(key).encode("utf-8")
    else:
        data = struct.pack(">i" if key_type == "int" else ">q", int(key))
    return (murmur2(data) & 0x7FFFFFFF) % partitions


@dataclass(frozen=True)
class Route:
    argument: str  # "key" or "keys"
    key_type: str  # "string", "int" or "long"


@dataclass(frozen=True)
class ClusterMap:
    """GET /cluster, as routing needs it."""

    version: int  # the placement's: 0 for a project file's
    partitions: int
    addresses: dict[str, str]  # node -> base URL
    replicas: tuple[tuple[str, ...], ...]  # per partition: its live replicas, the active first
    routes: dict[str, Route]  # root field -> how it names its partitions

    @classmethod
    def read(cls, body: dict[str, Any], scheme: str) -> ClusterMap:
        def live(partition: dict[str, Any]) -> tuple[str, ...]:
            ranked = sorted(partition["replicas"], key=lambda r: r["role"] != "ACTIVE")
            return tuple(r["node"] for r in ranked if r["alive"])

        return cls(
            version=int(body["assignment_version"]),
            partitions=int(body["partitions_count"]),
            addresses={n["id"]: f"{scheme}://{n['address']}" for n in body["nodes"]},
            replicas=tuple(
                live(p) for p in sorted(body["partitions"], key=lambda p: p["partition"])
            ),
            routes={r["field"]: Route(r["argument"], r["key_type"]) for r in body["routes"]},
        )

    def nodes_for(self, keys: Sequence[tuple[str, Any]]) -> list[str]:
        """The nodes to try for a request reading `keys` ((key type, key) pairs), best
        first: by how many of the keys their first live replicas hold."""
        held: Counter[str] = Counter()
        for key_type, key in keys:
            replicas = self.replicas[partition_of(key, key_type, self.partitions)]
            for rank, node in enumerate(replicas):
                held[node] += 2 if rank == 0 else 1  # an active replica above a standby
        return [node for node, _ in held.most_common()]


@dataclass(frozen=True)
class _KeyArgument:
    field: str
    argument: str  # as the document names it
    value: ValueNode


@lru_cache(maxsize=PARSED_DOCUMENTS)
def _key_arguments(query: str, operation: str | None) -> tuple[_KeyArgument, ...] | None:
    """The root fields of the operation and their arguments named key or keys (None: a
    document the client cannot read; the node says what is wrong with it)."""
    try:
        document = parse(query)
    except GraphQLError:
        return None
    chosen = _operation(document, operation)
    if chosen is None:
        return None
    fragments = {
        d.name.value: d for d in document.definitions if isinstance(d, FragmentDefinitionNode)
    }
    found: list[_KeyArgument] = []
    for field in _root_fields(chosen.selection_set, fragments, set()):
        for argument in field.arguments or ():
            if argument.name.value in ("key", "keys"):
                found.append(_KeyArgument(field.name.value, argument.name.value, argument.value))
    return tuple(found)


def _operation(document: DocumentNode, name: str | None) -> OperationDefinitionNode | None:
    operations = [d for d in document.definitions if isinstance(d, OperationDefinitionNode)]
    if name is None:
        return operations[0] if len(operations) == 1 else None
    return next((o for o in operations if o.name and o.name.value == name), None)


def _root_fields(
    selections: SelectionSetNode,
    fragments: dict[str, FragmentDefinitionNode],
    seen: set[str],
) -> list[FieldNode]:
    fields: list[FieldNode] = []
    for selection in selections.selections:
        if isinstance(selection, FieldNode):
            fields.append(selection)
        elif isinstance(selection, InlineFragmentNode):
            fields.extend(_root_fields(selection.selection_set, fragments, seen))
        elif isinstance(selection, FragmentSpreadNode):
            name = selection.name.value
            if name in fragments and name not in seen:
                seen.add(name)
                fields.extend(_root_fields(fragments[name].selection_set, fragments, seen))
    return fields


def keys_asked(body: dict[str, Any], routes: dict[str, Route]) -> list[tuple[str, Any]]:
    """The keys a GraphQL request's routed fields read, as (key type, key) pairs."""
    query, variables = body.get("query"), body.get("variables") or {}
    if not isinstance(query, str) or not isinstance(variables, dict):
        return []
    arguments = _key_arguments(query, body.get("operationName"))
    keys: list[tuple[str, Any]] = []
    for argument in arguments or ():
        route = routes.get(argument.field)
        if route is None or route.argument != argument.argument:
            continue
        value = _value(argument.value, variables)
        for key in value if isinstance(value, list) else [value]:
            if _is_key(key, route.key_type):
                keys.append((route.key_type, key))
    return keys


def _value(node: ValueNode, variables: dict[str, Any]) -> Any:
    if isinstance(node, VariableNode):
        return variables.get(node.name.value)
    return value_from_ast_untyped(node, variables)


def _is_key(key: Any, key_type: str) -> bool:
    """Whether a value is a key of the type the partitioner can place (anything else is
    routed nowhere: the node says what is wrong with it)."""
    if key_type == "string":
        return isinstance(key, str)
    if isinstance(key, bool) or not isinstance(key, int | str):
        return False
    try:
        number = int(key)
    except ValueError:
        return False
    low, high = _INT_RANGE if key_type == "int" else _LONG_RANGE
    return low <= number <= high


class RoutingTransport(httpx.AsyncBaseTransport):
    """Sends each GraphQL request to the node that holds its keys (module docstring)."""

    def __init__(
        self,
        seeds: Sequence[str],
        transport: httpx.AsyncBaseTransport | None = None,
        down_for_s: float = DOWN_FOR_S,
    ) -> None:
        self.seeds = [s.rstrip("/") for s in seeds]
        self.transport = transport or httpx.AsyncHTTPTransport()
        self.down_for_s = down_for_s
        self.map: ClusterMap | None = None
        self.stale = True  # read the map before the next request
        self.down: dict[str, float] = {}  # base URL -> until when it is skipped
        self.routed = 0  # requests sent where their keys are
        self._reading = asyncio.Lock()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.method != "POST" or not request.url.path.endswith("/graphql"):
            return await self.transport.handle_async_request(request)
        body = await request.aread()
        if self.stale:
            await self._read_map(request)
        targets = self._targets(body, request.url)
        for base in targets[:-1]:
            try:
                return self._noted(
                    await self.transport.handle_async_request(_to(request, base, body))
                )
            except FAILOVER_ERRORS:
                self.down[base] = time.monotonic() + self.down_for_s
                self.stale = True
        return self._noted(
            await self.transport.handle_async_request(_to(request, targets[-1], body))
        )

    def _targets(self, body: bytes, url: httpx.URL) -> list[str]:
        """The base URLs to try in turn: the replicas of the request's keys, best first,
        then the request's own URL, then every other node; those found down last."""
        own = f"{url.scheme}://{url.netloc.decode()}"
        cluster = self.map
        if cluster is None:
            return [own]
        best = [cluster.addresses[n] for n in cluster.nodes_for(self._keys(body, cluster))]
        everyone = list(dict.fromkeys([*best, own, *cluster.addresses.values()]))
        now = time.monotonic()
        up = [b for b in everyone if self.down.get(b, 0.0) <= now]
        if up and up[0] in best:
            self.routed += 1
        return up + [b for b in everyone if b not in up]

    @staticmethod
    def _keys(body: bytes, cluster: ClusterMap) -> list[tuple[str, Any]]:
        try:
            request = json.loads(body)
        except ValueError:
            return []
        return keys_asked(request, cluster.routes) if isinstance(request, dict) else []

    def _noted(self, response: httpx.Response) -> httpx.Response:
        """The response, its node's placement version noted: a newer one than the map's
        has the map read again before the next request."""
        version = response.headers.get(ASSIGNMENT_HEADER, "")
        if self.map is not None and version.isdigit() and int(version) > self.map.version:
            self.stale = True
        return response

    async def _read_map(self, request: httpx.Request) -> None:
        """GET /cluster from the first seed or known node that answers (with the request's
        credentials: under [auth], /cluster needs a token granted "cluster")."""
        async with self._reading:
            if not self.stale:
                return
            known = list(self.map.addresses.values()) if self.map else []
            headers = (
                {"authorization": request.headers["authorization"]}
                if ("authorization" in request.headers)
                else {}
            )
            for base in dict.fromkeys([*known, *self.seeds]):
                try:
                    got = httpx.Request(
                        "GET", f"{base}/cluster", headers=headers, extensions=request.extensions
                    )
                    response = await self.transport.handle_async_request(got)
                    await response.aread()
                    if response.status_code == 200:
                        self.map = ClusterMap.read(json.loads(response.content), got.url.scheme)
                        self.stale = False
                        return
                except (httpx.TransportError, ValueError, KeyError, TypeError):
                    continue
            self.stale = False  # no map to be had: route nothing until a node says otherwise

    async def aclose(self) -> None:
        await self.transport.aclose()


def _to(request: httpx.Request, base: str, body: bytes) -> httpx.Request:
    """The request, sent to another node (its Host header follows the URL)."""
    target = httpx.URL(base)
    headers = [(k, v) for k, v in request.headers.raw if k.lower() != b"host"]
    url = request.url.copy_with(scheme=target.scheme, host=target.host, port=target.port)
    return httpx.Request(
        request.method, url, headers=headers, content=body, extensions=request.extensions
    )
