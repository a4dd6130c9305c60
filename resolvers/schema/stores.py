"""Typed GraphQL fields generated from the store declarations.

For a table or aggregate store `s` with record type `S`: s(key), sBatch(keys), sRange(from,
to), for string keys sPrefix(prefix), and sList and sAggregate (resolvers/schema/by_value.py);
a versioned table also sAsOf(key, asOf) and sHistory(key, from, to). For a window store:
s(key, from, to) and sAll(from, to). Every result carries `meta: ResultMeta`.

The types of a store are created at run time, so each resolver is written against `Any` and
given its GraphQL signature afterwards (`signed`): strawberry reads the annotations the
resolver carries, mypy checks the code. The work itself is the query service's
(gateway/service.py); resolvers only translate arguments and results.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from functools import lru_cache
from operator import attrgetter, itemgetter
from typing import Annotated, Any

from strawberry.types.field import StrawberryField

from contracts import names
from contracts.clock import duration
from contracts.errors import Failure
from contracts.project import Store
from contracts.settings import Settings
from resolvers.schema.by_value import value_fields
from resolvers.schema.costs import keys_rows, page_rows, windows_rows
from resolvers.schema.meta import ConsistencyInput, PageInfo, ResultMeta, demand
from resolvers.schema.views import (
    FROM,
    PY,
    Info,
    Read,
    list_of,
    meta_of,
    page_info,
    page_type,
    root_field,
    signed,
    span_ms,
    view,
)

INSTANTS_CACHED = 65_536  # times kept as datetimes (a week of hourly windows: 168)


def record_types(stores: Iterable[Store], federated: bool = False) -> dict[str, type]:
    """Each store's record type (a view of one row), made once: a join's field has the
    joined store's type. Joins name global stores, which declare none themselves.
    `federated`: a keyed store's record is a federation entity."""
    made: dict[str, type] = {}
    for store in sorted(stores, key=lambda s: bool(s.joins)):
        made[store.declared_name] = _record_type(store, made, federated)
    return made


def store_fields(store: Store, settings: Settings, Record: type) -> list[StrawberryField]:
    if store.kind == "window":
        return _window_fields(store, settings, Record)
    return _keyed_fields(store, settings, Record)


def _keyed_fields(store: Store, settings: Settings, Record: type) -> list[StrawberryField]:
    page_size = settings.default_page_size
    named, types = names.root_fields(store), names.types(store)
    K = PY[store.key_type]
    first = itemgetter(0)  # the one entry of a one-key lookup
    Lookup = view(
        types["lookup"],
        {
            "key": (K, lambda lookup: first(lookup.entries).key),
            "partition": (int, lambda lookup: first(lookup.entries).partition),
            "record": (Record | None, lambda lookup: first(lookup.entries).row),
            "failure": (Failure | None, lambda lookup: first(lookup.entries).failure),
            "meta": (ResultMeta, meta_of),
        },
    )
    Entry = view(
        types["entry"],
        {
            "key": (K, attrgetter("key")),
            "partition": (int, attrgetter("partition")),
            "record": (Record | None, attrgetter("row")),
            "failure": (Failure | None, attrgetter("failure")),
        },
        description="One input key: record is null when the key has no value; failure is set "
        "when its partition could not answer, or (FORBIDDEN) the token may not read its row.",
    )
    Batch = view(
        types["batch"],
        {"entries": (list_of(Entry), attrgetter("entries")), "meta": (ResultMeta, meta_of)},
    )
    Page = page_type(types["page"], Record)
    consistency = ConsistencyInput | None

    async def get(info: Info, key: Any, consistency: ConsistencyInput | None = None) -> Any:
        info.context.authorize(store.declared_name)
        return await info.context.queries.lookup(store, [key], demand(consistency))

    async def batch(
        info: Info, keys: list[Any], consistency: ConsistencyInput | None = None
    ) -> Any:
        info.context.authorize(store.declared_name)
        return await info.context.queries.lookup(store, keys, demand(consistency))

    async def range_(
        info: Info,
        from_: Any = None,
        to: Any = None,
        first: int = page_size,
        after: str | None = None,
        partitions: list[int] | None = None,
        consistency: ConsistencyInput | None = None,
    ) -> Any:
        info.context.authorize(store.declared_name)
        return await info.context.queries.range(
            store, from_, to, first, after, partitions, demand(consistency)
        )

    async def prefix(
        info: Info,
        prefix: str,
        first: int = page_size,
        after: str | None = None,
        partitions: list[int] | None = None,
        consistency: ConsistencyInput | None = None,
    ) -> Any:
        info.context.authorize(store.declared_name)
        return await info.context.queries.prefix(
            store, prefix, first, after, partitions, demand(consistency)
        )

    scan = {"first": int, "after": str | None, "partitions": list[int] | None}
    fields = [
        root_field(
            signed(get, Lookup | None, key=K, consistency=consistency),
            named["lookup"],
            f"The {store.declared_name} record of one key.",
            key_of=store,
        ),
        root_field(
            signed(batch, Batch | None, keys=list_of(K), consistency=consistency),
            named["batch"],
            "Many keys at once; entries align with the input keys.",
            keys_rows(settings.max_keys_per_field),
        ),
        root_field(
            signed(
                range_,
                Page | None,
                from_=Annotated[K | None, FROM],
                to=K | None,
                **scan,
                consistency=consistency,
            ),  # fmt: skip
            named["range"],
            "Records with from <= key <= to (both optional), in key order, one page at a time.",
            page_rows(settings),
        ),
    ]
    if "prefix" in named:
        fields.append(
            root_field(
                signed(prefix, Page | None, prefix=str, **scan, consistency=consistency),
                named["prefix"],
                "Records whose key starts with prefix, in key order, one page at a time.",
                page_rows(settings),
            )
        )
    if store.versioned:
        fields += _versioned_fields(store, settings, Record)
    return [*fields, *value_fields(store, settings, Page)]


def _versioned_fields(store: Store, settings: Settings, Record: type) -> list[StrawberryField]:
    """sAsOf and sHistory: a versioned table's versions (KIP-960, KIP-968)."""
    named, types = names.root_fields(store), names.types(store)
    K = PY[store.key_type]
    Version = view(
        types["version"],
        {
            "validFrom": (datetime, lambda row: _datetime(row[1])),
            "validTo": (datetime | None, lambda row: None if row[2] is None else _datetime(row[2])),
            "record": (Record, lambda row: [row[0], *row[3:]]),
        },
        description=f"A version of a {store.declared_name} record: its value from validFrom (its "
        "record's timestamp) until validTo (the next version's; null while it is the latest).",
    )
    AsOf = view(
        types["asOf"],
        {
            "key": (K, attrgetter("key")),
            "partition": (int, attrgetter("partition")),
            "version": (Version | None, lambda found: found.rows[0] if found.rows else None),
            "failure": (Failure | None, attrgetter("failure")),
            "meta": (ResultMeta, meta_of),
        },
    )
    History = view(
        types["history"],
        {
            "key": (K, attrgetter("key")),
            "partition": (int, attrgetter("partition")),
            "versions": (list_of(Version), attrgetter("rows")),
            "pageInfo": (PageInfo, page_info),
            "failure": (Failure | None, attrgetter("failure")),
            "meta": (ResultMeta, meta_of),
        },
    )
    consistency = ConsistencyInput | None

    async def as_of(
        info: Info, key: Any, asOf: datetime, consistency: ConsistencyInput | None = None
    ) -> Any:
        info.context.authorize(store.declared_name)
        at_ms = span_ms(asOf, asOf)[1]
        return await info.context.queries.versions(
            store, key, at_ms, at_ms, 1, None, demand(consistency)
        )

    async def history(
        info: Info,
        key: Any,
        from_: datetime | None = None,
        to: datetime | None = None,
        first: int = settings.default_page_size,
        after: str | None = None,
        consistency: ConsistencyInput | None = None,
    ) -> Any:
        info.context.authorize(store.declared_name)
        from_ms = None if from_ is None else span_ms(from_, from_)[1]
        to_ms = None if to is None else span_ms(to, to)[1]
        return await info.context.queries.versions(
            store, key, from_ms, to_ms, first, after, demand(consistency)
        )

    kept = duration(store.history_ms)
    return [
        root_field(
            signed(as_of, AsOf | None, key=K, asOf=datetime, consistency=consistency),
            named["asOf"],
            f"The version of one key valid at asOf (event time): null when it had no value "
            f"then. The store keeps {kept} of history before its newest record's time: an "
            f"earlier asOf is refused with OUTSIDE_HISTORY.",
            as_of=store,
        ),
        root_field(
            signed(
                history,
                History | None,
                key=K,
                from_=Annotated[datetime | None, FROM],
                to=datetime | None,
                first=int,
                after=str | None,
                consistency=consistency,
            ),  # fmt: skip
            named["history"],
            f"The versions of one key valid at some time in [from, to], by validFrom, one "
            f"page at a time: from defaults to the oldest time the history holds ({kept} "
            f"before the newest record's), to to none.",
            page_rows(settings),
        ),
    ]


def _window_fields(store: Store, settings: Settings, Record: type) -> list[StrawberryField]:
    page_size = settings.default_page_size
    named, types = names.root_fields(store), names.types(store)
    K = PY[store.key_type]
    Windows = view(
        types["windows"],
        {
            "key": (K, attrgetter("key")),
            "partition": (int, attrgetter("partition")),
            "windows": (list_of(Record), attrgetter("rows")),
            "failure": (Failure | None, attrgetter("failure")),
            "meta": (ResultMeta, meta_of),
        },
    )
    Page = page_type(types["page"], Record)
    consistency = ConsistencyInput | None

    async def windows(
        info: Info, key: Any, from_: datetime, to: datetime,
        consistency: ConsistencyInput | None = None,
    ) -> Any:  # fmt: skip
        info.context.authorize(store.declared_name)
        return await info.context.queries.windows_of_key(
            store, key, *span_ms(from_, to), demand(consistency)
        )

    async def all_(
        info: Info,
        from_: datetime,
        to: datetime,
        first: int = page_size,
        after: str | None = None,
        partitions: list[int] | None = None,
        consistency: ConsistencyInput | None = None,
    ) -> Any:
        info.context.authorize(store.declared_name)
        return await info.context.queries.windows(
            store, *span_ms(from_, to), first, after, partitions, demand(consistency)
        )

    span = {"from_": Annotated[datetime, FROM], "to": datetime}
    return [
        root_field(
            signed(windows, Windows | None, key=K, **span, consistency=consistency),
            named["windows"],
            "The windows of one key whose start lies in [from, to].",
            windows_rows(store.window_advance_ms, settings.max_page_size),
        ),
        root_field(
            signed(
                all_,
                Page | None,
                **span,
                first=int,
                after=str | None,
                partitions=list[int] | None,
                consistency=consistency,
            ),  # fmt: skip
            named["all"],
            "Windows of all keys whose start lies in [from, to], in (key, window start) "
            "order, one page at a time.",
            page_rows(settings),
        ),
        *value_fields(store, settings, Page),
    ]


def _record_type(store: Store, records: dict[str, type], federated: bool) -> type:
    """A record: a view of one row (key, [window start,] then Store.columns, then each
    join's record: gateway/service.py adds them to the rows of a request that selects
    them)."""
    fields: dict[str, tuple[Any, Read]] = {names.KEY: (PY[store.key_type], itemgetter(0))}
    offset = 1
    if store.kind == "window":
        size = store.window_size_ms
        fields[names.WINDOW_START] = (datetime, lambda row: _datetime(row[1]))
        fields[names.WINDOW_END] = (datetime, lambda row: _datetime(row[1] + size))
        offset = 2
    for i, (column, ftype) in enumerate(store.columns.items()):
        fields[column] = (PY[ftype] | None, itemgetter(offset + i))
    offset += len(store.columns)
    for i, join in enumerate(store.joins):
        fields[join.name] = (records[join.store] | None, itemgetter(offset + i))
    description = (
        f"A record of the {store.kind} store {store.declared_name} (topic {store.topic.name})."
    )
    if store.is_global:
        description += " The store is global: every node holds all of it and answers alone."
    for join in store.joins:
        description += (
            f" {join.name}: the {join.store} record whose key is this record's {join.field} "
            f"(null when it has none), as of the positions meta.partitions states for "
            f"{join.store}."
        )
    keyed = federated and store.kind != "window"  # a window's record has no key of its own
    return view(names.types(store)["record"], fields, description, entity=keyed)


@lru_cache(maxsize=INSTANTS_CACHED)
def _datetime(millis: int) -> datetime:
    """A time of the state as the API shows it (memoized: windows repeat their starts)."""
    return datetime.fromtimestamp(millis / 1000, tz=UTC)
