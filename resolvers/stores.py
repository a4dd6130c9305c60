"""Typed GraphQL fields generated from the store declarations.

For a table or aggregate store `s` with record type `S`: s(key), sBatch(keys), sRange(from,
to) and, for string keys, sPrefix(prefix). For a window store: s(key, from, to) and
sAll(from, to). Every result carries `meta: ResultMeta`.

This module deliberately does not use `from __future__ import annotations`: the resolvers
are built in closures whose annotations name types created at run time, and strawberry
reads those annotations as objects.
"""

import dataclasses
from datetime import UTC, datetime
from typing import Annotated, Any

import strawberry
from strawberry.types.field import StrawberryField

from gateway import cursors, merging
from gateway.batching import Consistency, Work
from gateway.config import FieldType, Project, Store
from gateway.errors import GatewayError, bad_input
from gateway.positions import Position, decode_token
from gateway.protocol import Answer
from resolvers.context import Context
from resolvers.meta import ConsistencyInput, FailureReason, PageInfo, ResultMeta, result_meta
from resolvers.scalars import Long

_PY: dict[FieldType, Any] = {
    "string": str,
    "int": int,
    "long": Long,
    "double": float,
    "boolean": bool,
}
Info = strawberry.Info[Context, None]


def _pascal(name: str) -> str:
    return name[0].upper() + name[1:]


@dataclasses.dataclass
class StoreTypes:
    record: type
    key: Any


def record_type(store: Store) -> StoreTypes:
    key = _PY[store.key_type]
    annotations: dict[str, Any] = {"key": key}
    if store.kind == "window":
        annotations["window_start"] = datetime
        annotations["window_end"] = datetime
    for column, ftype in store.columns.items():
        annotations[column] = _PY[ftype] | None
    description = f"A record of the {store.kind} store {store.name} (topic {store.topic.name})."
    return StoreTypes(_object_type(_pascal(store.name), annotations, description), key)


def store_fields(project: Project, store: Store) -> list[StrawberryField]:
    types = record_type(store)
    if store.kind == "window":
        return _window_fields(project, store, types)
    return _keyed_fields(project, store, types)


def _keyed_fields(project: Project, store: Store, types: StoreTypes) -> list[StrawberryField]:
    Record, K = types.record, types.key
    name = _pascal(store.name)
    settings = project.settings
    make = _row_builder(store, Record)

    Lookup = _object_type(
        f"{name}Lookup",
        {
            "key": K,
            "partition": int,
            "record": Record | None,
            "failure": FailureReason | None,
            "meta": ResultMeta,
        },
    )
    Entry = _object_type(
        f"{name}Entry",
        {
            "key": K,
            "partition": int,
            "record": Record | None,
            "failure": FailureReason | None,
        },
        description="One input key: record is null when the key has no value; failure is set "
        "when its partition could not answer.",
    )
    Batch = _object_type(f"{name}Batch", {"entries": list[Entry], "meta": ResultMeta})
    Page = _page_type(name, Record)

    async def get(info: Info, key: K, consistency: ConsistencyInput | None = None) -> Lookup | None:
        outcome = await _load(info, store, "get", {"keys": [key]}, [], consistency)
        row = merging.lookup(outcome.parts).get(key)
        ((q, answer),) = outcome.parts
        return Lookup(
            key=key,
            partition=q.partition,
            record=make(row) if row else None,
            failure=_failure(answer),
            meta=_meta(info, outcome),
        )

    async def batch(
        info: Info, keys: list[K], consistency: ConsistencyInput | None = None
    ) -> Batch | None:
        if len(keys) > settings.max_keys_per_request:
            raise GatewayError(
                "TOO_MANY_KEYS",
                f"{len(keys)} keys asked, the limit is "
                f"{settings.max_keys_per_request} (max_keys_per_request)",
            )
        outcome = await _load(info, store, "get", {"keys": list(keys)}, [], consistency)
        rows = merging.lookup(outcome.parts)
        by_partition = {q.partition: a for q, a in outcome.parts}
        part_of = {k: q.partition for q, _ in outcome.parts for k in q.params["keys"]}
        entries = []
        for key in keys:
            answer = by_partition[part_of[key]]
            row = rows.get(key)
            entries.append(
                Entry(
                    key=key,
                    partition=part_of[key],
                    record=make(row) if row else None,
                    failure=_failure(answer),
                )
            )
        return Batch(entries=entries, meta=_meta(info, outcome))

    async def range_(
        info: Info,
        from_: Annotated[K | None, strawberry.argument(name="from")] = None,
        to: K | None = None,
        first: int = settings.default_page_size,
        after: str | None = None,
        partitions: list[int] | None = None,
        consistency: ConsistencyInput | None = None,
    ) -> Page | None:
        if from_ is not None and to is not None and from_ > to:
            raise GatewayError("INVALID_RANGE", f"from {from_!r} is after to {to!r}")
        params = {"from": from_, "to": to}
        return await _scan(
            info, store, "range", params, first, after, partitions, consistency, Page, make
        )

    fields = [
        _field(get, name=store.name, description=f"The {store.name} record of one key."),
        _field(
            batch,
            name=f"{store.name}Batch",
            description="Many keys at once; entries align with the input keys.",
        ),
        _field(
            range_,
            name=f"{store.name}Range",
            description="Records with from <= key <= to (both optional), in key "
            "order, one page at a time.",
        ),
    ]
    if store.key_type == "string":

        async def prefix(
            info: Info,
            prefix: str,
            first: int = settings.default_page_size,
            after: str | None = None,
            partitions: list[int] | None = None,
            consistency: ConsistencyInput | None = None,
        ) -> Page | None:
            return await _scan(
                info,
                store,
                "prefix",
                {"prefix": prefix},
                first,
                after,
                partitions,
                consistency,
                Page,
                make,
            )

        fields.append(
            _field(
                prefix,
                name=f"{store.name}Prefix",
                description="Records whose key starts with prefix, "
                "in key order, one page at a time.",
            )
        )
    return fields


def _window_fields(project: Project, store: Store, types: StoreTypes) -> list[StrawberryField]:
    Record, K = types.record, types.key
    name = _pascal(store.name)
    settings = project.settings
    make = _row_builder(store, Record)
    Windows = _object_type(
        f"{name}Windows",
        {
            "key": K,
            "partition": int,
            "windows": list[Record],
            "failure": FailureReason | None,
            "meta": ResultMeta,
        },
    )
    Page = _page_type(name, Record)

    async def windows(
        info: Info,
        key: K,
        from_: Annotated[datetime, strawberry.argument(name="from")],
        to: datetime,
        consistency: ConsistencyInput | None = None,
    ) -> Windows | None:
        start, end = _window_range(store, from_, to, settings.max_page_size)
        outcome = await _load(
            info, store, "window", {"key": key, "from": start, "to": end}, [], consistency
        )
        ((q, answer),) = outcome.parts
        return Windows(
            key=key,
            partition=q.partition,
            windows=[make(r) for r in answer.rows or ()],
            failure=_failure(answer),
            meta=_meta(info, outcome),
        )

    async def all_(
        info: Info,
        from_: Annotated[datetime, strawberry.argument(name="from")],
        to: datetime,
        first: int = settings.default_page_size,
        after: str | None = None,
        partitions: list[int] | None = None,
        consistency: ConsistencyInput | None = None,
    ) -> Page | None:
        start, end = _window_range(store, from_, to, None)
        return await _scan(
            info,
            store,
            "windows",
            {"from": start, "to": end},
            first,
            after,
            partitions,
            consistency,
            Page,
            make,
        )

    return [
        _field(
            windows,
            name=store.name,
            description="The windows of one key whose start lies in [from, to].",
        ),
        _field(
            all_,
            name=f"{store.name}All",
            description="Windows of all keys whose start lies in [from, to], "
            "in (key, window start) order, one page at a time.",
        ),
    ]


def _object_type(name: str, fields: dict[str, Any], description: str | None = None) -> type:
    """A strawberry object type built at run time from field annotations."""
    return strawberry.type(type(name, (), {"__annotations__": fields}), description=description)


def _field(resolver: Any, name: str, description: str) -> StrawberryField:
    resolver.__name__ = name  # create_type keys fields by python name: make them unique
    return strawberry.field(resolver, name=name, description=description)


def _page_type(name: str, record: type) -> type:
    return _object_type(
        f"{name}Page",
        {
            "records": list[record],
            "page_info": PageInfo,
            "meta": ResultMeta,
        },
    )


def _row_builder(store: Store, record: type) -> Any:
    names = list(store.columns)
    if store.kind != "window":

        def make(row: list[Any]) -> Any:
            return record(key=row[0], **dict(zip(names, row[1:], strict=True)))

        return make
    size = store.window_size_ms

    def make_window(row: list[Any]) -> Any:
        return record(
            key=row[0],
            window_start=_datetime(row[1]),
            window_end=_datetime(row[1] + size),
            **dict(zip(names, row[2:], strict=True)),
        )

    return make_window


async def _scan(
    info: Info,
    store: Store,
    kind: str,
    params: dict[str, Any],
    first: int,
    after: str | None,
    partitions: list[int] | None,
    consistency: ConsistencyInput | None,
    page: type,
    make: Any,
) -> Any:
    settings = info.context.node.project.settings
    if not 1 <= first <= settings.max_page_size:
        raise GatewayError(
            "PAGE_SIZE_OUT_OF_RANGE",
            f"first must be between 1 and {settings.max_page_size}, not {first}",
        )
    windowed = kind == "windows"
    params = {**params, "limit": first + 1}
    if after is not None:
        last = cursors.decode(store.name, after, 2 if windowed else 1)
        _check_key(store, last[0], "cursor")
        params["after"] = last if windowed else last[0]
    targets = _partitions(info, partitions)
    outcome = await _load(info, store, kind, params, targets, consistency)
    rows, more = merging.page(outcome.parts, first, windowed)
    end = cursors.encode(store.name, rows[-1][:2] if windowed else rows[-1][:1]) if rows else None
    return page(
        records=[make(r) for r in rows],
        page_info=PageInfo(has_next_page=more, end_cursor=end),
        meta=_meta(info, outcome),
    )


async def _load(
    info: Info,
    store: Store,
    kind: str,
    params: dict[str, Any],
    partitions: list[int],
    consistency: ConsistencyInput | None,
) -> Any:
    work = Work(
        store=store,
        kind=kind,
        params=params,
        partitions=partitions,
        consistency=_consistency(info, consistency),
    )
    return await info.context.loader.load(work)


def _failure(answer: Answer) -> FailureReason | None:
    """Why the key's partition could not answer (record is then unknown, not missing)."""
    return FailureReason(answer.failure) if answer.failure else None


def _meta(info: Info, outcome: Any) -> ResultMeta:
    meta, token = result_meta(
        info.context.node.project.cluster, outcome.parts, outcome.work.consistency.bound
    )
    info.context.tokens.append(token)
    return meta


def _partitions(info: Info, partitions: list[int] | None) -> list[int]:
    count = info.context.node.project.cluster.partitions
    if partitions is None:
        return list(range(count))
    unknown = sorted({p for p in partitions if not 0 <= p < count})
    if unknown:
        raise GatewayError(
            "UNKNOWN_PARTITION",
            f"partitions {unknown} do not exist; this cluster has 0..{count - 1}",
        )
    return sorted(set(partitions))


def _consistency(info: Info, given: ConsistencyInput | None) -> Consistency:
    if given is None:
        return Consistency()
    project = info.context.node.project
    bound: Position = decode_token(given.token) if given.token else {}
    for item in given.position or ():
        if item.topic not in project.topics:
            raise bad_input(f"position names unknown topic {item.topic!r}")
        if not 0 <= item.partition < project.cluster.partitions:
            raise GatewayError(
                "UNKNOWN_PARTITION",
                f"position names partition "
                f"{item.partition}; this cluster has 0..{project.cluster.partitions - 1}",
            )
        tp = (item.topic, item.partition)
        bound[tp] = max(bound.get(tp, 0), item.offset)
    for name, value in (("maxLag", given.max_lag), ("maxAgeMs", given.max_age_ms)):
        if value is not None and value < 0:
            raise bad_input(f"{name} must not be negative, got {value}")
    return Consistency(
        bound=bound,
        require_active=given.require_active,
        max_lag=given.max_lag,
        max_age_ms=given.max_age_ms,
    )


def _check_key(store: Store, key: Any, what: str) -> None:
    expected = str if store.key_type == "string" else int
    if not isinstance(key, expected) or isinstance(key, bool):
        raise GatewayError("BAD_CURSOR", f"{what} does not hold a {store.key_type} key")


def _window_range(
    store: Store, start: datetime, end: datetime, max_windows: int | None
) -> tuple[int, int]:
    start_ms, end_ms = _millis(start), _millis(end)
    if start_ms > end_ms:
        raise GatewayError(
            "INVALID_RANGE", f"from {start.isoformat()} is after to {end.isoformat()}"
        )
    if max_windows is not None:
        count = (end_ms - start_ms) // store.window_advance_ms + 1
        if count > max_windows:
            raise GatewayError(
                "WINDOW_RANGE_TOO_LARGE",
                f"[from, to] spans {count} windows, the limit is {max_windows} "
                "(max_page_size); use the paginated All query",
            )
    return start_ms, end_ms


def _millis(moment: datetime) -> int:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def _datetime(millis: int) -> datetime:
    return datetime.fromtimestamp(millis / 1000, tz=UTC)
