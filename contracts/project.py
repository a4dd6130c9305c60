"""The project file: the event log, the declared state stores, the cluster and its settings.

One TOML file describes everything; relative paths are resolved against the file's folder.
See stategate/demo/stategate.toml for a complete example and README.md for every setting.
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any, Literal, TypeVar

from contracts import names
from contracts.access import Access, AccessError
from contracts.access import parse as parse_access
from contracts.clock import UNITS_MS
from contracts.coordination import endpoints
from contracts.entries import ConfigError as ConfigError
from contracts.entries import Table
from contracts.partitioner import KeyType
from contracts.placement import Assignment, static
from contracts.settings import Settings, SettingsError
from contracts.tls import Tls
from contracts.tls import parse as parse_tls

FieldType = Literal["string", "int", "long", "double", "boolean"]
StoreKind = Literal["table", "aggregate", "window"]
# what a chain's layers hold: the declared kinds, and a versioned table's history (history_of)
TableKind = Literal["table", "aggregate", "window", "versions"]
Scope = Literal["partitioned", "global"]
AggFunc = Literal["count", "sum", "min", "max", "avg"]

FIELD_TYPES: tuple[FieldType, ...] = ("string", "int", "long", "double", "boolean")
KEY_TYPES: tuple[KeyType, ...] = ("string", "int", "long")
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9]*$")
_AGG = re.compile(r"^(count)(?:\(\))?$|^(sum|min|max|avg)\((\w+)\)$")
_JOIN = re.compile(r"^([A-Za-z][A-Za-z0-9]*)\(([A-Za-z][A-Za-z0-9]*)\)$")  # store(field)
_DURATION = re.compile(r"([0-9]+)(ms|s|m|h|d)")
MAX_DURATION_MS = 100 * 365 * 86_400_000  # a century: no window or history needs more
OBJECT_STORE = "s3://"  # a snapshot store on the S3 API (snapshot_store/s3.py)
RESERVED_COLUMNS = ("key", "window_start")  # a snapshot's own columns
SECRET_ENV = "STATEGATE_SECRET"
MAX_PORT = 65535
MAX_PARTITIONS = 10_000  # a topic's; each is a chain of files on every node that hosts it
# a host name (letters, digits, '-', '_', '.') or an IP address, IPv6 in brackets
_HOST = re.compile(r"[A-Za-z0-9_.-]+|\[[0-9A-Fa-f:.]+\]")

# What each table of the file may hold; [settings] is checked by contracts/settings.py.
TABLES = (
    "log",
    "kafka",
    "snapshots",
    "pages",
    "cluster",
    "topics",
    "stores",
    "settings",
    "auth",
    "tls",
)
KAFKA = ("bootstrap", "group", "prefix", "client")
KAFKA_GROUP = "stategate"
CLUSTER = ("partitions", "replicas", "secret", "secret_env", "nodes", "coordinator", "name")
_HOST_PORT = re.compile(r"[^\s:,]+:\d{1,5}")
CLUSTER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")
STORE_ENTRIES: dict[str, tuple[str, ...]] = {
    "table": ("name", "kind", "topic", "index", "global", "joins", "history"),
    "aggregate": ("name", "kind", "topic", "aggregates", "index", "global", "joins"),
    "window": ("name", "kind", "topic", "aggregates", "size", "advance", "global", "joins"),
}
# Each array of tables: what one entry is called, the entry that names it, its entries.
ENTRIES: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "topics": ("topic", "name", ("name", "key", "value")),
    "stores": ("store", "name", (*STORE_ENTRIES["window"], "index", "history")),
    "cluster.nodes": ("node", "id", ("id", "address", "data_dir")),
}


@dataclass(frozen=True)
class Topic:
    name: str
    key_type: KeyType
    value: dict[str, FieldType]


@dataclass(frozen=True)
class Aggregate:
    name: str
    func: AggFunc
    source: str | None  # the value field; None for count (of records; else of values)

    def result_type(self, topic: Topic) -> FieldType:
        if self.func == "count":
            return "long"
        if self.func == "avg":
            return "double"
        assert self.source is not None
        source_type = topic.value[self.source]
        if self.func == "sum":
            return "double" if source_type == "double" else "long"
        return source_type

    def parts(self) -> tuple[Aggregate, ...]:
        """What a snapshot stores of it, so that two partial results can merge: itself, or
        for avg the sum and the count of the values ("_" never occurs in declared names)."""
        if self.func != "avg":
            return (self,)
        return (
            Aggregate(f"{self.name}_sum", "sum", self.source),
            Aggregate(f"{self.name}_n", "count", self.source),
        )


@dataclass(frozen=True)
class Join:
    """A record's field `name`: the record of the global store `store` whose key is the
    value of this record's `field` (its key, or a column)."""

    name: str
    store: str
    field: str


@dataclass(frozen=True)
class Store:
    name: str
    kind: TableKind
    topic: Topic
    aggregates: tuple[Aggregate, ...] = ()
    window_size_ms: int = 0
    window_advance_ms: int = 0
    index: tuple[str, ...] = ()  # columns kept sorted in memory, to order by cheaply
    scope: Scope = "partitioned"  # global: every node holds every partition of it
    joins: tuple[Join, ...] = ()
    history_ms: int = 0  # a versioned table's: how long, by event time, its versions are kept
    # A generation's: the store it is a declaration of, whose name is its table's (`name`)
    # but for the digest (contracts/generations.py); "" for a store's own table.
    generation_of: str = ""

    @property
    def declared_name(self) -> str:
        """The store's name in the project file: what the schema, [auth] and row rules name."""
        return self.generation_of or self.name

    @property
    def is_global(self) -> bool:
        return self.scope == "global"

    @property
    def versioned(self) -> bool:
        """A table that keeps every version of a key within its history (KIP-889)."""
        return self.kind == "table" and self.history_ms > 0

    @property
    def key_type(self) -> KeyType:
        return self.topic.key_type

    @property
    def columns(self) -> dict[str, FieldType]:
        """The typed value columns of one row, in declaration order (key and window aside)."""
        if self.kind in ("table", "versions"):
            return dict(self.topic.value)
        return {a.name: a.result_type(self.topic) for a in self.aggregates}

    @property
    def partials(self) -> tuple[Aggregate, ...]:
        """The aggregates as a snapshot stores them (Aggregate.parts)."""
        return tuple(part for a in self.aggregates for part in a.parts())

    @property
    def stored_columns(self) -> dict[str, FieldType]:
        """The typed value columns of the snapshot's table (a history's: VALID_TO and
        TOMBSTONE before them)."""
        if self.kind == "table":
            return self.columns
        if self.kind == "versions":
            return {VALID_TO: "long", TOMBSTONE: "boolean", **self.columns}
        return {a.name: a.result_type(self.topic) for a in self.partials}


Named = TypeVar("Named", Topic, Store)
# A history's own columns: declared names have no "_", so none clashes with a column.
VALID_FROM, VALID_TO, TOMBSTONE = "valid_from", "valid_to", "_tombstone"


def history_of(store: Store) -> Store:
    """The table of a versioned store's history, kept in its chain's layers beside the store
    itself: per key and valid_from, the version's valid_to (null: still valid), whether it
    is a tombstone (which ends the version before it), then the columns."""
    return Store(
        name=f"{store.name}_history",
        kind="versions",
        topic=store.topic,
        scope=store.scope,
        history_ms=store.history_ms,
        generation_of=f"{store.generation_of}_history" if store.generation_of else "",
    )


@dataclass(frozen=True)
class Node:
    id: str
    address: str  # host:port
    data_dir: Path
    scheme: str = "http"  # https with [tls]

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.address}"

    @property
    def snapshots(self) -> Path:
        """The folder of the snapshots the node holds (its copies of the store's)."""
        return self.data_dir / "snapshots"


@dataclass(frozen=True)
class Cluster:
    partitions: int
    replicas: int
    nodes: tuple[Node, ...]
    secret: str
    coordinator: str | None = None  # etcd://host:port[,host:port...]: where placement lives
    name: str = "stategate"  # the cluster's keys in the coordinator
    tls: Tls | None = None  # [tls]: every link between its members, and to them

    @property
    def scheme(self) -> str:
        return scheme(self.tls)

    def with_node(self, node: Node) -> Cluster:
        """This cluster with one more node (a node joining an elastic cluster from the
        command line); ConfigError when its id is taken by another address, or its address
        or data_dir by another node."""
        for known in self.nodes:
            if known.id == node.id and known != node:
                raise ConfigError(f"node {node.id!r} is declared with address {known.address}")
            if known.id != node.id and known.address == node.address:
                raise ConfigError(f"address {node.address} is taken by node {known.id!r}")
            if known.id != node.id and known.data_dir.resolve() == node.data_dir.resolve():
                raise ConfigError(f"data_dir {node.data_dir} is taken by node {known.id!r}")
        if node in self.nodes:
            return self
        return replace(self, nodes=(*self.nodes, node))

    def node(self, node_id: str) -> Node:
        for node in self.nodes:
            if node.id == node_id:
                return node
        raise ConfigError(f"unknown node {node_id!r}; nodes are {[n.id for n in self.nodes]}")

    @cached_property
    def assignment(self) -> Assignment:
        """The file's own placement, round-robin over [[cluster.nodes]] in order
        (contracts/placement.py: static); without a coordinator it never changes."""
        return static([n.id for n in self.nodes], self.partitions, self.replicas)

    @property
    def replica_map(self) -> dict[int, tuple[str, ...]]:
        """partition -> node ids, active first then standbys."""
        return self.assignment.replica_map

    def hosted_by(self, node_id: str) -> list[int]:
        return self.assignment.hosted_by(node_id)


@dataclass(frozen=True)
class Kafka:
    """[kafka]: the Kafka cluster the declared topics live in (README: Kafka). Its client
    properties pass through to librdkafka as they are, in every client stategate opens: the
    pipeline's driver and Spark tasks, `stategate produce`."""

    bootstrap: str  # host:port[,host:port...]
    group: str = KAFKA_GROUP  # the consumer group the published positions are committed to
    prefix: str = ""  # the declared topic `t` is the Kafka topic prefix + t
    client: dict[str, str] = field(default_factory=dict)

    def topic(self, name: str) -> str:
        """The Kafka topic of the declared topic `name`."""
        return self.prefix + name


# What a running node may take of a project file read again (Project.take).
TAKEN = ("topics", "stores", "settings", "access")


@dataclass(frozen=True)
class Project:
    path: Path
    log_dir: Path
    # the folder the pipeline publishes to; with an object store, its working copy there
    snapshot_store: str
    # where nodes pull from: that folder, or an object store (s3://bucket/prefix), which
    # the pipeline publishes to
    snapshot_url: str
    topics: dict[str, Topic]
    stores: dict[str, Store]
    cluster: Cluster
    settings: Settings = field(default_factory=Settings)
    pages_dir: Path | None = None  # [pages] dir: static pages (dashboards) nodes serve at /pages/
    access: Access | None = None  # [auth]: who may read what; None checks nothing
    kafka: Kafka | None = None  # [kafka]: the topics are Kafka's; None: the file log's ([log])

    @property
    def tls(self) -> Tls | None:
        return self.cluster.tls

    def store(self, name: str) -> Store:
        return self.stores[name]

    @property
    def object_store(self) -> str | None:
        """The bucket the pipeline publishes to and the nodes pull from, if any."""
        return self.snapshot_url if self.snapshot_url.startswith(OBJECT_STORE) else None

    @cached_property
    def global_stores(self) -> tuple[Store, ...]:
        return tuple(s for s in self.stores.values() if s.is_global)

    @cached_property
    def partitioned_stores(self) -> tuple[Store, ...]:
        return tuple(s for s in self.stores.values() if not s.is_global)

    def take(self, newer: Project) -> None:
        """Take `newer`'s topics, stores, settings and [auth], in place: the one project every
        part of a running node reads (a reload, stategate/reloading.py). Each is swapped
        whole, so a reader sees the old one or the new one, never a mix of one."""
        for name in TAKEN:
            object.__setattr__(self, name, getattr(newer, name))
        for derived in ("global_stores", "partitioned_stores"):
            self.__dict__.pop(derived, None)

    @property
    def operations_file(self) -> Path | None:
        """settings.operations, resolved against the project file's folder; None when unset."""
        name = self.settings.operations
        return self.path.parent / name if name else None


def stores_changed(old: Project, new: Project) -> tuple[list[str], list[str], list[str]]:
    """The stores added, removed and declared otherwise, by name, each sorted."""
    added = sorted(new.stores.keys() - old.stores.keys())
    removed = sorted(old.stores.keys() - new.stores.keys())
    other = sorted(n for n, store in old.stores.items() if new.stores.get(n, store) != store)
    return added, removed, other


def load(path: str | os.PathLike[str], *, serving: bool = True) -> Project:
    """The project file, checked; `serving=False` for what never calls a node or serves one
    (the schema, the operations, producing): it leaves the cluster secret unread ("" when
    it is not set) and the pages folder unchecked."""
    path = Path(path).resolve()
    try:
        raw = tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: {exc}") from exc
    try:
        return parse(raw, path, serving=serving)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from exc


def parse(raw: dict[str, Any], path: Path, *, serving: bool = True) -> Project:
    base = path.parent
    top = Table(raw, "", TABLES)
    topics = _declared([_topic(entry) for entry in _entries(top, "topics")], "topic")
    stores = _declared([_store(entry, topics) for entry in _entries(top, "stores")], "store")
    if not stores:
        raise ConfigError("declare at least one [[stores]] entry")
    for store in stores.values():
        _check_joins(store, stores)
    names.check(stores.values())
    log = Table(top.get("log", dict, {}), "[log]", ("dir",))
    snapshots = Table(top.get("snapshots", dict, {}), "[snapshots]", ("store", "url"))
    store_dir = str(base / snapshots.get("store", str, "snapshots"))
    settings = _settings(top.get("settings", dict, {}))
    log_dir = base / log.get("dir", str, "log")
    cluster = _cluster(
        Table(top.get("cluster", dict, {}), "[cluster]", CLUSTER),
        base,
        serving,
        parse_tls(top.optional("tls", dict), base),
    )
    _apart(cluster.nodes, log_dir, Path(store_dir))
    return Project(
        path=path,
        log_dir=log_dir,
        snapshot_store=store_dir,
        snapshot_url=_snapshot_url(snapshots.get("url", str, store_dir).rstrip("/")),
        topics=topics,
        stores=stores,
        cluster=cluster,
        settings=settings,
        pages_dir=_pages(Table(top.get("pages", dict, {}), "[pages]", ("dir",)), base, serving),
        access=_access(top.optional("auth", dict), base, stores),
        kafka=_kafka(top.optional("kafka", dict), settings),
    )


def _snapshot_url(url: str) -> str:
    """Where nodes pull snapshots from: a folder, or a bucket on the S3 API."""
    if "://" in url and not url.startswith(OBJECT_STORE):
        raise ConfigError(
            f"[snapshots] url = {url!r}: a folder, or s3://bucket/prefix (an S3 API server: "
            "AWS S3, Ceph, MinIO, S3Proxy); `stategate store` and http(s) URLs are gone"
        )
    return url


def _kafka(raw: object, settings: Settings) -> Kafka | None:
    if raw is None:
        return None
    if settings.log_end == "log":
        raise ConfigError(
            "[settings] log_end = 'log' reads the file log's end, and [kafka] names the log: "
            "set log_end = 'published'"
        )
    table = Table(raw, "[kafka]", KAFKA)
    bootstrap = table.get("bootstrap", str)
    if not all(_HOST_PORT.fullmatch(server) for server in bootstrap.split(",")):
        raise ConfigError(f"[kafka]: bootstrap must be host:port[,host:port...], not {bootstrap!r}")
    return Kafka(
        bootstrap,
        table.get("group", str, KAFKA_GROUP),
        table.get("prefix", str, ""),
        table.strings("client", {}),
    )


def _access(raw: object, base: Path, stores: dict[str, Store]) -> Access | None:
    try:
        fields = {name: {"key": s.key_type, **s.columns} for name, s in stores.items()}
        return parse_access(raw, base, fields)
    except AccessError as exc:
        raise ConfigError(str(exc)) from exc


def _entries(table: Table, array: str) -> list[Table]:
    """The entries of an array of tables, each named by its name (or id) if it has one, else
    by its number from 1."""
    what, by, known = ENTRIES[array]
    entries = []
    for number, raw in enumerate(table.array(array.rpartition(".")[2]), start=1):
        name = raw.get(by) if isinstance(raw, dict) else None
        where = f"{what} {name!r}" if isinstance(name, str) else f"[[{array}]] entry {number}"
        entries.append(Table(raw, where, known))
    return entries


def _declared(declared: list[Named], what: str) -> dict[str, Named]:
    _unique([item.name for item in declared], what)
    return {item.name: item for item in declared}


def _pages(table: Table, base: Path, serving: bool) -> Path | None:
    folder = table.optional("dir", str)
    if folder is None:
        return None
    if serving and not (base / folder).is_dir():
        raise ConfigError(f"[pages]: dir must be a folder next to the project file, not {folder!r}")
    return base / folder


def _settings(raw: object) -> Settings:
    try:
        return Settings.parse(raw)
    except SettingsError as exc:
        raise ConfigError(str(exc)) from exc


def _topic(table: Table) -> Topic:
    name = table.get("name", str)
    if not re.match(r"^[A-Za-z0-9._-]+$", name):
        raise ConfigError(f"topic name {name!r} must be letters, digits, '.', '_' or '-'")
    key_type = table.get("key", str, "string")
    if key_type not in KEY_TYPES:
        raise ConfigError(f"topic {name!r}: key must be one of {KEY_TYPES}, not {key_type!r}")
    value = table.strings("value", {})
    _unique(list(value), f"topic {name!r} value field")
    for fname, ftype in value.items():
        _check_column(fname, f"topic {name!r} value field")
        if ftype not in FIELD_TYPES:
            raise ConfigError(f"topic {name!r} field {fname!r}: type must be one of {FIELD_TYPES}")
    return Topic(name=name, key_type=key_type, value=value)  # type: ignore[arg-type]


def _store(table: Table, topics: dict[str, Topic]) -> Store:
    name = table.get("name", str)
    _check_name(name, "store name")
    kind = table.get("kind", str)
    if kind not in STORE_ENTRIES:
        kinds = ", ".join(STORE_ENTRIES)
        raise ConfigError(f"store {name!r}: kind must be one of {kinds}, not {kind!r}")
    for key in table.raw:
        if key == "history" and kind != "table":
            raise ConfigError(
                f"store {name!r}: history keeps the versions of a table store's keys; "
                f"{kind} stores have none"
            )
        if key not in STORE_ENTRIES[kind]:
            raise ConfigError(f"store {name!r}: {kind} stores have no {key!r}")
    topic = topics.get(table.get("topic", str))
    if topic is None:
        raise ConfigError(f"store {name!r}: unknown topic {table.raw['topic']!r}")
    scope: Scope = "global" if table.get("global", bool, False) else "partitioned"
    joins = tuple(_join(n, spec, name) for n, spec in table.strings("joins", {}).items())
    store = Store(name=name, kind=kind, topic=topic, scope=scope, joins=joins)  # type: ignore[arg-type]
    if kind == "table":
        history = table.optional("history", str)
        if history is not None:
            store = replace(store, history_ms=_duration(history, name))
        return _indexed(store, table)
    specs = table.strings("aggregates")
    aggregates = tuple(_aggregate(n, spec, topic, name) for n, spec in specs.items())
    _unique([a.name for a in aggregates], f"store {name!r} aggregate")
    if kind == "aggregate":
        return _indexed(replace(store, aggregates=aggregates), table)
    size = _duration(table.get("size", str), name)
    advance = _duration(table.get("advance", str, table.get("size", str)), name)
    if advance > size or size % advance:
        raise ConfigError(f"store {name!r}: advance must divide the window size")
    return replace(store, aggregates=aggregates, window_size_ms=size, window_advance_ms=advance)


def _join(name: str, spec: str, store: str) -> Join:
    _check_column(name, f"store {store!r} join")
    match = _JOIN.match(spec.strip())
    if not match:
        raise ConfigError(
            f"store {store!r} join {name!r}: {spec!r} is not store(field), e.g. timetable(trip)"
        )
    return Join(name=name, store=match.group(1), field=match.group(2))


def _check_joins(store: Store, stores: dict[str, Store]) -> None:
    """A join names a global keyed store, by a field of the key's type: the key, or a
    column."""
    if store.is_global and store.joins:
        raise ConfigError(
            f"store {store.name!r}: a global store declares no joins (the records a join "
            f"reads are not joined in turn)"
        )
    own = {"key": store.key_type, **store.columns}
    _unique([*store.columns, *(j.name for j in store.joins)], f"store {store.name!r} field")
    for join in store.joins:
        where = f"store {store.name!r} join {join.name!r}"
        target = stores.get(join.store)
        if target is None:
            raise ConfigError(f"{where}: unknown store {join.store!r}")
        if not target.is_global or target.kind == "window":
            raise ConfigError(
                f"{where}: {join.store!r} must be a global table or aggregate store "
                f"(declare it with global = true)"
            )
        if join.field not in own:
            raise ConfigError(f"{where}: {store.name!r} has no field {join.field!r}")
        if own[join.field] != target.key_type:
            raise ConfigError(
                f"{where}: {join.field!r} is {own[join.field]} but {join.store!r} is keyed "
                f"by {target.key_type}"
            )


def _indexed(store: Store, table: Table) -> Store:
    """The store with its `index`: columns a page may be ordered by cheaply."""
    index = table.get("index", list, [])
    for column in index:
        if not isinstance(column, str) or column not in store.columns:
            columns = ", ".join(store.columns)
            raise ConfigError(
                f"store {store.name!r}: index names {column!r}, which is not one of its "
                f"columns ({columns})"
            )
    _unique(index, f"store {store.name!r} index field")
    return replace(store, index=tuple(index))


def _aggregate(name: str, spec: str, topic: Topic, store: str) -> Aggregate:
    _check_column(name, f"store {store!r} aggregate")
    match = _AGG.match(spec.strip())
    if not match:
        raise ConfigError(f"store {store!r} aggregate {name!r}: {spec!r} is not count or f(field)")
    if match.group(1):
        return Aggregate(name=name, func="count", source=None)
    func, source = match.group(2), match.group(3)
    if source not in topic.value:
        raise ConfigError(f"store {store!r} aggregate {name!r}: no field {source!r} in the topic")
    if func in ("sum", "avg") and topic.value[source] not in ("int", "long", "double"):
        raise ConfigError(f"store {store!r} aggregate {name!r}: {func} needs a numeric field")
    return Aggregate(name=name, func=func, source=source)  # type: ignore[arg-type]


def _cluster(table: Table, base: Path, needed: bool, tls: Tls | None) -> Cluster:
    nodes = tuple(_node(entry, base, scheme(tls)) for entry in _entries(table, "cluster.nodes"))
    coordinator = _coordinator(table)
    if not nodes and coordinator is None:
        raise ConfigError("declare at least one [[cluster.nodes]] entry, or a coordinator")
    _unique([n.id for n in nodes], "node id")
    _unique([n.address for n in nodes], "node address")
    _unique([str(n.data_dir.resolve()) for n in nodes], "node data_dir")
    partitions = table.get("partitions", int, 1)
    if not 1 <= partitions <= MAX_PARTITIONS:
        raise ConfigError(f"[cluster]: partitions must be 1 to {MAX_PARTITIONS}, not {partitions}")
    replicas = table.get("replicas", int, 1)
    if coordinator is not None and replicas < 1:
        raise ConfigError(f"[cluster]: replicas must be at least 1, not {replicas}")
    if coordinator is None and not 1 <= replicas <= len(nodes):
        raise ConfigError(f"[cluster]: replicas must be between 1 and the node count {len(nodes)}")
    name = table.get("name", str, "stategate")
    if not CLUSTER_NAME.fullmatch(name):
        raise ConfigError(f"[cluster]: name must be letters, digits, '.', '_' or '-', not {name!r}")
    secret_env = table.get("secret_env", str, SECRET_ENV)
    secret = os.environ.get(secret_env) or table.get("secret", str, "")
    if not secret and needed:
        raise ConfigError("[cluster]: set secret, or the environment variable named by secret_env")
    return Cluster(partitions, replicas, nodes, secret, coordinator, name, tls)


def _coordinator(table: Table) -> str | None:
    url = table.optional("coordinator", str)
    if url is not None:
        try:
            endpoints(url)
        except ValueError as exc:
            raise ConfigError(f"[cluster]: {exc}") from None
    return url


def node_entry(raw: dict[str, Any], cluster: Cluster, base: Path) -> Node:
    """A node described outside the file (`stategate node --address`), checked as one of
    [[cluster.nodes]] is."""
    return _node(Table(raw, "the node", ("id", "address", "data_dir")), base, cluster.scheme)


def scheme(tls: Tls | None) -> str:
    """How a node is called: https with TLS."""
    return "https" if tls is not None else "http"


def _node(table: Table, base: Path, scheme: str) -> Node:
    node_id, address = table.get("id", str), table.get("address", str)
    host, _, port = address.rpartition(":")
    if not _HOST.fullmatch(host) or port_number(port) is None:
        raise ConfigError(
            f"{table.where}: address must be host:port (a host name or IP address, a port "
            f"1-{MAX_PORT}: the one its peers call), not {address!r}"
        )
    data_dir = base / table.get("data_dir", str)
    return Node(id=node_id, address=address, data_dir=data_dir, scheme=scheme)


def apart(project: Project, node: Node) -> None:
    """ConfigError when a node's snapshots folder overlaps the project's log or snapshot
    store (a node joining from the command line: those of the file are checked at load)."""
    _apart((node,), project.log_dir, Path(project.snapshot_store))


def port_number(text: str) -> int | None:
    """A TCP port one may listen on and call, 1-MAX_PORT, written in ASCII digits; None
    otherwise."""
    number = int(text) if text.isascii() and text.isdigit() else 0
    return number if 1 <= number <= MAX_PORT else None


def _apart(nodes: tuple[Node, ...], log_dir: Path, store_dir: Path) -> None:
    """Each node's snapshots folder apart from the log's and the store's (a node deletes
    the versions it no longer serves from its own)."""
    folders = {"[log] dir": log_dir, "[snapshots] store": store_dir}
    for node in nodes:
        mine = node.snapshots.resolve()
        for what, folder in folders.items():
            theirs = folder.resolve()
            if mine == theirs or mine in theirs.parents or theirs in mine.parents:
                raise ConfigError(
                    f"node {node.id!r}: its data_dir's snapshots folder {mine} overlaps "
                    f"{what} {theirs}: give the node a data_dir of its own"
                )


def _duration(text: object, store: str) -> int:
    match = _DURATION.fullmatch(str(text))
    if not match or int(match.group(1)) == 0:
        raise ConfigError(f"store {store!r}: duration {text!r} must look like 1h, 15m, 30s")
    duration = int(match.group(1)) * UNITS_MS[match.group(2)]
    if duration > MAX_DURATION_MS:
        raise ConfigError(f"store {store!r}: duration {text!r} is past a century")
    return duration


def _unique(names: list[str], what: str) -> None:
    """Names must differ ignoring case: DuckDB's identifiers are case-insensitive."""
    seen: dict[str, str] = {}
    for name in names:
        if name.lower() in seen:
            clash = seen[name.lower()]
            raise ConfigError(f"{what} {name!r} is declared twice (names ignore case: {clash!r})")
        seen[name.lower()] = name


def _check_column(name: str, what: str) -> None:
    _check_name(name, what)
    if name.lower() in RESERVED_COLUMNS:
        raise ConfigError(f"{what} {name!r}: {RESERVED_COLUMNS} are reserved")


def _check_name(name: str, what: str) -> None:
    if not _NAME.match(name):
        raise ConfigError(f"{what} {name!r} must be a GraphQL-style name (letters and digits)")
