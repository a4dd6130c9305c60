"""What a request costs, known before any work is done.

A document's shape is read in one pass over its definitions, each fragment once, however
often it is spread: its depth, its aliases, and its root fields, each with the times it is
selected (spreads multiply) and its width (the leaf fields selected under it, fragments
expanded). A request's cost is then, over its root fields, times x rows x width: the values
its response may hold, where a root field's rows come from its arguments (a batch's keys, a
page's `first`...) and weigh what a row of its kind takes to serve (a page's row 2; the
field's COST metadata, resolvers/schema/costs.py); plus, for a field whose arguments make it
read a store whole (SCANS: a filter, an order without an index, totals), times x the store's
rows / SCAN_ROWS_PER_UNIT. Both steps take time linear in the
document: a small document whose fragments fan out is measured, not expanded.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from graphql import (
    DefinitionNode,
    FieldNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    GraphQLError,
    GraphQLField,
    InlineFragmentNode,
    OperationDefinitionNode,
    SelectionSetNode,
    value_from_ast_untyped,
)
from graphql.pyutils import Undefined

from resolvers.schema.annotations import COST, DEFINITION, SCANS, Rows, Scans

_INTROSPECTION = ("__schema", "__type")
# Rows a scan reads per cost unit (about 50 µs): DuckDB filters and ranks 5,000 to 10,000
# rows of a snapshot in that time on the reference machine (bench/RESULTS.md, asking by
# value), the overlay's anti-join and the k-way merge included; counted at half that.
SCAN_ROWS_PER_UNIT = 2_000
RowsOf = Callable[[str], int]  # a store's rows in the whole cluster, as this node estimates


@dataclass(frozen=True)
class Root:
    node: FieldNode
    times: int  # how often the document selects it: the product of the spreads leading to it
    width: int  # leaf fields selected under it, per row


@dataclass(frozen=True)
class Shape:
    depth: int
    aliases: int  # aliased fields, spreads multiplied
    roots: tuple[Root, ...]

    def cost(
        self, fields: Mapping[str, GraphQLField], variables: dict[str, Any], rows_of: RowsOf
    ) -> Cost:
        """The values a response may hold and the rows it scans, given the variables."""
        values = scanned = 0
        for root in self.roots:
            field = fields.get(root.node.name.value)
            rows: Rows | None = _metadata(field, COST)
            scans: Scans | None = _metadata(field, SCANS)
            given = _given(root.node, variables) if rows or scans else {}
            values += root.times * (1 if rows is None else max(1, rows(given))) * root.width
            store = None if scans is None else scans(given)
            if store is not None:
                scanned += root.times * -(-rows_of(store) // SCAN_ROWS_PER_UNIT)
        return Cost(values, scanned)

    def fixed(self, fields: Mapping[str, GraphQLField]) -> bool:
        """Whether the cost is the same for every request: no root field's cost reads its
        arguments (COST) or a store's rows (SCANS)."""
        return not any(
            _metadata(fields.get(root.node.name.value), kind)
            for root in self.roots
            for kind in (COST, SCANS)
        )


@dataclass(frozen=True)
class Cost:
    values: int  # values the response may hold, weighted by kind
    scanned: int  # units of the rows its fields read whole (in DuckDB or numpy, not Python)

    @property
    def total(self) -> int:
        return self.values + self.scanned


@dataclass
class _Selected:
    """What a root field selects: its leaf fields, and the fragments spread under it."""

    width: int = 0
    spreads: Counter[str] = field(default_factory=Counter)


@dataclass
class _Part:
    """One definition, read once: what it selects, before its spreads are resolved."""

    depth: int = 0
    aliases: int = 0
    width: int = 0
    spreads: Counter[str] = field(default_factory=Counter)  # anywhere in it
    top_spreads: Counter[str] = field(default_factory=Counter)  # at its own top level
    spread_depths: dict[str, int] = field(default_factory=dict)  # deepest level of each
    roots: list[tuple[FieldNode, _Selected]] = field(default_factory=list)


def shape(operation: OperationDefinitionNode, definitions: tuple[DefinitionNode, ...]) -> Shape:
    """The shape of `operation`; a GraphQLError when a fragment spreads itself."""
    fragments = {d.name.value: d for d in definitions if isinstance(d, FragmentDefinitionNode)}
    order = _order(operation, fragments)  # spread fragments before their spreaders
    parts: dict[str, _Part] = {}
    depth: dict[str, int] = {}
    width: dict[str, int] = {}
    for name in order:
        node = operation if name == "" else fragments[name]
        part = parts[name] = _read(node.selection_set, root=name == "" or _on_query(node))
        depth[name] = max([part.depth, *(lvl + depth[f] for f, lvl in part.spread_depths.items())])
        width[name] = part.width + sum(n * width[f] for f, n in part.spreads.items())
    times: Counter[str] = Counter({"": 1})  # the times each definition is spread, in all
    top: Counter[str] = Counter({"": 1})  # the times each is spread at the root level
    for name in reversed(order):
        for spread, count in parts[name].spreads.items():
            times[spread] += times[name] * count
        for spread, count in parts[name].top_spreads.items():
            top[spread] += top[name] * count
    roots = tuple(
        Root(
            node,
            top[name],
            max(1, under.width + sum(n * width[f] for f, n in under.spreads.items())),
        )
        for name in order
        if top[name]
        for node, under in parts[name].roots
    )
    aliases = sum(times[name] * part.aliases for name, part in parts.items())
    return Shape(depth[""], aliases, roots)


def _on_query(fragment: OperationDefinitionNode | FragmentDefinitionNode) -> bool:
    return isinstance(fragment, FragmentDefinitionNode) and fragment.type_condition.name.value in (
        "Query",
        "Subscription",
    )


def _order(
    operation: OperationDefinitionNode, fragments: Mapping[str, FragmentDefinitionNode]
) -> list[str]:
    """The operation ("") and the fragments it reaches, each after those it spreads."""
    order: list[str] = []
    state: dict[str, bool] = {}  # False: being visited, True: done
    stack: list[tuple[str, list[str]]] = [("", _spread_names(operation.selection_set))]
    state[""] = False
    while stack:
        name, pending = stack[-1]
        if not pending:
            stack.pop()
            state[name] = True
            order.append(name)
            continue
        spread = pending.pop()
        if spread not in fragments or state.get(spread) is True:
            continue
        if spread in state:
            raise GraphQLError(f"fragment {spread!r} spreads itself")
        state[spread] = False
        stack.append((spread, _spread_names(fragments[spread].selection_set)))
    return order


def _spread_names(selections: SelectionSetNode) -> list[str]:
    names: list[str] = []
    pending = [selections]
    while pending:
        for selection in pending.pop().selections:
            if isinstance(selection, FragmentSpreadNode):
                names.append(selection.name.value)
            elif isinstance(selection, FieldNode | InlineFragmentNode) and selection.selection_set:
                pending.append(selection.selection_set)
    return names


def _read(selections: SelectionSetNode, root: bool) -> _Part:
    part = _Part()
    _walk(selections, part, level=0, root=root, under=None)
    return part


def _walk(
    selections: SelectionSetNode,
    part: _Part,
    level: int,
    root: bool,
    under: _Selected | None,
) -> None:
    """Reads one selection set at `level` into `part`; `under` is what the root field being
    read selects, None at the root level."""
    for selection in selections.selections:
        if isinstance(selection, FragmentSpreadNode):
            name = selection.name.value
            part.spreads[name] += 1
            part.spread_depths[name] = max(part.spread_depths.get(name, 0), level)
            if under is not None:
                under.spreads[name] += 1
            elif root:
                part.top_spreads[name] += 1
        elif isinstance(selection, InlineFragmentNode):
            _walk(selection.selection_set, part, level, root, under)
        elif isinstance(selection, FieldNode):
            if selection.name.value in _INTROSPECTION:  # the schema, not data: not measured
                continue
            part.depth = max(part.depth, level + 1)
            part.aliases += selection.alias is not None
            leaf = selection.selection_set is None
            if under is not None:
                under.width += leaf
            else:
                part.width += leaf
            if root and under is None:
                selected = _Selected()
                if selection.selection_set is not None:
                    _walk(selection.selection_set, part, level + 1, root, selected)
                part.roots.append((selection, selected))
            elif selection.selection_set is not None:
                _walk(selection.selection_set, part, level + 1, root, under)


def _given(node: FieldNode, variables: dict[str, Any]) -> dict[str, Any]:
    """A root field's arguments, untyped, the given ones only."""
    given = {}
    for argument in node.arguments or ():
        value = value_from_ast_untyped(argument.value, variables)
        if value is not None and value is not Undefined:
            given[argument.name.value] = value
    return given


def _metadata(field: GraphQLField | None, key: str) -> Any:
    definition = field.extensions.get(DEFINITION) if field else None
    return getattr(definition, "metadata", {}).get(key) if definition else None
