"""What nodes tell each other and their clients about their partitions: a node's own status
(polled by its peers on /internal/status) and the partition map (/cluster, `cluster` query)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, cast

import orjson

from contracts import coordination, names, placement, snapshot_file
from contracts.project import Project
from gateway.wire import protocol
from gateway.wire.protocol import ProtocolError

# Headers of every GraphQL answer over HTTP: the node that answered, and the version of the
# placement it knows (a routing client whose map is older fetches /cluster again).
NODE_HEADER, ASSIGNMENT_HEADER = "stategate-node", "stategate-assignment"


# Each format a node reads, by name, with the versions it reads: its peers' calls (protocol),
# the manifest and layers (snapshot), the coordinator's records (members, placement).
FORMATS: dict[str, list[int]] = {
    "protocol": list(protocol.READS),
    "snapshot": [snapshot_file.FORMAT],
    "members": [coordination.FORMAT],
    "placement": [placement.FORMAT],
}


@dataclass(frozen=True, slots=True)
class PartitionState:
    """One replica's snapshot of a partition."""

    version: int
    offsets: dict[str, int]  # topic -> next offset to read
    created_ms: int  # when the pipeline built it
    served_ms: int  # when this replica began serving it


@dataclass
class LiveCounts:
    """A node's subscriptions, kept up to date by resolvers/transport/live.py."""

    subscriptions: int = 0  # open on this node
    cohorts: int = 0  # distinct ones among them, each evaluated once per change
    evaluations: int = 0  # cohort evaluations since the node started


@dataclass(frozen=True)
class NodeStatus:
    node: str
    partitions: dict[int, PartitionState]
    sync_errors: dict[int, str]
    internal_requests: int
    changes: int  # counts the node's version switches (gateway/storage/delivery/switches.py)
    live: LiveCounts
    release: str = ""  # contracts/release.py; "": a node of a release before it said
    schema: str = ""  # its GraphQL schema's version (the SDL's SHA-256, 12 digits)
    formats: dict[str, list[int]] = field(default_factory=dict)  # FORMATS; {}: unstated
    # the declared stores built on every chain it serves (gateway/cluster/served.py); None:
    # unstated, by a release before it
    stores: list[str] | None = None
    # each store its project declares, by the digest of its rows' declaration (rows_as); None:
    # unstated, by a release before it
    declared: dict[str, str] | None = None
    # the tables its schema reads, one a declared store (gateway/cluster/served.py:
    # read_tables); None: unstated, by a release before it
    serving: list[str] | None = None
    # the stores it declares whose declaration it has not built yet on every chain it
    # serves (a store changed in place: its new table); None: unstated, by a release before
    # `stores` and `declared`
    pending: list[str] | None = None
    # when the answering process started (it read its project file then), when it last read
    # the file again (SIGHUP, POST /internal/reload) and what that did ("applied: ..." or
    # "refused: ...": stategate/reloading.py), by the node's clock; None: not yet, or
    # unstated by a release before it
    started_ms: int | None = None
    reloaded_ms: int | None = None
    reloaded: str = ""

    def reads(self, name: str, version: int) -> bool:
        """Whether the node reads `version` of a format: a node that stated no formats is of
        a release before they were stated, which read protocol UNSTATED."""
        stated = self.formats or {"protocol": [protocol.UNSTATED]}
        return version in stated.get(name, ())

    def to_json(self) -> bytes:
        return orjson.dumps(self, option=orjson.OPT_NON_STR_KEYS)  # orjson walks dataclasses

    @classmethod
    def from_json(cls, body: bytes) -> NodeStatus:
        try:
            raw = orjson.loads(body)
            return cls(
                node=str(raw["node"]),
                partitions={
                    int(p): PartitionState(
                        version=int(s["version"]),
                        offsets={str(t): int(o) for t, o in s["offsets"].items()},
                        created_ms=int(s["created_ms"]),
                        served_ms=int(s["served_ms"]),
                    )
                    for p, s in raw["partitions"].items()
                },
                sync_errors={int(p): str(e) for p, e in raw["sync_errors"].items()},
                internal_requests=int(raw["internal_requests"]),
                changes=int(raw["changes"]),
                live=LiveCounts(**{k: int(v) for k, v in raw["live"].items()}),
                release=str(raw.get("release", "")),
                schema=str(raw.get("schema", "")),
                formats={
                    str(n): [int(v) for v in versions]
                    for n, versions in raw.get("formats", {}).items()
                },
                stores=None if raw.get("stores") is None else [str(s) for s in raw["stores"]],
                declared=(
                    None
                    if raw.get("declared") is None
                    else {str(n): str(d) for n, d in raw["declared"].items()}
                ),
                serving=None if raw.get("serving") is None else [str(t) for t in raw["serving"]],
                pending=_pending(raw),
                started_ms=_ms(raw.get("started_ms")),
                reloaded_ms=_ms(raw.get("reloaded_ms")),
                reloaded=str(raw.get("reloaded", "")),
            )
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ProtocolError(f"not a node status: {exc!r}") from exc


@dataclass(frozen=True, slots=True)
class ReplicaInfo:
    node: str
    address: str
    active: bool
    alive: bool
    version: int | None
    position: dict[str, int]
    lag: int | None  # offsets behind the log end, all topics; None when unknown


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    partition: int
    replicas: list[ReplicaInfo]
    warming: list[ReplicaInfo]  # copies being made; each serves once caught up


@dataclass(frozen=True, slots=True)
class KeyRoute:
    """A root field that reads the partitions of its key argument, by the key's topic."""

    field: str
    argument: str  # "key": one key; "keys": a list of them
    topic: str
    key_type: str


@dataclass(frozen=True)
class PartitionMap:
    """Partitions, their replicas and roles, as the answering node knows them."""

    node: str
    partitions_count: int
    replicas: int
    topics: dict[str, str]  # topic -> key type
    nodes: dict[str, str]  # node id -> address
    partitions: list[PartitionInfo]
    generated_ms: int
    assignment_version: int  # 0: the project file's placement
    coordinator: str | None  # etcd://...: an elastic cluster's
    leader: str | None  # the node that places partitions, as last read
    routes: list[KeyRoute]  # what a client needs to send a key's query to its replicas
    # node id -> (release, schema), "" when not known
    releases: dict[str, tuple[str, str]] = field(default_factory=dict)
    # node id -> the stores it declares and has not built yet (None: not known)
    pending: dict[str, list[str] | None] = field(default_factory=dict)

    def to_json(self) -> bytes:
        return orjson.dumps(_json_map(self))

    def said(self, node: str) -> tuple[str | None, str | None]:
        """A node's release and schema version as last heard; None when not known."""
        release, schema = self.releases.get(node, ("", ""))
        return release or None, schema or None


def _pending(raw: dict[str, Any]) -> list[str] | None:
    """A status's `pending`; from a release before it said them, the stores it declares
    and does not list as built (it had no store changed in place)."""
    if raw.get("pending") is not None:
        return [str(n) for n in raw["pending"]]
    if raw.get("declared") is None or raw.get("stores") is None:
        return None
    return sorted(set(raw["declared"]) - set(raw["stores"]))


def key_routes(project: Project) -> list[KeyRoute]:
    """Every root field of the project's partitioned stores that reads by key."""
    routes = (
        KeyRoute(field, argument, store.topic.name, store.key_type)
        for store in project.stores.values()
        for field, argument in names.routed_fields(store).items()
    )
    return list(dict.fromkeys(routes))  # a store's generations route the same fields


def _json_map(partition_map: PartitionMap) -> dict[str, Any]:
    """As GET /cluster writes it: offsets and lag, the GraphQL API's Longs, as decimal
    strings (a JSON number past 2^53 is rounded by clients whose numbers are doubles)."""
    body = asdict(partition_map)
    del body["releases"], body["pending"]
    body["nodes"] = [
        {
            "id": i,
            "address": a,
            "release": release,
            "schema": schema,
            "pending": partition_map.pending.get(i),
        }
        for i, a in partition_map.nodes.items()
        for release, schema in [partition_map.said(i)]
    ]
    for partition in body["partitions"]:
        for replica in partition["replicas"]:
            replica["role"] = "ACTIVE" if replica.pop("active") else "STANDBY"
        for replica in partition["warming"]:
            replica.pop("active")
            replica["role"] = "WARMING"
        for replica in partition["replicas"] + partition["warming"]:
            replica["position"] = {t: str(o) for t, o in replica["position"].items()}
            replica["lag"] = None if replica["lag"] is None else str(replica["lag"])
    return body


def _ms(value: object) -> int | None:
    return None if value is None else int(cast(Any, value))
