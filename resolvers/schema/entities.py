"""Records as Apollo Federation 2 entities (the `federation` setting): a keyed store's record
type carries `@key(fields: "key")`, and a supergraph's gateway resolves references to it
through `_entities`.

A call's representations are read as one lookup per store, all in one call of the query
service, so in one routed batch (one internal request per owning node), and the response's
extensions carry their positions, like any lookup's. A key with no record is null, not an
error; a representation that names no entity, a key of the wrong type, a store the token's
roles may not read or a partition that could not answer is an error at its place.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import strawberry
from strawberry.federation.schema import FederationAny

from contracts import names
from contracts.errors import GatewayError, bad_input
from contracts.partitioner import Key
from contracts.project import Store
from resolvers.schema.annotations import COST
from resolvers.schema.costs import keys_rows
from resolvers.schema.views import Info

INT32 = 2**31
INT64 = 2**63
ENTITIES, REPRESENTATIONS = "_entities", "representations"


class Subgraph(strawberry.federation.Schema):
    """Strawberry's federation schema, whose `_entities` reads each store's keys at once."""

    def __init__(
        self, stores: Iterable[Store], records: dict[str, type], most_keys: int, **schema: Any
    ) -> None:
        self.entities = {names.types(s)["record"]: (s, records[s.declared_name]) for s in stores
                         if s.kind != "window"}  # fmt: skip
        self.most_keys = most_keys
        super().__init__(**schema)

    def _get_federation_query_type(self, *args: Any, **kwargs: Any) -> type:
        """Strawberry's query type, whose `_entities` weighs its representations as a batch
        weighs its keys (resolvers/execution/cost.py)."""
        query: type = super()._get_federation_query_type(*args, **kwargs)
        for field in query.__strawberry_definition__.fields:  # type: ignore[attr-defined]
            if field.python_name == ENTITIES:
                field.metadata = {
                    **(field.metadata or {}),
                    COST: keys_rows(self.most_keys, REPRESENTATIONS),
                }
        return query

    async def entities_resolver(  # type: ignore[override]
        self, info: Info, representations: list[FederationAny]
    ) -> list[FederationAny]:
        return await resolved(self.entities, info, representations)


async def resolved(
    entities: dict[str, tuple[Store, type]], info: Info, representations: Sequence[Any]
) -> list[Any]:
    """Each representation's record (cast to its type: `_Entity` is a union of rows alike),
    None for a key with no record, or the GatewayError of its place."""
    results: list[Any] = [None] * len(representations)
    wanted: dict[str, list[tuple[int, Key]]] = {}  # entity type -> (place, key) of each
    for index, representation in enumerate(representations):
        try:
            typename = _typename(entities, representation)
            key = entity_key(entities[typename][0], representation.get(names.KEY))
        except GatewayError as refused:
            results[index] = refused
            continue
        wanted.setdefault(typename, []).append((index, key))
    readable = []
    for typename, places in wanted.items():
        try:
            info.context.authorize(entities[typename][0].name)
        except GatewayError as refused:
            for index, _ in places:
                results[index] = refused
            continue
        readable.append((entities[typename], places))
    asked = [(store, [k for _, k in places]) for (store, _), places in readable]
    # More keys of one store than a field may ask for (TOO_MANY_KEYS) fails the field, once.
    lookups: list[Any] = await info.context.queries.lookups(asked, None) if asked else []
    for ((store, record), places), lookup in zip(readable, lookups, strict=True):
        for (index, _), entry in zip(places, _entries(lookup, len(places)), strict=True):
            results[index] = _record(store, record, entry)
    return results


def _typename(entities: dict[str, tuple[Store, type]], representation: Any) -> str:
    typename = representation.get("__typename") if isinstance(representation, dict) else None
    if not isinstance(typename, str) or typename not in entities:
        raise bad_input(f"{typename!r} is no entity of this subgraph")
    return typename


def _entries(lookup: Any, count: int) -> list[Any]:
    """A lookup's entries, or its error for each of its keys."""
    return [lookup] * count if isinstance(lookup, BaseException) else lookup.entries


def _record(store: Store, record: type, entry: Any) -> Any:
    if isinstance(entry, BaseException):
        return entry
    if entry.failure is not None:
        message = f"partition {entry.partition} of {store.declared_name} could not answer"
        return GatewayError(entry.failure.value, message)
    return None if entry.row is None else strawberry.cast(record, _Record(entry.row))


class _Record(list[Any]):
    """A row that can say which record type it is."""


def entity_key(store: Store, given: Any) -> Key:
    """A representation's key as the store's key type reads it (a Long as an integer or a
    decimal string); BAD_USER_INPUT otherwise."""
    if store.key_type == "string" and isinstance(given, str):
        return given
    if store.key_type != "string" and isinstance(given, int) and not isinstance(given, bool):
        bound = INT32 if store.key_type == "int" else INT64
        if -bound <= given < bound:
            return given
    if store.key_type == "long" and isinstance(given, str) and given.lstrip("-").isdigit():
        return entity_key(store, int(given))
    raise bad_input(
        f"a {store.declared_name} representation's key is a {store.key_type}, not {given!r}"
    )
