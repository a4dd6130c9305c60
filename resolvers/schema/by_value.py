"""Asking a store by value, in the generated schema. For a store `s` with record type S:

- sList(where: SFilter, orderBy: [SOrderBy!], first, after, partitions, consistency): SPage,
  the rows that pass the filter in the order asked, then by key [and window start]; a top-K
  is its first page;
- sAggregate(where, partitions, consistency): SAggregate, totalCount and per column sum, avg
  (numbers), min and max (numbers and strings) over the rows that pass the filter.

A window store's take `from` and `to` first, the window starts' bounds, as sAll does.

SFilter has a condition per field (key and columns: StringFilter, IntFilter, LongFilter,
FloatFilter or BooleanFilter) and `and`, `or`, `not`; the conditions given in one SFilter
must all hold. An explicit null where a condition or an operand goes is refused: it matches
nothing, which is never what was meant (isNull asks for nulls).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from datetime import datetime
from operator import attrgetter, itemgetter
from typing import Annotated, Any

import strawberry
from strawberry.types.field import StrawberryField

from contracts import names
from contracts.conditions import KEY, AllOf, AnyOf, Condition, Filter, Not, Op
from contracts.errors import GatewayError, bad_input
from contracts.project import FieldType, Store
from contracts.settings import Settings
from gateway.model.filters import NUMBERS, ORDERED, Sort
from gateway.model.limits import MAX_FILTER_DEPTH
from gateway.service import StoreTotals
from resolvers.schema.annotations import Scans
from resolvers.schema.costs import page_rows
from resolvers.schema.meta import ConsistencyInput, ResultMeta, demand
from resolvers.schema.scalars import Long
from resolvers.schema.views import (
    FROM,
    PY,
    Info,
    list_of,
    meta_of,
    root_field,
    signed,
    span_ms,
    view,
)

_COMPARED: tuple[Op, ...] = ("eq", "ne", "in", "lt", "lte", "gt", "gte", "isNull")
OPS_OF: dict[FieldType, tuple[Op, ...]] = {
    "string": (*_COMPARED, "startsWith"),
    "int": _COMPARED,
    "long": _COMPARED,
    "double": _COMPARED,
    "boolean": ("eq", "ne", "isNull"),
}
_ATTRIBUTE: dict[Op, str] = {"in": "in_", "isNull": "is_null", "startsWith": "starts_with"}
_OP_DESCRIPTIONS: dict[Op, str] = {
    "eq": "Equal to.",
    "ne": "Not equal to (a null value is neither).",
    "in": "Equal to one of these.",
    "lt": "Less than.",
    "lte": "Less than or equal to.",
    "gt": "Greater than.",
    "gte": "Greater than or equal to.",
    "isNull": "true: the value is null; false: it is not.",
    "startsWith": "Starts with this prefix (case-sensitive).",
}
_ARTICLE = {"int": "an"}
_TYPE_NAMES: dict[FieldType, str] = {
    "string": "StringFilter",
    "int": "IntFilter",
    "long": "LongFilter",
    "double": "FloatFilter",
    "boolean": "BooleanFilter",
}


def _attribute(op: Op) -> str:
    return _ATTRIBUTE.get(op, op)


def _condition_type(kind: FieldType) -> type:
    """The conditions on one field of a type; those given must all hold."""
    annotations: dict[str, Any] = {}
    namespace: dict[str, Any] = {"__annotations__": annotations}
    for op in OPS_OF[kind]:
        operand = list_of(PY[kind]) if op == "in" else bool if op == "isNull" else PY[kind]
        annotations[_attribute(op)] = operand | None
        namespace[_attribute(op)] = strawberry.field(
            default=strawberry.UNSET, name=op, description=_OP_DESCRIPTIONS[op]
        )
    article = _ARTICLE.get(kind, "a")
    description = f"Conditions on {article} {kind} field; those given must all hold."
    made: type = strawberry.input(type(_TYPE_NAMES[kind], (), namespace), description=description)
    return made


CONDITIONS: dict[FieldType, type] = {kind: _condition_type(kind) for kind in _TYPE_NAMES}


def value_fields(store: Store, settings: Settings, Page: type) -> list[StrawberryField]:
    """sList and sAggregate of a store whose page type is `Page` (a window store's take the
    window starts' [from, to], as sAll does)."""
    named = names.root_fields(store)
    Filter_, to_filter = _filter_type(store)
    OrderBy, to_sorts = _order_type(store)
    Totals = _aggregate_type(store)
    consistency = ConsistencyInput | None
    page_size = settings.default_page_size

    async def select(
        info: Info, where: Any, order_by: Any, first: int, after: str | None,
        partitions: list[int] | None, consistency: ConsistencyInput | None,
        window: tuple[int, int] | None,
    ) -> Any:  # fmt: skip
        info.context.authorize(store.declared_name)
        return await info.context.queries.select(
            store, to_filter(where), to_sorts(order_by), first, after, partitions,
            demand(consistency), window,
        )  # fmt: skip

    async def totals(
        info: Info, where: Any, partitions: list[int] | None,
        consistency: ConsistencyInput | None, window: tuple[int, int] | None,
    ) -> Any:  # fmt: skip
        info.context.authorize(store.declared_name)
        return await info.context.queries.totals(
            store, to_filter(where), partitions, demand(consistency), window
        )

    async def list_(
        info: Info,
        where: Any = None,
        order_by: list[Any] | None = None,
        first: int = page_size,
        after: str | None = None,
        partitions: list[int] | None = None,
        consistency: ConsistencyInput | None = None,
    ) -> Any:
        return await select(info, where, order_by, first, after, partitions, consistency, None)

    async def windows_list(
        info: Info,
        from_: datetime,
        to: datetime,
        where: Any = None,
        order_by: list[Any] | None = None,
        first: int = page_size,
        after: str | None = None,
        partitions: list[int] | None = None,
        consistency: ConsistencyInput | None = None,
    ) -> Any:
        window = span_ms(from_, to)
        return await select(info, where, order_by, first, after, partitions, consistency, window)

    async def aggregate(
        info: Info,
        where: Any = None,
        partitions: list[int] | None = None,
        consistency: ConsistencyInput | None = None,
    ) -> Any:
        return await totals(info, where, partitions, consistency, None)

    async def windows_aggregate(
        info: Info,
        from_: datetime,
        to: datetime,
        where: Any = None,
        partitions: list[int] | None = None,
        consistency: ConsistencyInput | None = None,
    ) -> Any:
        return await totals(info, where, partitions, consistency, span_ms(from_, to))

    windowed = store.kind == "window"
    span = {"from_": Annotated[datetime, FROM], "to": datetime} if windowed else {}
    which = "windows whose start lies in [from, to] and that" if windowed else "records that"
    return [
        root_field(
            signed(
                windows_list if windowed else list_,
                Page | None,
                **span,
                where=Filter_ | None,
                order_by=list_of(OrderBy) | None,
                first=int,
                after=str | None,
                partitions=list[int] | None,
                consistency=consistency,
            ),
            named["list"],
            f"The {which} pass `where`, in `orderBy` (nulls last) then by key"
            f"{', window start' if windowed else ''}, one page at a time: each partition "
            "answers its first rows, the gateway merges them. A top-K is the first page.",
            page_rows(settings),
            _list_scans(store),
        ),
        root_field(
            signed(
                windows_aggregate if windowed else aggregate,
                Totals | None,
                **span,
                where=Filter_ | None,
                partitions=list[int] | None,
                consistency=consistency,
            ),
            named["aggregate"],
            f"Totals over the {which} pass `where`, merged from each partition's.",
            scans=lambda arguments: store.name,
        ),
    ]


def _list_scans(store: Store) -> Scans:
    """sList reads its store whole unless it is unfiltered (a filter may pass too few rows
    for a walk: SQL then scans) and in key order or by one indexed column."""
    indexed = {f"{names.constant_case(c)}_{d}" for c in store.index for d in ("ASC", "DESC")}
    by_key = {"KEY_ASC"} if store.kind != "window" else set()  # read as a key range
    cheap_orders = by_key | indexed

    def scans(arguments: Mapping[str, Any]) -> str | None:
        order = arguments.get("orderBy") or ["KEY_ASC"]
        order = order if isinstance(order, list) else [order]  # one value stands for a list
        # measured before the variables are checked: an order may be anything yet
        cheap = len(order) == 1 and str(order[0]) in cheap_orders
        return None if cheap and not arguments.get("where") else store.name

    return scans


def _filter_type(store: Store) -> tuple[type, Callable[[Any], Filter | None]]:
    """SFilter, and how to read one into a Filter."""
    fields: dict[str, FieldType] = {KEY: store.key_type, **store.columns}
    made: type = type(names.types(store)["filter"], (), {})
    annotations: dict[str, Any] = {}
    by_attribute: dict[str, str] = {}
    for i, (field, kind) in enumerate(fields.items()):
        attribute = f"f{i}"  # a column may be a Python keyword
        by_attribute[attribute] = field
        annotations[attribute] = CONDITIONS[kind] | None
        setattr(made, attribute, strawberry.field(default=strawberry.UNSET, name=field))
    for attribute, (name, many, description) in _COMBINATORS.items():
        annotations[attribute] = (list_of(made) if many else made) | None
        setattr(made, attribute, strawberry.field(default=strawberry.UNSET, name=name,
                                                  description=description))  # fmt: skip
    made.__annotations__ = annotations
    description = (
        f"Which {store.declared_name} records to take: the conditions given must all hold. A null "
        "value fails every condition but isNull."
    )
    strawberry.input(made, description=description)

    def read(given: Any, path: str, level: int = 0) -> Filter:
        """`given` as a Filter; `level`: the and/or/not combinators it is written within."""
        parts: list[Filter] = []
        for attribute, field in by_attribute.items():
            condition = _given(getattr(given, attribute), f"{path}{field}")
            if condition is None:
                continue
            for op in OPS_OF[fields[field]]:
                operand = _given(getattr(condition, _attribute(op)), f"{path}{field}.{op}")
                if operand is not None:
                    parts.append(Condition(field, op, tuple(operand) if op == "in" else operand))
        groups = {a: _given(getattr(given, a), path + n) for a, (n, _, _) in _COMBINATORS.items()}
        if level == MAX_FILTER_DEPTH and any(g is not None for g in groups.values()):
            raise GatewayError(
                "FILTER_TOO_DEEP", f"{path[:-1]} nests and, or and not more than "
                f"{MAX_FILTER_DEPTH} levels deep"
            )  # fmt: skip
        for attribute, combine in (("and_", AllOf), ("or_", AnyOf)):
            if groups[attribute] is not None:
                combined = [read(g, f"{path}{attribute[:-1]}[{i}].", level + 1)
                            for i, g in enumerate(groups[attribute])]  # fmt: skip
                parts.append(combine(tuple(combined)))
        if groups["not_"] is not None:
            parts.append(Not(read(groups["not_"], f"{path}not.", level + 1)))
        return parts[0] if len(parts) == 1 else AllOf(tuple(parts))

    def to_filter(given: Any) -> Filter | None:
        return None if given is None else read(given, "where.")

    return made, to_filter


_COMBINATORS = {
    "and_": ("and", True, "Every one of these holds."),
    "or_": ("or", True, "At least one of these holds."),
    "not_": ("not", False, "This does not hold."),
}


def _given(value: Any, path: str) -> Any:
    """An input field's value; None when left out, refused when given as null."""
    if value is strawberry.UNSET:
        return None
    if value is None:
        raise bad_input(f"{path} is null, which matches nothing: leave it out, or ask isNull")
    return value


def _order_type(store: Store) -> tuple[type, Callable[[list[Any] | None], list[Sort]]]:
    """SOrderBy, and how to read a list of its values into Sorts."""
    values = names.order_values(store)
    made = enum.Enum(names.types(store)["orderBy"], {name: name for name in values})  # type: ignore[misc]
    description = (
        f"An order of {store.declared_name} records: a field, ascending or descending; nulls "
        "come last either way, and ties go by key."
    )
    strawberry.enum(made, description=description)

    def to_sorts(given: list[Any] | None) -> list[Sort]:
        return [Sort(*values[member.name]) for member in given or ()]

    return made, to_sorts


def _aggregate_type(store: Store) -> type:
    types = names.types(store)
    numbers = {c: k for c, k in store.columns.items() if k in NUMBERS}
    ordered = {c: k for c, k in store.columns.items() if k in ORDERED}
    fields: dict[str, tuple[Any, Any]] = {
        "totalCount": (Long, attrgetter("count")),
    }
    if numbers:
        Sums = view(types["sums"], {c: ((float if k == "double" else Long) | None, itemgetter(c))
                                    for c, k in numbers.items()},
                    "Sums: null when no record has a value, or past the type's range.")  # fmt: skip
        Averages = view(types["averages"], {c: (float | None, itemgetter(c)) for c in numbers},
                        "Averages: sum / count of the records with a value.")  # fmt: skip
        fields["sum"] = (Sums, _each("sum"))
        fields["avg"] = (Averages, _each("avg"))
    if ordered:
        Extremes = view(types["extremes"], {c: (PY[k] | None, itemgetter(c))
                                            for c, k in ordered.items()},
                        "The least or greatest value of each field (null: none).")  # fmt: skip
        fields["min"] = (Extremes, _each("min"))
        fields["max"] = (Extremes, _each("max"))
    fields["meta"] = (ResultMeta, meta_of)
    description = (
        f"Totals over {store.declared_name} records, merged from each partition's: those of the "
        "partitions that answered (meta.partitions says which did not)."
    )
    return view(types["aggregate"], fields, description)


def _each(total: str) -> Callable[[StoreTotals], Mapping[str, Any]]:
    read = attrgetter(total)

    def values(aggregate: StoreTotals) -> Mapping[str, Any]:
        return {name: read(field) for name, field in aggregate.fields.items()}

    return values
