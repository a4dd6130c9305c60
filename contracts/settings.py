"""Settings: one table of every tunable, with its type, default, lower bound and meaning.

The `[settings]` table of the project file overrides any of them; anything else in it (an
unknown name, a wrong type, a value out of range) is a SettingsError naming the entry. The
README's settings table is generated from this one (`stategate settings`; a test compares).
"""

from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass, field, fields
from typing import Any

LOG_LEVELS = ("debug", "info", "warning", "error")
# what DuckDB's memory_limit reads: a positive size with a unit (decimal or binary), or a share
MEMORY_LIMIT = re.compile(
    r"(?i)(?:[0-9]*[1-9][0-9]*(?:\.[0-9]+)?|[0-9]+\.[0-9]*[1-9][0-9]*) *(?:[KMGT]i?B|[KMGT]|"
    r"(?:kilo|mega|giga|tera)bytes?)|100%|[1-9][0-9]?(?:\.[0-9]+)?%"
)
# The most keys one internal sub-query carries, on every node alike (a peer refuses more): a
# constant of the internal protocol, not a setting; max_keys_per_field may not pass it.
MAX_SUBQUERY_KEYS = 10_000
# Settings that were renamed or split: the message an old project file gets.
RETIRED = {
    "max_keys_per_request": "split into max_keys_per_field (keys of one batch field) and "
    "max_aliases (aliases in one document)",
}
LOG_FORMATS = ("text", "json")
LOG_ENDS = ("published", "log")
BAD_RECORDS = ("skip", "fail")


class SettingsError(ValueError):
    """One entry of [settings] is wrong; the message names it."""


def _setting(
    default: Any, help: str, minimum: float | None = None, maximum: float | None = None
) -> Any:
    return field(default=default, metadata={"help": help, "minimum": minimum, "maximum": maximum})


@dataclass(frozen=True)
class Settings:
    default_page_size: int = _setting(100, "`first` of a scan when not given", 1)
    max_page_size: int = _setting(
        1000, "largest `first`; also the most windows one window query returns", 1
    )
    max_keys_per_field: int = _setting(
        10_000,
        f"most keys of one batch field (TOO_MANY_KEYS); at most {MAX_SUBQUERY_KEYS}, the "
        "internal protocol's keys per sub-query",
        1,
        MAX_SUBQUERY_KEYS,
    )
    max_aliases: int = _setting(
        10_000,
        "most aliases in one document, fragments expanded (GRAPHQL_VALIDATION_FAILED)",
        1,
    )
    max_request_bytes: int = _setting(
        4_000_000,
        "largest GraphQL request body; a larger one is refused (413) before it is read whole",
        1024,
    )
    max_query_depth: int = _setting(8, "deepest nesting of a GraphQL document's selections", 2)
    max_document_tokens: int = _setting(
        50_000, "most tokens of a GraphQL document; a longer one is refused while parsed", 100
    )
    max_request_cost: int = _setting(
        100_000,
        "most values a request's response may hold, estimated from the document and "
        "variables before any work (README: Limits); more is refused (COST_LIMIT_EXCEEDED)",
        1,
    )
    bulk_request_cost: int = _setting(
        1_000,
        "a request of a higher cost runs in the bulk lane: its long stretches on a thread of "
        "their own, in slices that wait for the node's other requests (README: Limits)",
        1,
    )
    max_response_bytes: int = _setting(
        16_000_000,
        "largest response body; a larger result is replaced by RESPONSE_TOO_LARGE",
        1024,
    )
    request_timeout_s: float = _setting(
        10.0, "longest a request may run; then it is stopped (DEADLINE_EXCEEDED)", 0.01
    )
    bound_wait_s: float = _setting(
        2.0,
        "how long a partition whose replicas are all behind a request's bound (a consistency "
        "token, a position, maxLag) waits for one to catch up, when the bound is within what "
        "was published, before it answers NOT_UP_TO_BOUND; 0: not at all",
        0,
    )
    max_batch_size: int = _setting(
        10, "most operations in one batched request (a JSON array); 0 turns batching off", 0
    )
    internal_timeout_s: float = _setting(
        2.0, "timeout of one internal call; a dead node costs at most this", 0.01
    )
    health_interval_s: float = _setting(
        1.0, "how often a node polls its peers' liveness and positions", 0.05
    )
    sync_interval_s: float = _setting(
        2.0, "how often a node checks the snapshot store for new versions", 0.05
    )
    sync_max_backoff_s: float = _setting(
        60.0, "longest wait before a version that failed to install is fetched again", 0.05
    )
    keep_alive_s: float = _setting(
        30.0,
        "how long a node keeps an idle connection open; its own pooled connections to "
        "peers expire after a third of that, so it never reuses one a peer is closing",
        1,
    )
    header_timeout_s: float = _setting(
        10.0,
        "how long a client may take to send a request's headers, from its first byte (from "
        "the connection, for the first request); then 408 and the connection is closed "
        "(nodes and the snapshot store; README: Limits)",
        0.1,
    )
    body_timeout_s: float = _setting(
        30.0,
        "how long a client may take to send a request's body, from its headers; then 408 "
        "(REQUEST_TIMEOUT) and the connection is closed (README: Limits)",
        0.1,
    )
    peer_connections: int = _setting(64, "most connections a node opens to its peers", 1)
    workers: int = _setting(
        0,
        "processes serving a node's port, sharing its state (README: Workers); 0: one per "
        "core the node may run on",
        0,
    )
    query_threads: int = _setting(
        4, "threads answering sub-queries on a node (DuckDB releases the GIL)", 1
    )
    duckdb_threads: int = _setting(2, "threads of a node's DuckDB instance", 1)
    duckdb_memory_limit: str = _setting(
        "1GB", "DuckDB's memory limit on a node: a size (512MB, 1.5GB, 2GiB) or a share (80%)"
    )
    max_global_mb: float = _setting(
        1024.0,
        "the most a node holds of the global stores, every partition's layers together; "
        "a node refuses versions past it (its sync errors and /ready say by how much) and "
        "keeps serving the ones it has",
        0,
    )
    document_cache_size: int = _setting(
        256, "parsed and validated GraphQL documents a node keeps", 0
    )
    document_cache_mb: int = _setting(
        64,
        "the memory those documents may take, estimated at 160 bytes per character of their "
        "text (a document of 1000 aliased lookups, ~90 KB, takes ~14 MB), each of the node's "
        "workers keeping its share; the newest is kept whatever its size, one over a "
        "sixteenth of the share from its second request on",
        1,
    )
    log_level: str = _setting(
        "info", f"the log level of every process (nodes, pipeline, store): {', '.join(LOG_LEVELS)}"
    )
    log_format: str = _setting(
        "text",
        "how they log to stderr: `text` (time, level, source, logger, message) or `json` (one "
        "object per line: `ts`, `level`, `source`, `logger`, `message`, `exception`)",
    )
    log_end: str = _setting(
        "published",
        "the end `maxLag` counts behind: `published` (the newest position the pipeline "
        "published, or any replica's past it) or `log` (the log's own end, read from "
        "[log] dir: for nodes on the log's machine)",
    )
    cors_origins: tuple[str, ...] = _setting(
        (),
        'origins (`"https://dash.example.com"`) whose pages may call the API from a browser, '
        'over HTTP and WebSocket; `"*"` for any; none: the node\'s own origin only',
    )
    max_subscriptions: int = _setting(
        10_000, "open subscriptions a node serves; more are refused (TOO_MANY_SUBSCRIPTIONS)", 0
    )
    max_subscriptions_per_connection: int = _setting(
        100, "open subscriptions on one WebSocket; more are refused (TOO_MANY_SUBSCRIPTIONS)", 1
    )
    connection_init_timeout_s: float = _setting(
        10.0, "how long a new WebSocket may take to send connection_init before it is closed", 0.1
    )
    max_token_lifetime_s: int = _setting(
        86_400,
        "with [auth]: the longest a bearer token may be valid for, `exp - iat` (`exp` - now "
        "when it has no `iat`); a longer-lived one is refused (UNAUTHENTICATED); 0: no bound. "
        "A token without `exp` is always refused",
        0,
    )
    introspection: bool = _setting(
        True,
        "answer GraphQL introspection (`__schema`, `__type`); false refuses it "
        "(GRAPHQL_VALIDATION_FAILED), and the playground then has no docs or completion",
    )
    federation: bool = _setting(
        False,
        "serve the schema as an Apollo Federation 2 subgraph: each keyed store's record an "
        "entity keyed by `key`, resolved through `_entities` in one routed batch (README: "
        "Federation)",
    )
    operations: str = _setting(
        "",
        "a `.graphql` file of named operations, relative to the project file, checked "
        "against the schema when a node starts; each is registered under the SHA-256 of its "
        "canonical text (`stategate operations` lists them; README: Persisted operations)",
    )
    allow_list: bool = _setting(
        False,
        "run only the operations of `operations`, sent by hash or as text in any formatting; "
        "anything else is refused (OPERATION_NOT_ALLOWED)",
    )
    persisted_query_cache_size: int = _setting(
        1000,
        "documents each worker of a node remembers by the hash a client sent with them "
        "(automatic persisted queries; each of at most 65536 characters), least recently used "
        "out first; 0 remembers none",
        0,
    )

    session_ttl_s: float = _setting(
        5.0,
        "with a coordinator: how long a node's registration outlives its last keep-alive (a "
        "node that dies is gone from the members after this)",
        1,
    )
    lost_node_grace_s: float = _setting(
        30.0,
        "with a coordinator: how long a lost node's replicas wait before they are placed "
        "again elsewhere (a restart within it moves nothing)",
        1,
    )
    max_warmups: int = _setting(
        2,
        "with a coordinator: replicas copied to a new place at once, each serving only once "
        "caught up with its partition's active",
        1,
    )

    trigger_interval_s: float = _setting(
        1.0,
        "how often at most the continuous pipeline (`stategate pipeline --follow`) starts a "
        "micro-batch of the records appended since the last one (at once after a longer one)",
        0.05,
    )
    max_records_per_batch: int = _setting(
        200_000, "most log records one micro-batch reads; the rest wait for the next", 1
    )
    driver_batch_records: int = _setting(
        50_000,
        "a micro-batch or run of at most this many new records is built in the pipeline's "
        "driver, without a Spark stage (whose fixed cost exceeds a small batch's work) and "
        "without starting Spark; a larger one (a first build of a big log, a catch-up, a "
        "burst) runs on the executors; 0: every one on the executors",
        0,
    )
    pipeline_niceness: int = _setting(
        10,
        "the niceness `stategate pipeline` runs at, with the processes it starts on its host "
        "(Spark's JVM): on a host it shares with nodes, reads first (README: Freshness); "
        "a pipeline started at a higher niceness keeps it; 0: as the nodes",
        0,
        19,
    )
    compact_after_deltas: int = _setting(
        64, "a partition's delta layers before they are folded into a new base", 1
    )
    compact_delta_ratio: float = _setting(
        0.5, "fold the deltas sooner once their bytes reach this fraction of the base's", 0.01
    )
    bad_records: str = _setting(
        "skip",
        "what the pipeline does with a log record that does not fit its topic's declaration: "
        "`skip` leaves it out of every store, counts it and writes it to the dead-letter "
        "file; `fail` stops the pipeline naming it (README: Bad records)",
    )

    def __post_init__(self) -> None:
        for item in fields(self):
            value, minimum = getattr(self, item.name), item.metadata["minimum"]
            if isinstance(value, float) and not math.isfinite(value):
                raise SettingsError(f"settings.{item.name} must be a finite number, not {value}")
            if minimum is not None and not value >= minimum:
                raise SettingsError(f"settings.{item.name} must be at least {minimum}, not {value}")
            maximum = item.metadata["maximum"]
            if maximum is not None and not value <= maximum:
                raise SettingsError(f"settings.{item.name} must be at most {maximum}, not {value}")
        if self.default_page_size > self.max_page_size:
            raise SettingsError("settings.default_page_size must not exceed max_page_size")
        if self.log_level not in LOG_LEVELS:
            raise SettingsError(f"settings.log_level must be one of {', '.join(LOG_LEVELS)}")
        if self.allow_list and not self.operations:
            raise SettingsError(
                "settings.allow_list needs settings.operations, the operations file"
            )
        if self.log_end not in LOG_ENDS:
            raise SettingsError(f"settings.log_end must be one of {', '.join(LOG_ENDS)}")
        if self.log_format not in LOG_FORMATS:
            raise SettingsError(f"settings.log_format must be one of {', '.join(LOG_FORMATS)}")
        if self.bad_records not in BAD_RECORDS:
            raise SettingsError(f"settings.bad_records must be one of {', '.join(BAD_RECORDS)}")
        if not MEMORY_LIMIT.fullmatch(self.duckdb_memory_limit):
            raise SettingsError(
                "settings.duckdb_memory_limit must be a size DuckDB reads (a number and a "
                f"unit: 512MB, 1.5GB, 2GiB; or a share of the memory: 80%), not "
                f"{self.duckdb_memory_limit!r}"
            )

    @property
    def peer_pool_expiry_s(self) -> float:
        return self.keep_alive_s / 3

    def in_driver(self, records: int) -> bool:
        """Whether work over this many log records is done in the pipeline's driver (a run, a
        micro-batch, a compaction), not on Spark's executors."""
        return records <= self.driver_batch_records

    @classmethod
    def parse(cls, raw: object) -> Settings:
        if not isinstance(raw, dict):
            raise SettingsError("[settings] must be a table")
        known = {item.name: item for item in fields(cls)}
        values: dict[str, Any] = {}
        for name, value in raw.items():
            if name in RETIRED:
                raise SettingsError(f"settings.{name} was {RETIRED[name]}")
            if name not in known:
                close = difflib.get_close_matches(name, list(known), n=1)
                hint = f"did you mean {close[0]!r}? " if close else ""
                raise SettingsError(
                    f"settings.{name} is not a setting ({hint}see the README's table)"
                )
            values[name] = _typed(name, value, type(known[name].default))
        return cls(**values)


def shown(value: object) -> str:
    """A setting's value as the README and `stategate settings` show it (lists as TOML)."""
    if isinstance(value, tuple):
        return "[" + ", ".join(f'"{item}"' for item in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value) if value != "" else '""'


def table() -> list[tuple[str, object, str]]:
    """(name, default, meaning) of every setting, in order."""
    return [(item.name, item.default, item.metadata["help"]) for item in fields(Settings)]


def _typed(name: str, value: object, expected: type) -> object:
    if expected is tuple:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise SettingsError(f"settings.{name} must be a list of strings, not {value!r}")
        return tuple(value)
    if expected is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, expected) or (isinstance(value, bool) and expected is not bool):
        kinds = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}
        kind = kinds[expected]
        raise SettingsError(f"settings.{name} must be {kind}, not {value!r}")
    return value
