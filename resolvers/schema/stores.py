"""Typed GraphQL fields generated from the store declarations.

For a table or aggregate store `s` with record type `S`: s(key), sBatch(keys), sRange(from,
to) and, for string keys, sPrefix(prefix). For a window store: s(key, from, to) and
sAll(from, to). Every result carries `meta: ResultMeta`.

The types of a store are created at run time, so each resolver is written against `Any` and
given its GraphQL signature afterwards (`_signed`): strawberry reads the annotations the
resolver carries, mypy checks the code. The work itself is the query service's
(gateway/service.py); resolvers only translate arguments and results.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from operator import attrgetter, itemgetter
from typing import Annotated, Any

import strawberry
from strawberry.types.field import StrawberryField

from contracts import names
from contracts.errors import Failure
from contracts.project import FieldType, Store
from contracts.settings import Settings
from gateway.service import Page
from resolvers.schema.annotations import COST, Rows, reads
from resolvers.schema.context import Context
from resolvers.schema.meta import ConsistencyInput, PageInfo, ResultMeta, demand, result_meta
from resolvers.schema.scalars import Long

_PY: dict[FieldType, Any] = {
    "string": str,
    "int": int,
    "long": Long,
    "double": float,
    "boolean": bool,
}
Info = strawberry.Info[Context, None]
Read = Callable[[Any], Any]
FROM = strawberry.argument(name="from")
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MILLISECOND = timedelta(milliseconds=1)


def store_fields(store: Store, settings: Settings) -> list[StrawberryField]:
    if store.kind == "window":
        return _window_fields(store, settings)
    return _keyed_fields(store, settings)


def _keyed_fields(store: Store, settings: Settings) -> list[StrawberryField]:
    page_size = settings.default_page_size
    named, types = names.root_fields(store), names.types(store)
    Record, K = _record_type(store), _PY[store.key_type]
    first = itemgetter(0)  # the one entry of a one-key lookup
    Lookup = _view(
        types["lookup"],
        {
            "key": (K, lambda lookup: first(lookup.entries).key),
            "partition": (int, lambda lookup: first(lookup.entries).partition),
            "record": (Record | None, lambda lookup: first(lookup.entries).row),
            "failure": (Failure | None, lambda lookup: first(lookup.entries).failure),
            "meta": (ResultMeta, _meta),
        },
    )
    Entry = _view(
        types["entry"],
        {
            "key": (K, attrgetter("key")),
            "partition": (int, attrgetter("partition")),
            "record": (Record | None, attrgetter("row")),
            "failure": (Failure | None, attrgetter("failure")),
        },
        description="One input key: record is null when the key has no value; failure is set "
        "when its partition could not answer.",
    )
    Batch = _view(
        types["batch"],
        {"entries": (_list_of(Entry), attrgetter("entries")), "meta": (ResultMeta, _meta)},
    )
    Page = _page_type(types["page"], Record)
    consistency = ConsistencyInput | None

    async def get(info: Info, key: Any, consistency: ConsistencyInput | None = None) -> Any:
        info.context.authorize(store.name)
        return await info.context.queries.lookup(store, [key], demand(consistency))

    async def batch(
        info: Info, keys: list[Any], consistency: ConsistencyInput | None = None
    ) -> Any:
        info.context.authorize(store.name)
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
        info.context.authorize(store.name)
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
        info.context.authorize(store.name)
        return await info.context.queries.prefix(
            store, prefix, first, after, partitions, demand(consistency)
        )

    scan = {"first": int, "after": str | None, "partitions": list[int] | None}
    fields = [
        _field(
            _signed(get, Lookup | None, key=K, consistency=consistency),
            named["lookup"],
            f"The {store.name} record of one key.",
        ),
        _field(
            _signed(batch, Batch | None, keys=_list_of(K), consistency=consistency),
            named["batch"],
            "Many keys at once; entries align with the input keys.",
            _keys(settings.max_keys_per_field),
        ),
        _field(
            _signed(
                range_,
                Page | None,
                from_=Annotated[K | None, FROM],
                to=K | None,
                **scan,
                consistency=consistency,
            ),  # fmt: skip
            named["range"],
            "Records with from <= key <= to (both optional), in key order, one page at a time.",
            _page(settings),
        ),
    ]
    if "prefix" in named:
        fields.append(
            _field(
                _signed(prefix, Page | None, prefix=str, **scan, consistency=consistency),
                named["prefix"],
                "Records whose key starts with prefix, in key order, one page at a time.",
                _page(settings),
            )
        )
    return fields


def _window_fields(store: Store, settings: Settings) -> list[StrawberryField]:
    page_size = settings.default_page_size
    named, types = names.root_fields(store), names.types(store)
    Record, K = _record_type(store), _PY[store.key_type]
    Windows = _view(
        types["windows"],
        {
            "key": (K, attrgetter("key")),
            "partition": (int, attrgetter("partition")),
            "windows": (_list_of(Record), attrgetter("rows")),
            "failure": (Failure | None, attrgetter("failure")),
            "meta": (ResultMeta, _meta),
        },
    )
    Page = _page_type(types["page"], Record)
    consistency = ConsistencyInput | None

    async def windows(
        info: Info, key: Any, from_: datetime, to: datetime,
        consistency: ConsistencyInput | None = None,
    ) -> Any:  # fmt: skip
        info.context.authorize(store.name)
        return await info.context.queries.windows_of_key(
            store, key, *_span(from_, to), demand(consistency)
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
        info.context.authorize(store.name)
        return await info.context.queries.windows(
            store, *_span(from_, to), first, after, partitions, demand(consistency)
        )

    span = {"from_": Annotated[datetime, FROM], "to": datetime}
    return [
        _field(
            _signed(windows, Windows | None, key=K, **span, consistency=consistency),
            named["windows"],
            "The windows of one key whose start lies in [from, to].",
            _windows(store.window_advance_ms, settings.max_page_size),
        ),
        _field(
            _signed(
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
            _page(settings),
        ),
    ]


def _record_type(store: Store) -> type:
    """A record: a view of one row (key, [window start,] then Store.columns)."""
    fields: dict[str, tuple[Any, Read]] = {names.KEY: (_PY[store.key_type], itemgetter(0))}
    offset = 1
    if store.kind == "window":
        size = store.window_size_ms
        fields[names.WINDOW_START] = (datetime, lambda row: _datetime(row[1]))
        fields[names.WINDOW_END] = (datetime, lambda row: _datetime(row[1] + size))
        offset = 2
    for i, (column, ftype) in enumerate(store.columns.items()):
        fields[column] = (_PY[ftype] | None, itemgetter(offset + i))
    description = f"A record of the {store.kind} store {store.name} (topic {store.topic.name})."
    return _view(names.types(store)["record"], fields, description)


def _meta(result: Any) -> ResultMeta:
    return result_meta(result.meta)


def _page_info(page: Page) -> PageInfo:
    return PageInfo(has_next_page=page.has_next, end_cursor=page.end_cursor)


def _page_type(name: str, record: type) -> type:
    return _view(
        name,
        {
            "records": (_list_of(record), attrgetter("rows")),
            "pageInfo": (PageInfo, _page_info),
            "meta": (ResultMeta, _meta),
        },
    )


def _view(name: str, fields: dict[str, tuple[Any, Read]], description: str | None = None) -> type:
    """A GraphQL object type over a value of the query service (or a row): each field reads
    the value with its function (compiled plans call the function directly). Fields are
    named as given: a declared column is its own GraphQL name, whatever Python makes of it."""
    namespace = {field: strawberry.field(resolver=reads(read, returns), name=field)
                 for field, (returns, read) in fields.items()}  # fmt: skip
    made: type = strawberry.type(type(name, (), namespace), description=description)
    return made


def _list_of(item: Any) -> Any:
    """`list[item]` for a type made at run time."""
    return list.__class_getitem__(item)


def _signed(resolver: Any, returns: Any, **arguments: Any) -> Any:
    """Give a resolver the GraphQL signature of its store's run-time types."""
    resolver.__annotations__ = {"info": Info, **arguments, "return": returns}
    return resolver


def _field(resolver: Any, name: str, description: str, rows: Rows | None = None) -> StrawberryField:
    """A root field; `rows` says how many rows its arguments ask for (resolvers/execution/cost.py),
    one when not given."""
    resolver.__name__ = name  # create_type keys fields by python name: make them unique
    metadata = {COST: rows} if rows else None
    field: StrawberryField = strawberry.field(
        resolver, name=name, description=description, metadata=metadata
    )
    return field


# Rows past a limit are counted at the limit: the limit's own error is the one to give.

# What a row of a page weighs, so that a cost unit takes at most about request_timeout_s / 2
# over max_request_cost (50 µs) on the reference machine. `python -m bench.calibrate` on the
# small workload (2026-11-25, 2 cores at load 3 to 26; bench/RESULTS.md, "Cost calibration"):
# a page row took 17 to 67 µs (a page reads `first` rows of every partition and merges them),
# a key of a batch 3 to 5 µs, a window of one key 8 to 27 µs. One-key lookups (40 to 530 µs
# each) are bounded by max_aliases and max_document_tokens, not by the cost.
PAGE_ROW_WEIGHT = 2


def _keys(most: int) -> Rows:
    def rows(arguments: Mapping[str, Any]) -> int:
        keys = arguments.get("keys")
        return min(most, len(keys)) if isinstance(keys, list) else 1

    return rows


def _page(settings: Settings) -> Rows:
    default, most = settings.default_page_size, settings.max_page_size

    def rows(arguments: Mapping[str, Any]) -> int:
        first = arguments.get("first", default)
        return PAGE_ROW_WEIGHT * (min(most, first) if isinstance(first, int) else default)

    return rows


def _windows(advance_ms: int, most: int) -> Rows:
    """The windows starting in [from, to]."""

    def rows(arguments: Mapping[str, Any]) -> int:
        try:
            start, end = (datetime.fromisoformat(arguments[k]) for k in ("from", "to"))
            span_ms = (end - start).total_seconds() * 1000
        except (KeyError, TypeError, ValueError):
            return 1  # not a valid range: refused before it runs
        return min(most, max(1, int(span_ms // advance_ms) + 1))

    return rows


def _span(from_: datetime, to: datetime) -> tuple[int, int]:
    """[from, to] as the whole milliseconds in it, exactly: from rounds up and to down, so
    no window starting outside the range asked is returned (a naive time is UTC)."""
    return -(-_since_epoch(from_) // MILLISECOND), _since_epoch(to) // MILLISECOND


def _since_epoch(moment: datetime) -> timedelta:
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)) - EPOCH


def _datetime(millis: int) -> datetime:
    return datetime.fromtimestamp(millis / 1000, tz=UTC)
