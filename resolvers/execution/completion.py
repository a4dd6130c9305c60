"""Completing plain records fast, with the typed schema intact.

graphql-core completes every field of every object through its general machinery (about
6 us a field), so a page of 1000 records costs more than the lookups behind it. Most of our
schema is plain records: object types whose fields have no resolver of their own (records,
entries, pages, position metadata). For those, the selection set is compiled once per
request into a plan, a tree of small closures that reads attributes and serializes leaves
with the same scalar and enum serializers graphql-core would use. Anything else (root
fields, @defer, fields with resolvers or extensions) takes graphql-core's own path.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from functools import lru_cache
from math import isfinite
from types import CodeType
from typing import Any

from graphql import (
    GraphQLObjectType,
    GraphQLOutputType,
    GraphQLResolveInfo,
    GraphQLScalarType,
    GraphQLUnionType,
    is_leaf_type,
    is_list_type,
    is_non_null_type,
    is_object_type,
    is_union_type,
)
from graphql.pyutils import Path
from strawberry.schema.schema import StrawberryGraphQLCoreExecutionContext
from strawberry.types.cast import get_strawberry_type_cast

from resolvers.schema.annotations import DEFINITION, Plan, reader

Collect = Callable[[GraphQLObjectType, Any], Any]  # (type, field details) -> CollectedFields


class PlanCompiler:
    """Compiles the completion of a value of a type, for a selection (its field details),
    into a Plan; None when some part of it needs graphql-core's own path."""

    def __init__(self, collect: Collect) -> None:
        self.collect = collect

    def compile(self, gql_type: GraphQLOutputType, field_details_list: Any) -> Plan | None:
        non_null = is_non_null_type(gql_type)
        inner = gql_type.of_type if non_null else gql_type  # type: ignore[union-attr]
        body: Plan | None
        if is_list_type(inner):
            item = self.compile(inner.of_type, field_details_list)
            body = None if item is None else _list(item)
        elif is_leaf_type(inner):
            body = _leaf(inner)
        elif is_object_type(inner):
            body = self._compile_object(inner, field_details_list)
        elif is_union_type(inner):
            body = self._compile_union(inner, field_details_list)
        else:
            body = None
        if body is None:
            return None
        return _non_null(body, str(gql_type)) if non_null else _nullable(body)

    def _compile_object(self, obj: GraphQLObjectType, field_details_list: Any) -> Plan | None:
        collected = self.collect(obj, field_details_list)
        if collected.new_defer_usages:
            return None
        fields: list[_Field] = []
        for response_key, sub_fields in collected.grouped_field_set.items():
            name = sub_fields[0].node.name.value
            if name == "__typename":
                fields.append((response_key, _itself, _constant(obj.name), None))
                continue
            field = obj.fields.get(name)
            definition = field.extensions.get(DEFINITION) if field else None
            if (
                field is None
                or field.args
                or definition is None
                or definition.extensions
                or definition.permission_classes
            ):
                return None
            read = reader(definition)
            plan = None if read is None else self.compile(field.type, sub_fields)
            if read is None or plan is None:
                return None
            fields.append((response_key, read, plan, _inlined(field.type)))
        return _object(fields)

    def _compile_union(self, union: GraphQLUnionType, field_details_list: Any) -> Plan | None:
        """A union of plain records (a subgraph's `_Entity`): each member's plan, picked by
        the type a value was cast to (strawberry.cast); a value cast to none raises, and
        graphql-core resolves its type."""
        plans: dict[Any, Plan] = {}
        for member in union.types:
            definition = member.extensions.get(DEFINITION)
            plan = self._compile_object(member, field_details_list)
            if definition is None or plan is None:
                return None
            plans[definition.origin] = plan

        def complete(value: Any) -> Any:
            return plans[get_strawberry_type_cast(value)](value)

        return complete


class PlainRecordExecutionContext(StrawberryGraphQLCoreExecutionContext):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._compiler = PlanCompiler(self.collect_subfields)
        # Keyed like graphql-core's own memo: the field list is kept alive with its plan.
        self._plans: dict[tuple[int, int], tuple[Any, Plan | None]] = {}

    def complete_value(
        self,
        return_type: GraphQLOutputType,
        field_details_list: Any,
        info: GraphQLResolveInfo[Any],
        path: Path,
        result: Any,
        position_context: Any,
    ) -> Any:
        if not isinstance(result, Exception):
            plan = self._plan(return_type, field_details_list)
            if plan is not None:
                try:
                    return plan(result)
                except Exception:  # noqa: BLE001 - a value the schema refuses somewhere below:
                    pass  # graphql-core's own path reports it at its field and nulls as little

        return super().complete_value(
            return_type, field_details_list, info, path, result, position_context
        )

    def _plan(self, return_type: GraphQLOutputType, field_details_list: Any) -> Plan | None:
        key = (id(return_type), id(field_details_list))
        cached = self._plans.get(key)
        if cached is None:
            cached = (field_details_list, self._compiler.compile(return_type, field_details_list))
            self._plans[key] = cached
        return cached[1]


def _itself(value: Any) -> Any:
    return value


CODE_CACHE_SIZE = 1024  # generated completion functions kept compiled, by source
DATETIMES_CACHED = 65_536  # UTC instants kept serialized (a week of hourly windows: 168)
_Field = tuple[str, Plan, Plan, "str | None"]  # key, read, plan, inlined completion
# A built-in scalar's (and Long's and DateTime's) common case as expressions of the value `v`
# read into it by `{first}`: a test, and what the value completes to when it passes, as the
# scalar's serializer would (Long is a decimal string on the wire, resolvers/schema/scalars.py;
# a UTC DateTime's isoformat is memoized). A value that fails the test takes the field's plan.
_FAST = {
    "String": ("type({first}) is str", "{v}"),
    "Boolean": ("type({first}) is bool", "{v}"),
    "Int": ("type({first}) is int and -2147483648 <= {v} <= 2147483647", "{v}"),
    "Float": ("type({first}) is float and isfinite({v})", "{v}"),
    "Long": (
        "type({first}) is int and -9223372036854775808 <= {v} <= 9223372036854775807",
        "str({v})",
    ),
    "DateTime": ("type({first}) is datetime and {v}.tzinfo is UTC", "_utc_iso({v})"),
}


@lru_cache(maxsize=CODE_CACHE_SIZE)
def _code(source: str) -> CodeType:
    """Compiled once per shape of selection: a document with a thousand aliased fields of
    one shape compiles one function, not a thousand."""
    return compile(source, "<completion plan>", "exec")


def _inlined(gql_type: GraphQLOutputType) -> str | None:
    """A field's completion as one expression of {first}, {v} and {p} (its plan), when its
    type is a scalar of _FAST, nullable or not: what the plan does, without two or three
    calls per value."""
    non_null = is_non_null_type(gql_type)
    scalar = gql_type.of_type if non_null else gql_type  # type: ignore[union-attr]
    if not isinstance(scalar, GraphQLScalarType) or scalar.name not in _FAST:
        return None
    test, result = _FAST[scalar.name]
    if non_null:  # None fails the test: the plan raises as graphql-core would
        return f"{result} if {test} else {{p}}({{v}})"
    nullable_test = test.replace("{first}", "{v}")
    return f"None if {{first}} is None else {result} if {nullable_test} else {{p}}({{v}})"


def _object(fields: list[_Field]) -> Plan:
    """Completes an object as one generated function: a dict display with one entry per
    field, built-in scalars inlined (graphql-jit's idea; a closure per field per value
    cost most of a large result's completion)."""
    namespace: dict[str, Any] = dict(_NAMES)
    entries = []
    for i, (key, read, plan, inlined) in enumerate(fields):
        namespace[f"r{i}"], namespace[f"p{i}"] = read, plan
        if inlined is None:
            entries.append(f"{key!r}: p{i}(r{i}(value))")
        else:
            inline = inlined.format(first=f"(v{i} := r{i}(value))", v=f"v{i}", p=f"p{i}")
            entries.append(f"{key!r}: ({inline})")
    source = "def complete(value):\n    return {" + ", ".join(entries) + "}\n"
    exec(_code(source), namespace)
    complete: Plan = namespace["complete"]
    return complete


def _list(item: Plan) -> Plan:
    def complete(values: Any) -> list[Any]:
        return [item(v) for v in values]

    return complete


def _nullable(body: Plan) -> Plan:
    def complete(value: Any) -> Any:
        return None if value is None else body(value)

    return complete


def _non_null(body: Plan, type_name: str) -> Plan:
    def complete(value: Any) -> Any:
        if value is None:
            raise TypeError(f"Cannot return null for non-nullable type {type_name}.")
        return body(value)

    return complete


def _leaf(leaf: Any) -> Plan:
    """A leaf's serializer, with its common case of _FAST (a value the serializer returns
    unchanged, or converts as it would) inlined; anything else takes the serializer."""
    serialize: Plan = leaf.serialize
    if leaf.name not in _FAST:
        return serialize
    test, result = _FAST[leaf.name]
    expression = f"{result} if {test} else s(v)".format(first="v", v="v")
    namespace = {**_NAMES, "s": serialize}
    exec(_code(f"def complete(v):\n    return {expression}\n"), namespace)
    complete: Plan = namespace["complete"]
    return complete


@lru_cache(maxsize=DATETIMES_CACHED)
def _utc_iso(moment: datetime) -> str:
    """DateTime's serialization (isoformat) of a UTC instant, memoized: of two equal
    instants in other zones, only UTC's are this one's."""
    return moment.isoformat()


# what the generated completions of _FAST's expressions refer to
_NAMES: dict[str, Any] = {
    "isfinite": isfinite, "datetime": datetime, "UTC": UTC, "_utc_iso": _utc_iso
}  # fmt: skip


def _constant(value: str) -> Plan:
    return lambda _: value
