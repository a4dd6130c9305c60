"""Plan once, run many: a query document seen once is parsed, validated and compiled into an
OperationPlan; later requests with the same document only bind their variables, call the
root fields' resolvers (one routed batch, as always) and complete the results with compiled
plans, without graphql-core's per-request execution machinery or Strawberry's hooks.

A plan covers queries without directives whose root fields are resolvers returning plain
records (resolvers/execution/completion.py); compile_plan() returns None for any other. What
a plan cannot word exactly it hands on, never running a resolver twice: before any resolver
ran (variables or arguments that do not coerce), OperationPlan.run returns UNBOUND; after
(an error other than a GatewayError, a value the schema refuses), it returns the root
fields' results as Resolved, for graphql-core to complete (resolvers/execution/executors.py).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import graphql
import orjson
import strawberry
from graphql import (
    DocumentNode,
    FieldNode,
    GraphQLError,
    GraphQLField,
    GraphQLList,
    GraphQLNonNull,
    GraphQLObjectType,
    GraphQLScalarType,
    GraphQLSchema,
    OperationDefinitionNode,
    OperationType,
    VariableDefinitionNode,
    is_non_null_type,
    located_error,
)
from graphql.execution.collect_fields import FragmentDetails, collect_fields, collect_subfields
from graphql.execution.get_variable_signature import (
    GraphQLVariableSignature,
    get_variable_signature,
)
from graphql.execution.values import (
    VariableValues,
    VariableValuesOrErrors,
    VariableValueSource,
    get_argument_values,
    get_variable_values,
)
from graphql.pyutils import Undefined
from strawberry.schema.schema_converter import get_arguments
from strawberry.types import ExecutionResult
from strawberry.types.field import StrawberryField

from contracts.errors import GatewayError
from gateway.runtime.lanes import STEP, offload, on_bulk_thread, sliced
from gateway.service import Lookup
from resolvers.execution.completion import PlanCompiler
from resolvers.execution.results import response_extensions
from resolvers.schema.annotations import DEFINITION, Plan
from resolvers.schema.context import Context


class Unbound:
    """Nothing ran: the general path words the request's errors."""


UNBOUND = Unbound()


@dataclass(frozen=True)
class Resolved:
    """The root fields ran: their results by response key, for graphql-core to complete."""

    results: dict[str, Any]


@dataclass(frozen=True)
class _Info:
    """What our resolvers read of strawberry.Info."""

    context: Context


@dataclass(frozen=True)
class RootField:
    key: str  # the response key (alias or name)
    definition: GraphQLField
    field: StrawberryField
    nodes: list[FieldNode]
    complete: Plan
    names: dict[str, str]  # GraphQL -> Python name of each argument
    plain: frozenset[str]  # the scalar (or list of scalar) arguments
    info: str | None  # the name of the resolver's info parameter

    def arguments(self, schema: strawberry.Schema, info: _Info, raw: dict[str, Any]) -> Any:
        """The resolver's (args, kwargs): Strawberry's conversion, unless every argument
        given is a scalar (or a list of them) or null, which Strawberry passes unchanged."""
        if all(name in self.plain or value is None for name, value in raw.items()):
            kwargs = {self.names[name]: value for name, value in raw.items()}
            if self.info is not None:
                kwargs[self.info] = info
            return [], kwargs
        return get_arguments(
            field=self.field,
            source=None,
            info=info,  # type: ignore[arg-type]
            kwargs=raw,
            config=schema.config,
            scalar_registry=schema.schema_converter.scalar_registry,
        )


@dataclass(frozen=True)
class Variable:
    """A variable whose values need no coercion when `accepts` them (a string for String,
    a list of strings for [String!]...): graphql-core would return them unchanged; or, with
    `parse`, the value its scalar's parse_value gives (a DateTime's string), as
    graphql-core would coerce it (parse raising: graphql-core words the refusal)."""

    name: str
    signature: GraphQLVariableSignature
    required: bool
    accepts: Callable[[Any], bool]
    parse: Callable[[Any], Any] | None = None

    def coerced(self, value: Any) -> Any:
        """An accepted value as graphql-core coerces it (None stays None); raises when
        graphql-core would refuse it."""
        if self.parse is None or value is None:
            return value
        parsed = self.parse(value)
        if parsed is Undefined:
            raise ValueError(f"{self.name}: not a value of its type")
        return parsed


@dataclass(frozen=True)
class OperationPlan:
    variables: tuple[VariableDefinitionNode, ...]
    fields: tuple[RootField, ...]
    plain: tuple[Variable, ...] | None  # None: some variable always needs coercion

    def bind(self, schema: GraphQLSchema, given: dict[str, Any]) -> VariableValuesOrErrors:
        """The variables' values as graphql-core's get_variable_values gives them."""
        if self.plain is None:
            return get_variable_values(schema, self.variables, given)
        sources, coerced = {}, {}
        for variable in self.plain:
            value = given.get(variable.name, Undefined)
            if value is Undefined and not variable.required:
                sources[variable.name] = VariableValueSource(variable.signature)
                continue
            if value is Undefined or not variable.accepts(value):
                return get_variable_values(schema, self.variables, given)
            try:
                coerced[variable.name] = variable.coerced(value)
            except Exception:  # noqa: BLE001 - a refusal is graphql-core's to word
                return get_variable_values(schema, self.variables, given)
            sources[variable.name] = VariableValueSource(variable.signature, value)
        return VariableValues(sources, coerced)

    async def run(
        self, schema: strawberry.Schema, context: Context, variables: dict[str, Any] | None
    ) -> ExecutionResult | Unbound | Resolved:
        """The response; UNBOUND or the results Resolved when it needs graphql-core's words."""
        coerced = await offload(self.bind, schema._schema, variables or {})
        if isinstance(coerced, list):
            return UNBOUND  # the general path words the coercion errors
        info = _Info(context)
        bound = []
        for root in self.fields:
            try:
                raw = get_argument_values(root.definition, root.nodes[0], coerced)
                bound.append(root.arguments(schema, info, raw))
            except Exception:  # noqa: BLE001 - any refusal is the general path's to word
                return UNBOUND
        # made only once every field bound: a coroutine never awaited would warn
        calls = [_call(r.field, a, k) for r, (a, k) in zip(self.fields, bound, strict=True)]
        if len(calls) == 1:  # no task to gather
            results = [await _settled(calls[0])]
        else:
            results = await asyncio.gather(*calls, return_exceptions=True)
        completed = await offload(self.complete, results)
        if completed is None:
            return Resolved({r.key: result for r, result in zip(self.fields, results, strict=True)})
        data, errors = completed
        return ExecutionResult(data, errors or None, response_extensions(context))

    def complete(self, results: list[Any]) -> tuple[dict[str, Any], list[GraphQLError]] | None:
        """The data and the field errors, or None when graphql-core must complete it. In
        the bulk lane (on its thread), each field's value comes encoded: see _encoded."""
        bulk = on_bulk_thread()
        data: dict[str, Any] = {}
        errors: list[GraphQLError] = []
        for some in sliced(list(zip(self.fields, results, strict=True))):
            for root, result in some:
                if isinstance(result, GatewayError) and not is_non_null_type(root.definition.type):
                    data[root.key] = None
                    errors.append(located_error(result, root.nodes, [root.key]))
                    continue
                if isinstance(result, BaseException):
                    return None
                try:
                    data[root.key] = (
                        _encoded(root.complete, result) if bulk else root.complete(result)
                    )
                except Exception:  # noqa: BLE001 - a value the schema refuses: graphql-core words it
                    return None
        return data, errors


def _encoded(complete: Plan, result: Any) -> Any:
    """A field's value completed and encoded as an orjson.Fragment, so encoding the
    response is no long stall; a batch's entries (the one list of a result that may be
    longer than max_page_size) slice by slice, giving way between them."""
    if not (isinstance(result, Lookup) and len(result.entries) > STEP):
        return orjson.Fragment(orjson.dumps(complete(result)))
    first: dict[str, Any] | None = None
    lists: dict[str, list[bytes]] = {}  # response key -> its items, encoded slice by slice
    for some in sliced(result.entries):
        part = complete(Lookup(list(some), result.meta))
        first = first or part
        for key, value in part.items():
            if isinstance(value, list):
                lists.setdefault(key, []).append(orjson.dumps(value)[1:-1])
    assert first is not None
    return {
        key: orjson.Fragment(b"[" + b",".join(lists[key]) + b"]") if key in lists else value
        for key, value in first.items()
    }


async def _call(field: StrawberryField, args: list[Any], kwargs: dict[str, Any]) -> Any:
    assert field.base_resolver is not None
    result = field.base_resolver(*args, **kwargs)
    return await result if inspect.isawaitable(result) else result


async def _settled(call: Awaitable[Any]) -> Any:
    try:
        return await call
    except Exception as exc:  # noqa: BLE001 - handled like gather(return_exceptions=True)
        return exc


def compile_plan(
    schema: strawberry.Schema, document: DocumentNode, operation_name: str | None
) -> OperationPlan | None:
    """The plan of a valid document's operation, or None when it needs the general path."""
    core = schema._schema
    operation = _operation(document, operation_name)
    if operation is None or operation.operation != OperationType.QUERY:
        return None
    fragments = {
        d.name.value: FragmentDetails(d)
        for d in document.definitions
        if isinstance(d, graphql.FragmentDefinitionNode)
    }
    no_variables = get_variable_values(core, (), {})
    assert not isinstance(no_variables, list)

    def collect(obj: Any, field_details_list: Any) -> Any:
        return collect_subfields(core, fragments, no_variables, operation, obj, field_details_list)

    compiler = PlanCompiler(collect)
    root_type = core.query_type
    assert root_type is not None
    collected = collect_fields(core, fragments, no_variables, root_type, operation)
    if collected.new_defer_usages:
        return None
    fields = []
    for key, details in collected.grouped_field_set.items():
        field = _root_field(schema, compiler, root_type, key, details)
        if field is None:
            return None
        fields.append(field)
    definitions = tuple(operation.variable_definitions or ())
    return OperationPlan(definitions, tuple(fields), _plain_variables(core, definitions))


def _operation(
    document: DocumentNode, operation_name: str | None
) -> OperationDefinitionNode | None:
    """The operation the request names (or the document's only one); None if there is none
    such, or several."""
    operations = [d for d in document.definitions if isinstance(d, OperationDefinitionNode)]
    if operation_name is None and len(operations) == 1:
        return operations[0]
    named = [o for o in operations if o.name and o.name.value == operation_name]
    return named[0] if len(named) == 1 else None


def _root_field(
    schema: strawberry.Schema,
    compiler: PlanCompiler,
    root_type: GraphQLObjectType,
    key: str,
    details: Any,
) -> RootField | None:
    """One root field's plan: its resolver, arguments and the completion of what it selects;
    None when it needs the general path (introspection, extensions, permissions...)."""
    definition = root_type.fields.get(details[0].node.name.value)
    field = definition.extensions.get(DEFINITION) if definition else None
    if definition is None or not isinstance(field, StrawberryField):
        return None  # __typename and introspection: the general path
    if field.base_resolver is None or field.extensions or field.permission_classes:
        return None
    complete = compiler.compile(definition.type, details)
    if complete is None:
        return None
    info = field.base_resolver.info_parameter
    return RootField(
        key,
        definition,
        field,
        [d.node for d in details],
        complete,
        *_arguments(schema, definition, field),
        info.name if info else None,
    )


def _plain_variables(
    schema: GraphQLSchema, definitions: tuple[VariableDefinitionNode, ...]
) -> tuple[Variable, ...] | None:
    plain = []
    for definition in definitions:
        signature = get_variable_signature(schema, definition)
        if isinstance(signature, GraphQLError) or definition.default_value is not None:
            return None
        required = is_non_null_type(signature.type)
        accepts, parse = _accepts(signature.type), _parser(signature.type)
        if accepts is None and parse is not None:
            accepts = _is_a(str) if required else (lambda v: v is None or type(v) is str)
        if accepts is None:
            return None
        plain.append(Variable(signature.name, signature, required, accepts, parse))
    return tuple(plain)


_PARSED = frozenset({"DateTime"})  # scalars read from a string by their own parse_value


def _parser(kind: Any) -> Callable[[Any], Any] | None:
    """The parse_value of a (non-null) scalar of _PARSED, which graphql-core calls on a
    variable's value; None for any other type."""
    scalar = kind.of_type if isinstance(kind, GraphQLNonNull) else kind
    if isinstance(scalar, GraphQLScalarType) and scalar.name in _PARSED:
        parse: Callable[[Any], Any] = scalar.parse_value
        return parse
    return None


_PLAIN: dict[str, type] = {"String": str, "Boolean": bool}  # scalars whose values are one type


def _is_a(kind: type) -> Callable[[Any], bool]:
    return lambda v: type(v) is kind


_SCALARS: dict[str, Callable[[Any], bool]] = {
    **{name: _is_a(kind) for name, kind in _PLAIN.items()},
    "Int": lambda v: type(v) is int and -(2**31) <= v < 2**31,
}


def _accepts(kind: Any) -> Callable[[Any], bool] | None:
    """What values of a variable type graphql-core returns unchanged; None: too many to say."""
    if isinstance(kind, GraphQLNonNull):
        inner = _accepts(kind.of_type)
        return None if inner is None else (lambda v: v is not None and inner(v))
    if isinstance(kind, GraphQLList):
        types = _plain_types(kind.of_type)
        if types is not None:  # a list of keys: its items' types at C speed
            return lambda v: v is None or (type(v) is list and set(map(type, v)) <= types)
        item = _accepts(kind.of_type)
        if item is None:
            return None
        return lambda v: v is None or (type(v) is list and all(map(item, v)))
    scalar = _SCALARS.get(kind.name) if isinstance(kind, GraphQLScalarType) else None
    return None if scalar is None else (lambda v: v is None or scalar(v))


def _plain_types(kind: Any) -> frozenset[type] | None:
    """The types of the values of a String or Boolean type (null: None's, when nullable)
    graphql-core returns unchanged; None for other types (an Int's range is its own test)."""
    non_null = isinstance(kind, GraphQLNonNull)
    scalar = kind.of_type if non_null else kind
    if not isinstance(scalar, GraphQLScalarType) or scalar.name not in _PLAIN:
        return None
    plain = _PLAIN[scalar.name]
    return frozenset([plain] if non_null else [plain, type(None)])


def _arguments(
    schema: strawberry.Schema, definition: GraphQLField, field: StrawberryField
) -> tuple[dict[str, str], frozenset[str]]:
    """A root field's arguments: GraphQL -> Python names, and the scalar ones."""
    python = {schema.config.name_converter.from_argument(a): a.python_name for a in field.arguments}
    plain = set()
    for name, argument in definition.args.items():
        kind = argument.type
        while isinstance(kind, GraphQLNonNull | GraphQLList):
            kind = kind.of_type
        if isinstance(kind, GraphQLScalarType) and argument.out_name is None and name in python:
            plain.add(name)
    return python, frozenset(plain)
