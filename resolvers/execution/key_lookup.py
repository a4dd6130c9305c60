"""The shortest way through a node: a request whose document's root fields each read the
record of one key (`s(key: $k) { ... }`, a dashboard's most common
request; or a thousand of them, aliased, as a dashboard that writes its keys into the text
sends them), with no consistency demand and none of the stores' joins selected.

The keys go to the query service as one batch of one-key lookups (`key_lookups`), as the
fields' resolvers would send them, and the response is built as the compiled plan builds it
(each field's completion, the response's extensions), without Strawberry's argument binding,
a resolver call, a task and a lookup per field. So such a request costs per key, not per
field. A variable that does not bind plainly, or a role that may not read a store, returns
None before anything ran, and the compiled plan answers as always; so both give the same
response (tests/test_plans.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from graphql import VariableNode
from graphql.execution.values import get_argument_values
from graphql.pyutils import Undefined
from strawberry.types import ExecutionResult

from contracts.partitioner import Key
from contracts.project import Store
from gateway.cluster.routing import Trace
from gateway.node import GatewayNode
from gateway.runtime.lanes import offload
from gateway.service import Lookup, read_at_once, read_routed
from resolvers.execution.plans import OperationPlan, Resolved, RootField
from resolvers.execution.results import extensions, response_extensions
from resolvers.schema.annotations import KEY
from resolvers.schema.context import Context

KEY_ARGUMENT = "key"


@dataclass(frozen=True)
class KeyField:
    """A root field that reads one key's record: where its key comes from."""

    store: Store
    variable: str | None  # the variable the key comes from; None: the literal
    accepts: Callable[[Any], bool]  # the variable's values passed unchanged
    literal: Any = None

    def key(self, variables: Mapping[str, Any]) -> Any:
        """The key; None when the plan must bind it (absent, null, or not plain)."""
        if self.variable is None:
            return self.literal
        value = variables.get(self.variable, Undefined)
        return value if value is not Undefined and self.accepts(value) else None


@dataclass(frozen=True)
class KeyLookup:
    plan: OperationPlan
    fields: tuple[KeyField, ...]  # one per root field of the plan, in its order

    async def run(
        self, context: Context, variables: dict[str, Any] | None
    ) -> ExecutionResult | Resolved | None:
        """The response; the fields' results Resolved when graphql-core must complete them
        (a value the schema refuses); None when nothing ran: the compiled plan answers."""
        keys = [field.key(variables or {}) for field in self.fields]
        if any(key is None for key in keys):
            return None
        access = context.node.project.access
        if access is not None and not all(
            access.permits(context.principal, field.store.declared_name) for field in self.fields
        ):
            return None
        if len(keys) == 1:  # the one-key read: its lookup, its field's completion
            if not context.lone:
                return None  # a batch shared with other operations routes them all together
            lookup = await context.queries.lookup(self.fields[0].store, keys, None)
            (root,) = self.plan.fields
            try:
                data = {root.key: root.complete(lookup)}
            except Exception:  # noqa: BLE001 - a value the schema refuses: graphql-core words it
                return Resolved({root.key: lookup})
            return ExecutionResult(data, None, response_extensions(context))
        results = await self._looked_up(context, keys)
        completed = await offload(self.plan.complete, results, items=len(results))
        if completed is None:
            fields = self.plan.fields
            return Resolved({r.key: result for r, result in zip(fields, results, strict=True)})
        data, errors = completed
        return ExecutionResult(data, errors or None, response_extensions(context))

    def lone_key(self, variables: dict[str, Any] | None) -> Key | None:
        """The key of a one-field read, when it binds plainly; None when run() must answer
        (several fields, or a key the plan binds)."""
        if len(self.fields) != 1:
            return None
        key: Key | None = self.fields[0].key(variables or {})
        return key

    def at_once(self, node: GatewayNode, key: Key) -> ExecutionResult | None:
        """A lone one-key read's response, as run() gives it, when this node reads the key
        from memory at once (resolvers/transport/known.py); None when it must be routed:
        nothing was counted, and the read had no effect."""
        read = read_at_once(node.router, node.topology.current, self.fields[0].store, key)
        return None if read is None else self._answered(*read)

    async def routed(
        self, node: GatewayNode, key: Key, authorization: str | None
    ) -> ExecutionResult | None:
        """The same read through the router (a hop to the replica that serves the key);
        None when a value of its answer is one the schema refuses: run() words it."""
        store = self.fields[0].store
        read = await read_routed(node.router, node.topology.current, store, key, authorization)
        return self._answered(*read)

    def _answered(self, lookup: Lookup, trace: Trace) -> ExecutionResult | None:
        (root,) = self.plan.fields
        try:
            data = {root.key: root.complete(lookup)}
        except Exception:  # noqa: BLE001 - a value the schema refuses: run() words it
            return None
        return ExecutionResult(data, None, extensions(lookup.meta.token_text, [trace]))

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
    else; `selected`: every field name its document holds (a join selected needs the plan)."""
    if plan.plain is None:
        return None
    declared = {v.name: v for v in plan.plain}
    found = [_key_field(root, declared, selected) for root in plan.fields]
    fields = tuple(field for field in found if field is not None)
    if len(fields) != len(found):
        return None
    if {field.variable for field in fields if field.variable} != set(declared):
        return None  # variables that are declared must bind: the plan checks them
    return KeyLookup(plan, fields)


def _key_field(
    root: RootField, declared: Mapping[str, Any], selected: frozenset[str]
) -> KeyField | None:
    metadata: Mapping[str, Any] = root.field.metadata or {}
    store: Store | None = metadata.get(KEY)
    if store is None or any(join.name in selected for join in store.joins):
        return None
    arguments = root.nodes[0].arguments or ()
    if len(arguments) != 1 or arguments[0].name.value != KEY_ARGUMENT:
        return None  # a consistency demand: the plan's
    value = arguments[0].value
    if isinstance(value, VariableNode):
        variable = declared.get(value.name.value)
        return None if variable is None else KeyField(store, variable.name, variable.accepts)
    literal = get_argument_values(root.definition, root.nodes[0])[KEY_ARGUMENT]
    return KeyField(store, None, lambda value: False, literal)
