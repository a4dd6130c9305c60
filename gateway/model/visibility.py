"""What of each store a request may read: its principal's row rules (contracts/row_rules.py)
with the token's claims bound, as a filter its rows must pass (gateway/model/filters.py).

A scan carries the filter to the partitions, inside its own (so pages and totals count only
rows the rules pass); a read of named keys tests the rows it gets back. A rule whose claim
the token lacks, or carries with a value of the wrong type, passes no row.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from contracts.access import ANONYMOUS, Access, Principal
from contracts.conditions import KEY, AllOf, AnyOf, Condition, Filter, Not
from contracts.project import Store
from contracts.row_rules import Claim, Rule, fits
from gateway.model.filters import Row, field_index, predicate, type_of

NOTHING: Filter = AnyOf(())  # no part holds: no row passes
Layout = Callable[[Store, str], int]  # where a field sits in the rows a query answers


def in_record(store: Store, field: str) -> int:
    """A record's (and a window's): the key, [the window's start,] the columns."""
    return field_index(store, field)


def in_version(store: Store, field: str) -> int:
    """A version's: the key, valid from, valid to, the columns."""
    return 0 if field == KEY else field_index(store, field) + 2


class Visibility:
    """One request's row rules, bound once per store it reads. Without [auth], or for a
    principal whose roles grant a store whole, every row is visible (`of` is None)."""

    def __init__(self, access: Access | None, principal: Principal) -> None:
        self.access, self.principal = access, principal
        self._bound: dict[str, Filter | None] = {}
        self._tests: dict[tuple[str, Layout], Callable[[Row], bool] | None] = {}

    def of(self, store: Store) -> Filter | None:
        """The filter the store's rows must pass; None: every row does."""
        name = store.name
        if name not in self._bound:
            self._bound[name] = self._bind(store)
        return self._bound[name]

    def within(self, store: Store, where: Filter | None) -> Filter | None:
        """`where`, narrowed to the rows the request may read."""
        rule = self.of(store)
        if rule is None:
            return where
        return rule if where is None else AllOf((where, rule))

    def test(self, store: Store, layout: Layout = in_record) -> Callable[[Row], bool] | None:
        """Whether a row (of `layout`) is visible; None: every row is."""
        if self.access is None:  # no [auth]: nothing to look up on a lookup's way
            return None
        at = (store.name, layout)
        if at not in self._tests:
            rule = self.of(store)
            self._tests[at] = None if rule is None else predicate(rule, lambda f: layout(store, f))
        return self._tests[at]

    def decides_by_key(self, store: Store) -> bool:
        """Whether the key alone says if a row is visible: then a key with no row is
        withheld too, and nothing tells whether it has one."""
        rule = self.of(store)
        return rule is not None and _on_key(rule)

    def _bind(self, store: Store) -> Filter | None:
        if self.access is None:
            return None
        rules = self.access.rules(self.principal, store.declared_name)
        if rules is None:
            return None
        bound = [_bound(rule, self.principal.claims, store) for rule in rules]
        passing = tuple(b for b in bound if b is not None)  # a rule missing a claim: no row
        if len(passing) == 1:
            return passing[0]
        return AnyOf(passing)  # of none (NOTHING): no row


EVERYTHING = Visibility(None, ANONYMOUS)


def _bound(rule: Rule, claims: Mapping[str, Any], store: Store) -> Filter | None:
    """The rule with its claims' values; None when one is missing or of the wrong type."""
    match rule:
        case Condition(field, op, Claim(name)):
            value = _claim(claims.get(name), op, type_of(store, field))
            return None if value is None else Condition(field, op, value)
        case Condition():
            return rule
        case AllOf(parts) | AnyOf(parts):
            bound = [_bound(part, claims, store) for part in parts]
            if any(b is None for b in bound):
                return None
            return type(rule)(tuple(b for b in bound if b is not None))
        case Not(part):
            inner = _bound(part, claims, store)
            return None if inner is None else Not(inner)


def _claim(value: Any, op: str, kind: str) -> Any:
    """A claim's value as a test's operand: `in` takes a list or one value."""
    if op == "in":
        values = value if isinstance(value, list) else [value]
        return tuple(values) if all(fits(v, kind) for v in values) else None
    return value if value is not None and fits(value, kind) else None


def _on_key(where: Filter) -> bool:
    match where:
        case Condition(field):
            return field == KEY
        case AllOf(parts) | AnyOf(parts):
            return all(_on_key(part) for part in parts)
        case Not(part):
            return _on_key(part)
