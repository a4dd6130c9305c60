"""The shortest way through a node: a request whose document's root fields each read the
record of one key (`s(key: $k) { ... }`, a dashboard's most common request; or a thousand
of them, aliased, as a dashboard that writes its keys into the text sends them), or whose
one root field reads a versioned store's key as of a time (`sAsOf(key: $k, asOf: $t)`),
with no consistency demand and none of the stores' joins selected.

The keys go to the query service as one batch of one-key lookups (`key_lookups`), as the
fields' resolvers would send them, and the response is built as the compiled plan builds it
(each field's completion, the response's extensions), without Strawberry's argument binding,
a resolver call, a task and a lookup per field. So such a request costs per key, not per
field. A variable that does not bind plainly, or a role that may not read a store, returns
None before anything ran, and the compiled plan answers as always; so both give the same
response (tests/test_plans.py, tests/test_versions.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

from graphql import VariableNode
from graphql.pyutils import Undefined
from graphql.utilities import value_from_ast
from strawberry.types import ExecutionResult

from contracts.errors import GatewayError
from contracts.partitioner import Key
from contracts.project import Store
from gateway.cluster.routing import Trace
from gateway.node import GatewayNode
from gateway.runtime.lanes import offload
from gateway.service import KeyRead, KeyVersions, Lookup, read_at_once, read_routed
from resolvers.execution.plans import OperationPlan, Resolved, RootField, Variable
from resolvers.execution.results import extensions, response_extensions
from resolvers.schema.annotations import AS_OF, KEY
from resolvers.schema.context import Context
from resolvers.schema.views import span_ms

KEY_ARGUMENT, AS_OF_ARGUMENT = "key", "asOf"


@dataclass(frozen=True)
class Bound:
    """Where a root field's argument comes from: a variable, or the document's literal."""

    variable: Variable | None  # None: the literal
    literal: Any = None

    def value(self, variables: Mapping[str, Any]) -> Any:
        """The argument's value; None when the plan must bind it (absent, null, not plain,
        or one the variable's type refuses)."""
        if self.variable is None:
            return self.literal
        value = variables.get(self.variable.name, Undefined)
        if value is Undefined or value is None or not self.variable.accepts(value):
            return None
        try:
            return self.variable.coerced(value)
        except Exception:  # noqa: BLE001 - a refusal is the plan's to word
            return None


@dataclass(frozen=True)
class KeyField:
    """A root field that reads one key's record, or (`at`: a versioned store's asOf) the
    version of it valid at a time: where its arguments come from."""

    store: Store
    key: Bound
    at: Bound | None = None

    def read(self, variables: Mapping[str, Any]) -> KeyRead | None:
        """Its read; None when the plan must bind its arguments."""
        key = self.key.value(variables)
        if key is None:
            return None
        if self.at is None:
            return KeyRead(self.store, key)
        at = self.at.value(variables)
        return None if at is None else KeyRead(self.store, key, span_ms(at, at)[1])


@dataclass(frozen=True)
class KeyLookup:
    plan: OperationPlan
    fields: tuple[KeyField, ...]  # one per root field of the plan, in its order

    async def run(
        self, context: Context, variables: dict[str, Any] | None
    ) -> ExecutionResult | Resolved | None:
        """The response; the fields' results Resolved when graphql-core must complete them
        (a value the schema refuses); None when nothing ran: the compiled plan answers."""
        reads = [field.read(variables or {}) for field in self.fields]
        if any(read is None for read in reads):
            return None
        access = context.node.project.access
        if access is not None and not all(
            access.permits(context.principal, field.store.declared_name) for field in self.fields
        ):
            return None
        if len(reads) == 1:  # the one-key read: its lookup, its field's completion
            if not context.lone:
                return None  # a batch shared with other operations routes them all together
            return await self._one(context, cast(KeyRead, reads[0]))
        keys = [cast(KeyRead, read).key for read in reads]
        results = await self._looked_up(context, keys)
        completed = await offload(self.plan.complete, results, items=len(results))
        if completed is None:
            fields = self.plan.fields
            return Resolved({r.key: result for r, result in zip(fields, results, strict=True)})
        data, errors = completed
        return ExecutionResult(data, errors or None, response_extensions(context))

    def lone(self, variables: dict[str, Any] | None) -> KeyRead | None:
        """The read of a one-field document, when its arguments bind plainly; None when
        run() must answer (several fields, or arguments the plan binds)."""
        if len(self.fields) != 1:
            return None
        return self.fields[0].read(variables or {})

    def at_once(self, node: GatewayNode, read: KeyRead) -> ExecutionResult | None:
        """A lone read's response, as run() gives it, when this node reads the key from
        memory at once (resolvers/transport/known.py); None when it must be routed:
        nothing was counted, and the read had no effect."""
        found = read_at_once(node.router, node.topology.current, read)
        return None if found is None else self._answered(*found)

    async def routed(
        self, node: GatewayNode, read: KeyRead, authorization: str | None
    ) -> ExecutionResult | None:
        """The same read through the router (a hop to the replica that serves the key);
        None when run() must word its answer (a value the schema refuses, a coded error)."""
        try:
            found = await read_routed(node.router, node.topology.current, read, authorization)
        except GatewayError:
            return None
        return self._answered(*found)

    async def _one(self, context: Context, read: KeyRead) -> ExecutionResult | Resolved:
        (root,) = self.plan.fields
        found: Lookup | KeyVersions | GatewayError
        if read.at_ms is None:
            found = await context.queries.lookup(read.store, [read.key], None)
        else:
            try:
                found = await context.queries.versions(
                    read.store, read.key, read.at_ms, read.at_ms, 1, None, None
                )
            except GatewayError as error:  # as the field's resolver raises it
                found = error
        completed = self.plan.complete([found])
        if completed is None:  # a value the schema refuses: graphql-core words it
            return Resolved({root.key: found})
        data, errors = completed
        return ExecutionResult(data, errors or None, response_extensions(context))

    def _answered(self, found: Lookup | KeyVersions, trace: Trace) -> ExecutionResult | None:
        (root,) = self.plan.fields
        try:
            data = {root.key: root.complete(found)}
        except Exception:  # noqa: BLE001 - a value the schema refuses: run() words it
            return None
        return ExecutionResult(data, None, extensions(found.meta.token_text, [trace]))

    async def _looked_up(self, context: Context, keys: list[Key]) -> list[Lookup]:
        """Each field's lookup, in the fields' order: every store's keys read as one batch."""
        readers: dict[str, tuple[Store, list[int]]] = {}  # store -> the fields reading it
        for number, field in enumerate(self.fields):
            readers.setdefault(field.store.name, (field.store, []))[1].append(number)
        asked = [(store, [keys[n] for n in numbers]) for store, numbers in readers.values()]
        found = await context.queries.key_lookups(asked)
        lookups = {
            number: lookup
            for (_, numbers), looked_up in zip(readers.values(), found, strict=True)
            for number, lookup in zip(numbers, looked_up, strict=True)
        }
        return [lookups[number] for number in range(len(keys))]


def key_lookup(plan: OperationPlan, selected: frozenset[str]) -> KeyLookup | None:
    """The KeyLookup of a compiled plan whose root fields each read one key and nothing
    else, or whose one root field reads one key's version at a time; `selected`: every field
    name its document holds (a join selected needs the plan)."""
    if plan.plain is None:
        return None
    declared = {v.name: v for v in plan.plain}
    found = [_key_field(root, declared, selected) for root in plan.fields]
    fields = tuple(field for field in found if field is not None)
    if len(fields) != len(found) or (len(fields) > 1 and any(f.at for f in fields)):
        return None
    bound = {b.variable.name for f in fields for b in (f.key, f.at) if b and b.variable}
    if bound != set(declared):
        return None  # variables that are declared must bind: the plan checks them
    return KeyLookup(plan, fields)


def _key_field(
    root: RootField, declared: Mapping[str, Variable], selected: frozenset[str]
) -> KeyField | None:
    metadata: Mapping[str, Any] = root.field.metadata or {}
    store: Store | None = metadata.get(KEY) or metadata.get(AS_OF)
    if store is None or any(join.name in selected for join in store.joins):
        return None
    names = (KEY_ARGUMENT,) if KEY in metadata else (KEY_ARGUMENT, AS_OF_ARGUMENT)
    given = root.nodes[0].arguments or ()
    arguments = {argument.name.value: argument.value for argument in given}
    if sorted(arguments) != sorted(names):
        return None  # a consistency demand: the plan's
    bound = []
    for name in names:
        value = arguments[name]
        if isinstance(value, VariableNode):
            variable = declared.get(value.name.value)
            if variable is None:
                return None
            bound.append(Bound(variable))
            continue
        literal = value_from_ast(value, root.definition.args[name].type)
        if literal is Undefined:
            return None  # refused: the plan's to word
        bound.append(Bound(None, literal))
    return KeyField(store, *bound)
