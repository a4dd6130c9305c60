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
from keyword import iskeyword
from math import isfinite
from operator import attrgetter, itemgetter
from types import CodeType
from typing import Any

from graphql import (
    GraphQLObjectType,
    GraphQLOutputType,
    GraphQLResolveInfo,
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
    into a Plan; None when some part of it needs graphql-core's own path.

    The plan is generated source (graphql-jit's idea): one function for the whole selection
    and one per list's items, objects as dict displays, lists as comprehensions, nullable and
    non-null values as conditional expressions, attribute and item reads and built-in
    scalars' common cases inlined. A closure per type per value cost most of a large
    result's completion: a 1000-entry list of records made about 15 calls an entry."""

    def __init__(self, collect: Collect) -> None:
        self.collect = collect

    def compile(self, gql_type: GraphQLOutputType, field_details_list: Any) -> Plan | None:
        module = _Module()
        emit = self._emit(module, gql_type, field_details_list)
        return None if emit is None else module.build(emit)

    def _emit(
        self, module: _Module, gql_type: GraphQLOutputType, field_details_list: Any
    ) -> _Emit | None:
        non_null = is_non_null_type(gql_type)
        inner = gql_type.of_type if non_null else gql_type  # type: ignore[union-attr]
        body: _Body | None
        if is_list_type(inner):
            item = self._emit(module, inner.of_type, field_details_list)
            body = None if item is None else _list(module, item)
        elif is_leaf_type(inner):
            body = _leaf(module, inner)
        elif is_object_type(inner):
            body = self._object(module, inner, field_details_list)
        elif is_union_type(inner):
            body = self._union(module, inner, field_details_list)
        else:
            body = None
        if body is None:
            return None
        return _non_null(module, body, str(gql_type)) if non_null else _nullable(body)

    def _object(
        self, module: _Module, obj: GraphQLObjectType, field_details_list: Any
    ) -> _Body | None:
        collected = self.collect(obj, field_details_list)
        if collected.new_defer_usages:
            return None
        fields: list[tuple[str, _Body]] = []
        for response_key, sub_fields in collected.grouped_field_set.items():
            name = sub_fields[0].node.name.value
            if name == "__typename":
                fields.append((response_key, _constant(obj.name)))
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
            emit = None if read is None else self._emit(module, field.type, sub_fields)
            if read is None or emit is None:
                return None
            fields.append((response_key, _field(module, _read(module, read), emit)))

        def complete(v: str) -> str:
            return "{" + ", ".join(f"{key!r}: {field(v)}" for key, field in fields) + "}"

        return complete

    def _union(
        self, module: _Module, union: GraphQLUnionType, field_details_list: Any
    ) -> _Body | None:
        """A union of plain records (a subgraph's `_Entity`): each member's plan, picked by
        the type a value was cast to (strawberry.cast); a value cast to none raises, and
        graphql-core resolves its type."""
        plans: dict[Any, str] = {}
        for member in union.types:
            definition = member.extensions.get(DEFINITION)
            body = self._object(module, member, field_details_list)
            if definition is None or body is None:
                return None
            plans[definition.origin] = module.function(body)
        members = module.refer({})
        module.after(lambda names: names[members].update({o: names[f] for o, f in plans.items()}))
        cast = module.refer(get_strawberry_type_cast)
        return lambda v: f"{members}[{cast}({v})]({v})"


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


CODE_CACHE_SIZE = 1024  # generated completion modules kept compiled, by source
DATETIMES_CACHED = 65_536  # UTC instants kept serialized (a week of hourly windows: 168)
# A completion as source: (first, v) -> an expression of the completed value, where `first`
# is the expression that reads the value (it is evaluated once, before anything names `v`)
# and `v` the name it is bound to from then on. A body is the completion of a value known
# not to be null, given its name (the wrapper that tested it for null bound it).
_Emit = Callable[[str, str], str]
_Body = Callable[[str], str]
_Read = Callable[[str], str]  # the name of a parent value -> the expression reading a field
# A built-in scalar's (and Long's and DateTime's) common case as expressions of its value `v`:
# a test, and what the value completes to when it passes, as the scalar's serializer would
# (Long is a decimal string on the wire, resolvers/schema/scalars.py; a UTC DateTime's
# isoformat is memoized). A value that fails the test takes the serializer.
_FAST = {
    "String": ("type({v}) is str", "{v}"),
    "Boolean": ("type({v}) is bool", "{v}"),
    "Int": ("type({v}) is int and -2147483648 <= {v} <= 2147483647", "{v}"),
    "Float": ("type({v}) is float and isfinite({v})", "{v}"),
    "Long": ("type({v}) is int and -9223372036854775808 <= {v} <= 9223372036854775807", "str({v})"),
    "DateTime": ("type({v}) is datetime and {v}.tzinfo is UTC", "_utc_iso({v})"),
}


class _Module:
    """The source of one plan: its functions, the values they name, the locals they bind."""

    def __init__(self) -> None:
        self.namespace: dict[str, Any] = dict(_NAMES)
        self.functions: list[str] = []
        self.finishing: list[Callable[[dict[str, Any]], None]] = []
        self.values = 0
        self.locals = 0

    def refer(self, value: Any) -> str:
        """A name the source uses for a value of this plan (a serializer, a reader)."""
        name = f"n{self.values}"
        self.values += 1
        self.namespace[name] = value
        return name

    def local(self) -> str:
        """A fresh local name: a field's value, read once."""
        self.locals += 1
        return f"v{self.locals}"

    def function(self, body: _Body) -> str:
        """A function of its own completing one value: a list's items, a union's member
        (a comprehension's body binding the locals of its function would make them cells)."""
        name = f"f{len(self.functions) + 1}"
        self.functions.append(f"def {name}(value):\n    return {body('value')}\n")
        return name

    def after(self, finish: Callable[[dict[str, Any]], None]) -> None:
        """Something to do with the functions once they exist."""
        self.finishing.append(finish)

    def build(self, emit: _Emit) -> Plan | None:
        """The plan; None when Python's compiler refuses its source (a selection nested
        deeper than its parser goes): graphql-core's own path completes it."""
        top = f"def complete(value):\n    return {emit('value', 'value')}\n"
        try:
            code = _code("".join([*self.functions, top]))
        except (SyntaxError, RecursionError, MemoryError):
            return None
        exec(code, self.namespace)
        for finish in self.finishing:
            finish(self.namespace)
        complete: Plan = self.namespace["complete"]
        return complete


@lru_cache(maxsize=CODE_CACHE_SIZE)
def _code(source: str) -> CodeType:
    """Compiled once per shape of selection: a document with a thousand aliased fields of
    one shape compiles one module, not a thousand."""
    return compile(source, "<completion plan>", "exec")


def _given(emit: _Emit) -> _Body:
    """A completion of a value already named (a function's parameter)."""
    return lambda v: emit(v, v)


def _field(module: _Module, read: _Read, emit: _Emit) -> _Body:
    """A field of an object named `parent`: its value read once, into a local of its own."""

    def complete(parent: str) -> str:
        v = module.local()
        return emit(f"({v} := {read(parent)})", v)

    return complete


_GETTERS = (attrgetter, itemgetter)  # their arguments, as pickling gives them: (cls, args)


def _read(module: _Module, read: Plan) -> _Read:
    """A field's read as an expression: `parent.attribute` and `parent[index]` inlined."""
    reduced: Any = read.__reduce__() if type(read) in _GETTERS else (None, ())
    arguments: tuple[Any, ...] = reduced[1]
    if type(read) is attrgetter and len(arguments) == 1 and _attribute(arguments[0]):
        return lambda parent: f"{parent}.{arguments[0]}"
    if type(read) is itemgetter and len(arguments) == 1 and type(arguments[0]) is int:
        return lambda parent: f"{parent}[{arguments[0]}]"
    name = module.refer(read)
    return lambda parent: f"{name}({parent})"


def _attribute(name: str) -> bool:
    """Whether `parent.name` reads the attribute (a keyword, as `from`, does not parse)."""
    return name.isidentifier() and not iskeyword(name)


def _list(module: _Module, item: _Emit) -> _Body:
    complete = module.function(_given(item))
    return lambda v: f"[{complete}(item) for item in {v}]"


def _nullable(body: _Body) -> _Emit:
    return lambda first, v: f"(None if {first} is None else {body(v)})"


def _non_null(module: _Module, body: _Body, type_name: str) -> _Emit:
    """A null raises as graphql-core's completion would (its own path then reports it)."""
    message = module.refer(f"Cannot return null for non-nullable type {type_name}.")
    return lambda first, v: f"({body(v)} if {first} is not None else _null({message}))"


def _leaf(module: _Module, leaf: Any) -> _Body:
    """A leaf's serializer, with its common case of _FAST (a value the serializer returns
    unchanged, or converts as it would) inlined; anything else takes the serializer."""
    serialize = module.refer(leaf.serialize)
    if leaf.name not in _FAST:
        return lambda v: f"{serialize}({v})"
    test, result = _FAST[leaf.name]
    return lambda v: f"({result.format(v=v)} if {test.format(v=v)} else {serialize}({v}))"


def _null(message: str) -> Any:
    raise TypeError(message)


def _constant(value: str) -> _Body:
    return lambda parent: repr(value)


@lru_cache(maxsize=DATETIMES_CACHED)
def _utc_iso(moment: datetime) -> str:
    """DateTime's serialization (isoformat) of a UTC instant, memoized: of two equal
    instants in other zones, only UTC's are this one's."""
    return moment.isoformat()


# what the generated completions of _FAST's expressions refer to
_NAMES: dict[str, Any] = {
    "isfinite": isfinite, "datetime": datetime, "UTC": UTC, "_utc_iso": _utc_iso, "_null": _null
}  # fmt: skip
