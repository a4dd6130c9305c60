"""The shortest way through a node: a request (alone, not one of a batch) whose document's
one root field reads the record of one key (`s(key: $k) { ... }`, a dashboard's most
common request), with no consistency demand and none of the store's joins selected.

The key goes to the query service's lookup as the field's resolver would send it, and the
response is built as the compiled plan builds it (the field's completion, the response's
extensions), without Strawberry's argument binding, the resolver call and the plan's
gathering between them. A variable that does not bind plainly, or a role that may not read
the store, returns None before anything ran, and the compiled plan answers as always; so
both give the same response (tests/test_plans.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from graphql import VariableNode
from graphql.execution.values import get_argument_values
from graphql.pyutils import Undefined
from strawberry.types import ExecutionResult

from contracts.project import Store
from resolvers.execution.plans import OperationPlan, Resolved
from resolvers.execution.results import response_extensions
from resolvers.schema.annotations import KEY, Plan
from resolvers.schema.context import Context

KEY_ARGUMENT = "key"


@dataclass(frozen=True)
class KeyLookup:
    response_key: str
    store: Store
    complete: Plan
    variable: str | None  # the variable the key comes from; None: the literal
    accepts: Callable[[Any], bool]  # the variable's values passed unchanged
    literal: Any = None

    async def run(
        self, context: Context, variables: dict[str, Any] | None
    ) -> ExecutionResult | Resolved | None:
        """The response; the field's result Resolved when graphql-core must complete it (a
        value the schema refuses); None when nothing ran: the compiled plan answers."""
        key = self._key(variables or {})
        store, access = self.store, context.node.project.access
        if not context.lone or key is None:
            return None  # a batch shared with other operations routes them all together
        if access is not None and not access.permits(context.principal, store.name):
            return None
        lookup = await context.queries.lookup(store, [key], None)
        try:
            data = {self.response_key: self.complete(lookup)}
        except Exception:  # noqa: BLE001 - a value the schema refuses: graphql-core words it
            return Resolved({self.response_key: lookup})
        return ExecutionResult(data, None, response_extensions(context))

    def _key(self, variables: dict[str, Any]) -> Any:
        if self.variable is None:
            return self.literal
        value = variables.get(self.variable, Undefined)
        return value if value is not Undefined and self.accepts(value) else None


def key_lookup(plan: OperationPlan, selected: frozenset[str]) -> KeyLookup | None:
    """The KeyLookup of a compiled plan that reads one key and nothing else; `selected`: every
    field name its document holds (a join selected needs the plan)."""
    if len(plan.fields) != 1 or plan.plain is None:
        return None
    (root,) = plan.fields
    metadata: Mapping[str, Any] = root.field.metadata or {}
    store: Store | None = metadata.get(KEY)
    if store is None or any(join.name in selected for join in store.joins):
        return None
    arguments = root.nodes[0].arguments or ()
    if len(arguments) != 1 or arguments[0].name.value != KEY_ARGUMENT:
        return None  # a consistency demand: the plan's
    value, declared = arguments[0].value, {v.name: v for v in plan.plain}
    if isinstance(value, VariableNode):
        variable = declared.get(value.name.value)
        if variable is None or len(declared) != 1:
            return None
        return KeyLookup(root.key, store, root.complete, variable.name, variable.accepts)
    if declared:
        return None  # variables that are declared must bind: the plan checks them
    literal = get_argument_values(root.definition, root.nodes[0])[KEY_ARGUMENT]
    return KeyLookup(root.key, store, root.complete, None, lambda value: False, literal)
