"""Records as Apollo Federation 2 entities (the `federation` setting): a keyed store's record
type carries `@key(fields: "key")`, and a supergraph's router resolves references to it
through `_entities`.

Strawberry's federation schema calls each representation's `resolve_reference`; every one
here is a one-key lookup through the request's loader, so the representations of one
`_entities` call, whatever their stores, join one routed batch (one internal request per
owning node) and the response's extensions carry their positions, like any lookup. A key
with no record is null, not an error; a partition that could not answer is an error at its
representation, coded with its failure.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import strawberry

from contracts.errors import GatewayError, bad_input
from contracts.partitioner import Key
from contracts.project import Store
from gateway.model.queries import Row
from resolvers.schema.views import Info

INT32 = 2**31
INT64 = 2**63


def reference_resolver(store: Store) -> Callable[[type, Info, Any], Awaitable[Row | None]]:
    """`resolve_reference` of the store's record type: the row of the representation's key."""

    async def resolve_reference(cls: type, info: Info, key: Any = None) -> Row | None:
        info.context.authorize(store.name)
        lookup = await info.context.queries.lookup(store, [entity_key(store, key)], None)
        (entry,) = lookup.entries
        if entry.failure is not None:
            message = f"partition {entry.partition} of {store.name} could not answer"
            raise GatewayError(entry.failure.value, message)
        return None if entry.row is None else strawberry.cast(cls, _Record(entry.row))

    return resolve_reference


class _Record(list[Any]):
    """A row that can say which record type it is: `_Entity` is a union of rows alike."""


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
    raise bad_input(f"a {store.name} representation's key is a {store.key_type}, not {given!r}")
