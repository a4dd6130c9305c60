"""The shortest way through a node: a request (alone, not one of a batch) whose document's
one root field reads the record of one key (`s(key: $k) { ... }`, a dashboard's most
common request), with no consistency demand and none of the store's joins selected.

When this node is the first replica the router would ask for the key's partition and reads
it at once from memory, the answer is built in one step, from the same parts the compiled
plan would use (the router's replica order and memory read, the query service's entries and
meta, the field's completion, the response's extensions), without the resolver, the batch
and the rounds between them. Whatever else happens (a variable that does not bind plainly, a
role that may not read the store, another replica first, a read that fails), run() returns
None before anything is counted, and the compiled plan answers the request as always; so
both give the same response (tests/test_plans.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from graphql import VariableNode
from graphql.execution.values import get_argument_values
from graphql.pyutils import Undefined
from strawberry.types import ExecutionResult

from contracts.partitioner import partition_for
from contracts.project import Store
from gateway.cluster.batching import Outcome, Work
from gateway.model.queries import Get, SubQuery
from resolvers.execution.plans import OperationPlan
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

    def run(self, context: Context, variables: dict[str, Any] | None) -> ExecutionResult | None:
        """The response, or None: the compiled plan answers (nothing ran here yet)."""
        started = time.perf_counter()
        key = self._key(variables or {})
        node, store = context.node, self.store
        access = node.project.access
        if not context.lone or key is None:
            return None  # a batch shared with other operations routes them all together
        if access is not None and not access.permits(context.principal, store.name):
            return None
        partition = partition_for(key, store.key_type, node.project.cluster.partitions)
        q = SubQuery(0, partition, store.name, Get((key,)))
        read = node.router.read_here(q, started)
        if read is None:
            return None
        answer, trace = read
        context.batch.traces.append(trace)
        outcome = Outcome(Work(store, q.query, ()), [(q, answer)], {key: 0})
        lookup = context.queries.looked_up([key], outcome)
        data = {self.response_key: self.complete(lookup)}
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
