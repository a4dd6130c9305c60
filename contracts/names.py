"""The GraphQL names a project's stores become, defined once: resolvers/schema/stores.py names the
schema with them, and loading a project refuses names that would clash (`check`).

A table or aggregate store `s` generates the root fields s, sBatch, sRange and, for string
keys, sPrefix, and the types S, SLookup, SEntry, SBatch and SPage; a window store the root
fields s and sAll, and the types S, SWindows and SPage; every store sList and sAggregate, and
the types SFilter, SOrderBy, SAggregate, SSums, SAverages and SExtremes; a versioned table
also sAsOf and sHistory, and the types SVersion, SAsOf and SHistory. A record (type S)
has the fields key, [windowStart, windowEnd,] then the store's columns, then its joins;
SOrderBy has KEY_ASC, KEY_DESC, [WINDOW_START_ASC, WINDOW_START_DESC,] and per column its
name in constant case with _ASC and _DESC (averagePrice: AVERAGE_PRICE_DESC).
Declared names are letters and digits, so none can be one of GraphQL's reserved `__` names,
and a Python keyword (`from`, `class`) is a field name like any other.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Literal

from contracts.entries import ConfigError

if TYPE_CHECKING:
    from contracts.project import Store

STORES, CLUSTER = "stores", "cluster"
ROOT_FIELDS = (STORES, CLUSTER)  # the schema's own root fields, beside the stores'
# The schema's own types (a test keeps this list and the schema in step) and GraphQL's scalars.
TYPES = (
    "Query",
    "Subscription",
    "ClusterInfo",
    "Column",
    "ConsistencyInput",
    "BooleanFilter",
    "DateTime",
    "FailureReason",
    "FloatFilter",
    "IntFilter",
    "Join",
    "Long",
    "LongFilter",
    "NodeInfo",
    "PageInfo",
    "PartitionInfo",
    "PartitionResult",
    "PositionInput",
    "Replica",
    "ReplicaRole",
    "ResultMeta",
    "StoreInfo",
    "StoreKind",
    "StringFilter",
    "TopicOffset",
)
GRAPHQL_SCALARS = ("String", "Int", "Float", "Boolean", "ID")
# Root type names GraphQL reads by convention: an SDL without a schema definition (ours)
# makes a type so named a root (a store's `Mutation` type would declare mutations)
CONVENTIONAL_ROOTS = ("Mutation",)
KEY, WINDOW_START, WINDOW_END = "key", "windowStart", "windowEnd"
KEYS = "keys"  # a batch field's argument: the keys asked
COMBINATORS = ("and", "or", "not")  # a filter's own fields, beside the key and the columns

FieldRole = Literal[
    "lookup", "batch", "range", "prefix", "list", "aggregate", "windows", "all", "asOf", "history"
]  # fmt: skip
TypeRole = Literal[
    "record", "lookup", "entry", "batch", "page", "windows",
    "filter", "orderBy", "aggregate", "sums", "averages", "extremes",
    "version", "asOf", "history",
]  # fmt: skip
_KEYED_FIELDS: dict[FieldRole, str] = {"lookup": "", "batch": "Batch", "range": "Range"}
_PREFIX: dict[FieldRole, str] = {"prefix": "Prefix"}  # string keys only
_BY_VALUE: dict[FieldRole, str] = {"list": "List", "aggregate": "Aggregate"}
_WINDOW_FIELDS: dict[FieldRole, str] = {"windows": "", "all": "All"}
_VERSIONED: dict[FieldRole, str] = {"asOf": "AsOf", "history": "History"}  # history stores
# The roles whose root field names the partitions it reads by a key argument (a client that
# holds the partition map can send it to a replica of them: GET /cluster's routes).
_ROUTED_BY: dict[FieldRole, str] = {
    "lookup": KEY, "windows": KEY, "asOf": KEY, "history": KEY, "batch": KEYS,
}  # fmt: skip
_VERSIONED_TYPES: dict[TypeRole, str] = {"version": "Version", "asOf": "AsOf", "history": "History"}
_BY_VALUE_TYPES: dict[TypeRole, str] = {
    "filter": "Filter",
    "orderBy": "OrderBy",
    "aggregate": "Aggregate",
    "sums": "Sums",
    "averages": "Averages",
    "extremes": "Extremes",
}
_KEYED_TYPES: dict[TypeRole, str] = {
    "record": "",
    "lookup": "Lookup",
    "entry": "Entry",
    "batch": "Batch",
    "page": "Page",
    **_BY_VALUE_TYPES,
}
_WINDOW_TYPES: dict[TypeRole, str] = {
    "record": "",
    "windows": "Windows",
    "page": "Page",
    **_BY_VALUE_TYPES,
}


def root_fields(store: Store) -> dict[FieldRole, str]:
    """The store's root fields by role: its name and a suffix."""
    if store.kind == "window":
        suffixes = _WINDOW_FIELDS | _BY_VALUE
    else:
        prefix = _PREFIX if store.key_type == "string" else {}
        suffixes = _KEYED_FIELDS | prefix | _BY_VALUE | (_VERSIONED if store.versioned else {})
    return {role: store.declared_name + suffix for role, suffix in suffixes.items()}


def routed_fields(store: Store) -> dict[str, str]:
    """The store's root fields that read the partitions of their key argument: field ->
    argument (none for a global store, whose every partition each node holds)."""
    if store.is_global:
        return {}
    return {
        field: _ROUTED_BY[role] for role, field in root_fields(store).items() if role in _ROUTED_BY
    }


def types(store: Store) -> dict[TypeRole, str]:
    """The store's types by role: its name capitalized and a suffix."""
    suffixes = _WINDOW_TYPES if store.kind == "window" else _KEYED_TYPES
    if store.versioned:
        suffixes = suffixes | _VERSIONED_TYPES
    name = store.declared_name
    record = name[:1].upper() + name[1:]
    return {role: record + suffix for role, suffix in suffixes.items()}


def own_fields(store: Store) -> tuple[str, ...]:
    """The fields every record of the store has before its columns."""
    return (KEY, WINDOW_START, WINDOW_END) if store.kind == "window" else (KEY,)


def constant_case(name: str) -> str:
    """A field's name as an enum value spells it: averagePrice -> AVERAGE_PRICE. No two
    fields of a store spell alike: names are letters and digits, unique ignoring case."""
    spelled = [
        f"_{c}" if c.isupper() and i and (name[i - 1].islower() or name[i - 1].isdigit()) else c
        for i, c in enumerate(name)
    ]
    return "".join(spelled).upper()


def order_values(store: Store) -> dict[str, tuple[str, bool]]:
    """SOrderBy's values: each names a field as rows hold it and whether it descends."""
    fields = {KEY: KEY}
    if store.kind == "window":
        fields[WINDOW_START] = "window_start"
    fields.update({column: column for column in store.columns})
    return {
        f"{constant_case(name)}_{direction}": (field, direction == "DESC")
        for name, field in fields.items()
        for direction in ("ASC", "DESC")
    }


def check(stores: Iterable[Store]) -> None:
    """Refuses a store whose generated names clash with another's or with the schema's own,
    or a column named like a field its records (or its filters) already have."""
    fields = dict.fromkeys(ROOT_FIELDS, "a built-in root field")
    named = dict.fromkeys((*TYPES, *GRAPHQL_SCALARS), "a built-in type")
    named.update(dict.fromkeys(CONVENTIONAL_ROOTS, "GraphQL's mutation root"))
    for store in stores:
        _claim(store, "field", root_fields(store).values(), fields)
        _claim(store, "type", types(store).values(), named)
        for column in (*store.columns, *(join.name for join in store.joins)):
            if column in own_fields(store):
                raise ConfigError(
                    f"store {store.name!r}: its column {column!r} clashes with the field "
                    f"{column!r} every {store.kind} record has"
                )
            if column in COMBINATORS:
                raise ConfigError(
                    f"store {store.name!r}: its column {column!r} clashes with the filter's "
                    f"{column!r}; name it otherwise"
                )


def _claim(store: Store, what: str, names: Iterable[str], owners: dict[str, str]) -> None:
    for name in names:
        if name in owners:
            raise ConfigError(f"store {store.name!r}: its {what} {name!r} is {owners[name]}")
        owners[name] = f"also generated by store {store.name!r}"
