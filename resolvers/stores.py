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

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated, Any

import strawberry
from strawberry.types.field import StrawberryField

from contracts.errors import Failure
from contracts.project import FieldType, Store
from gateway.queries import Row
from gateway.service import Page
from resolvers.context import Context
from resolvers.meta import ConsistencyInput, PageInfo, ResultMeta, demand, result_meta
from resolvers.scalars import Long

_PY: dict[FieldType, Any] = {
    "string": str,
    "int": int,
    "long": Long,
    "double": float,
    "boolean": bool,
}
Info = strawberry.Info[Context, None]
Make = Callable[[Row], Any]
FROM = strawberry.argument(name="from")


def store_fields(store: Store, default_page_size: int) -> list[StrawberryField]:
    if store.kind == "window":
        return _window_fields(store, default_page_size)
    return _keyed_fields(store, default_page_size)


def _keyed_fields(store: Store, page_size: int) -> list[StrawberryField]:
    name = _pascal(store.name)
    Record, K = _record_type(store), _PY[store.key_type]
    make = _row_builder(store, Record)
    Lookup = _object_type(
        f"{name}Lookup",
        {"key": K, "partition": int, "record": Record | None, "failure": Failure | None,
         "meta": ResultMeta},
    )  # fmt: skip
    Entry = _object_type(
        f"{name}Entry",
        {"key": K, "partition": int, "record": Record | None, "failure": Failure | None},
        description="One input key: record is null when the key has no value; failure is set "
        "when its partition could not answer.",
    )
    Batch = _object_type(f"{name}Batch", {"entries": _list_of(Entry), "meta": ResultMeta})
    Page = _page_type(name, Record)
    consistency = ConsistencyInput | None

    async def get(info: Info, key: Any, consistency: ConsistencyInput | None = None) -> Any:
        lookup = await info.context.queries.lookup(store, [key], demand(consistency))
        (entry,) = lookup.entries
        record = None if entry.row is None else make(entry.row)
        return Lookup(key=key, partition=entry.partition, record=record, failure=entry.failure,
                      meta=result_meta(lookup.meta))  # fmt: skip

    async def batch(
        info: Info, keys: list[Any], consistency: ConsistencyInput | None = None
    ) -> Any:
        lookup = await info.context.queries.lookup(store, keys, demand(consistency))
        entries = [
            Entry(key=e.key, partition=e.partition, record=None if e.row is None else make(e.row),
                  failure=e.failure)
            for e in lookup.entries
        ]  # fmt: skip
        return Batch(entries=entries, meta=result_meta(lookup.meta))

    async def range_(
        info: Info,
        from_: Any = None,
        to: Any = None,
        first: int = page_size,
        after: str | None = None,
        partitions: list[int] | None = None,
        consistency: ConsistencyInput | None = None,
    ) -> Any:
        page = await info.context.queries.range(
            store, from_, to, first, after, partitions, demand(consistency)
        )
        return _page(Page, page, make)

    async def prefix(
        info: Info,
        prefix: str,
        first: int = page_size,
        after: str | None = None,
        partitions: list[int] | None = None,
        consistency: ConsistencyInput | None = None,
    ) -> Any:
        page = await info.context.queries.prefix(
            store, prefix, first, after, partitions, demand(consistency)
        )
        return _page(Page, page, make)

    scan = {"first": int, "after": str | None, "partitions": list[int] | None}
    fields = [
        _field(
            _signed(get, Lookup | None, key=K, consistency=consistency),
            store.name,
            f"The {store.name} record of one key.",
        ),
        _field(
            _signed(batch, Batch | None, keys=_list_of(K), consistency=consistency),
            f"{store.name}Batch",
            "Many keys at once; entries align with the input keys.",
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
            f"{store.name}Range",
            "Records with from <= key <= to (both optional), in key order, one page at a time.",
        ),
    ]
    if store.key_type == "string":
        fields.append(
            _field(
                _signed(prefix, Page | None, prefix=str, **scan, consistency=consistency),
                f"{store.name}Prefix",
                "Records whose key starts with prefix, in key order, one page at a time.",
            )
        )
    return fields


def _window_fields(store: Store, page_size: int) -> list[StrawberryField]:
    name = _pascal(store.name)
    Record, K = _record_type(store), _PY[store.key_type]
    make = _row_builder(store, Record)
    Windows = _object_type(
        f"{name}Windows",
        {"key": K, "partition": int, "windows": _list_of(Record), "failure": Failure | None,
         "meta": ResultMeta},
    )  # fmt: skip
    Page = _page_type(name, Record)
    consistency = ConsistencyInput | None

    async def windows(
        info: Info, key: Any, from_: datetime, to: datetime,
        consistency: ConsistencyInput | None = None,
    ) -> Any:  # fmt: skip
        result = await info.context.queries.windows_of_key(
            store, key, _millis(from_), _millis(to), demand(consistency)
        )
        return Windows(key=key, partition=result.partition, windows=[make(r) for r in result.rows],
                       failure=result.failure, meta=result_meta(result.meta))  # fmt: skip

    async def all_(
        info: Info,
        from_: datetime,
        to: datetime,
        first: int = page_size,
        after: str | None = None,
        partitions: list[int] | None = None,
        consistency: ConsistencyInput | None = None,
    ) -> Any:
        page = await info.context.queries.windows(
            store, _millis(from_), _millis(to), first, after, partitions, demand(consistency)
        )
        return _page(Page, page, make)

    span = {"from_": Annotated[datetime, FROM], "to": datetime}
    return [
        _field(
            _signed(windows, Windows | None, key=K, **span, consistency=consistency),
            store.name,
            "The windows of one key whose start lies in [from, to].",
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
            f"{store.name}All",
            "Windows of all keys whose start lies in [from, to], in (key, window start) "
            "order, one page at a time.",
        ),
    ]


def _record_type(store: Store) -> type:
    annotations: dict[str, Any] = {"key": _PY[store.key_type]}
    if store.kind == "window":
        annotations["window_start"] = datetime
        annotations["window_end"] = datetime
    for column, ftype in store.columns.items():
        annotations[column] = _PY[ftype] | None
    description = f"A record of the {store.kind} store {store.name} (topic {store.topic.name})."
    return _object_type(_pascal(store.name), annotations, description)


def _row_builder(store: Store, record: type) -> Make:
    names = list(store.columns)
    if store.kind != "window":
        return lambda row: record(key=row[0], **dict(zip(names, row[1:], strict=True)))
    size = store.window_size_ms
    return lambda row: record(
        key=row[0],
        window_start=_datetime(row[1]),
        window_end=_datetime(row[1] + size),
        **dict(zip(names, row[2:], strict=True)),
    )


def _page(page_type: type, page: Page, make: Make) -> Any:
    return page_type(
        records=[make(r) for r in page.rows],
        page_info=PageInfo(has_next_page=page.has_next, end_cursor=page.end_cursor),
        meta=result_meta(page.meta),
    )


def _page_type(name: str, record: type) -> type:
    return _object_type(
        f"{name}Page", {"records": _list_of(record), "page_info": PageInfo, "meta": ResultMeta}
    )


def _list_of(item: Any) -> Any:
    """`list[item]` for a type made at run time."""
    return list.__class_getitem__(item)


def _object_type(name: str, fields: dict[str, Any], description: str | None = None) -> type:
    """A strawberry object type built at run time from field annotations."""
    made: type = strawberry.type(
        type(name, (), {"__annotations__": fields}), description=description
    )
    return made


def _signed(resolver: Any, returns: Any, **arguments: Any) -> Any:
    """Give a resolver the GraphQL signature of its store's run-time types."""
    resolver.__annotations__ = {"info": Info, **arguments, "return": returns}
    return resolver


def _field(resolver: Any, name: str, description: str) -> StrawberryField:
    resolver.__name__ = name  # create_type keys fields by python name: make them unique
    field: StrawberryField = strawberry.field(resolver, name=name, description=description)
    return field


def _pascal(name: str) -> str:
    return name[0].upper() + name[1:]


def _millis(moment: datetime) -> int:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def _datetime(millis: int) -> datetime:
    return datetime.fromtimestamp(millis / 1000, tz=UTC)
