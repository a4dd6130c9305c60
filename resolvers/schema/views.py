"""The building blocks of the generated store types: GraphQL object types over the query
service's values (views), root fields with their run-time signatures, and the Python types
of the declared field types."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from operator import attrgetter
from typing import Any

import strawberry
from strawberry.types.field import StrawberryField

from contracts import names
from contracts.project import FieldType, Store
from gateway.service import KeyVersions, Page
from resolvers.schema.annotations import AS_OF, COST, KEY, SCANS, Rows, Scans, reads
from resolvers.schema.context import Context
from resolvers.schema.meta import PageInfo, ResultMeta, result_meta
from resolvers.schema.scalars import Long

PY: dict[FieldType, Any] = {
    "string": str,
    "int": int,
    "long": Long,
    "double": float,
    "boolean": bool,
}
Info = strawberry.Info[Context, None]
Read = Callable[[Any], Any]
FROM = strawberry.argument(name="from")  # a Python keyword, as an argument's name
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MILLISECOND = timedelta(milliseconds=1)


def meta_of(result: Any) -> ResultMeta:
    return result_meta(result.meta)


def page_info(page: Page | KeyVersions) -> PageInfo:
    return PageInfo(has_next_page=page.has_next, end_cursor=page.end_cursor)


def page_type(name: str, record: type) -> type:
    return view(
        name,
        {
            "records": (list_of(record), attrgetter("rows")),
            "pageInfo": (PageInfo, page_info),
            "meta": (ResultMeta, meta_of),
        },
    )


def view(
    name: str,
    fields: dict[str, tuple[Any, Read]],
    description: str | None = None,
    entity: bool = False,
) -> type:
    """A GraphQL object type over a value of the query service (or a row): each field reads
    the value with its function (compiled plans call the function directly). Fields are
    named as given: a declared column is its own GraphQL name, whatever Python makes of it.
    An `entity` is a federation entity keyed by its `key` field (resolvers/schema/entities.py)."""
    namespace = {field: strawberry.field(resolver=reads(read, returns), name=field)
                 for field, (returns, read) in fields.items()}  # fmt: skip
    cls = type(name, (), namespace)
    if entity:
        keyed: type = strawberry.federation.type(cls, keys=[names.KEY], description=description)
        return keyed
    made: type = strawberry.type(cls, description=description)
    return made


def list_of(item: Any) -> Any:
    """`list[item]` for a type made at run time."""
    return list.__class_getitem__(item)


def signed(resolver: Any, returns: Any, **arguments: Any) -> Any:
    """Give a resolver the GraphQL signature of its store's run-time types."""
    resolver.__annotations__ = {"info": Info, **arguments, "return": returns}
    return resolver


def root_field(
    resolver: Any,
    name: str,
    description: str,
    rows: Rows | None = None,
    scans: Scans | None = None,
    key_of: Store | None = None,
    as_of: Store | None = None,
) -> StrawberryField:
    """A root field; `rows` says how many rows its arguments ask for (resolvers/execution/cost.py),
    one when not given, `scans` which store they make it read whole, if any, `key_of` the
    store whose record of one key it reads and `as_of` the one whose version of one key at
    a time it reads (resolvers/execution/key_lookup.py)."""
    resolver.__name__ = name  # create_type keys fields by python name: make them unique
    metadata: dict[str, Any] = {COST: rows} if rows else {}
    if scans:
        metadata[SCANS] = scans
    if key_of:
        metadata[KEY] = key_of
    if as_of:
        metadata[AS_OF] = as_of
    field: StrawberryField = strawberry.field(
        resolver, name=name, description=description, metadata=metadata or None
    )
    return field


def span_ms(from_: datetime, to: datetime) -> tuple[int, int]:
    """[from, to] as the whole milliseconds in it, exactly: from rounds up and to down, so
    no window starting outside the range asked is returned (a naive time is UTC)."""
    return -(-_since_epoch(from_) // MILLISECOND), _since_epoch(to) // MILLISECOND


def _since_epoch(moment: datetime) -> timedelta:
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)) - EPOCH
