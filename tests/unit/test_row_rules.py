"""Row rules: the grammar, every mistake refused when the project file is read with the
entry and the column named, and the claims bound into the filter a request's rows must pass
(a claim missing or of the wrong type passes no row, whatever `not` surrounds it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from contracts import row_rules
from contracts.access import Principal
from contracts.conditions import AllOf, AnyOf, Condition, Not
from contracts.project import ConfigError, load
from contracts.row_rules import Claim, RuleError
from gateway.model.visibility import NOTHING, Visibility
from tests.unit.test_config import BASE, write

FIELDS = {"key": "string", "trip": "string", "price": "double", "seats": "int", "open": "boolean"}
RULES = """
[auth]
jwt_secret_env = "SECRET_VARIABLE"
[auth.roles]
customer = ["totals"]
auditor = ["totals"]
ops = ["*"]
[auth.rows.customer]
totals = "key = claims.customer_id"
[auth.rows.auditor]
totals = "not (total > claims.limit)"
"""


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        ("key = claims.customer_id", Condition("key", "eq", Claim("customer_id"))),
        ("trip in claims.trips and price < 500",
         AllOf((Condition("trip", "in", Claim("trips")), Condition("price", "lt", 500)))),
        ('not (trip starts with "Ber\\"lin") or seats >= -2',
         AnyOf((Not(Condition("trip", "startsWith", 'Ber"lin')), Condition("seats", "gte", -2)))),
        ("seats in [1, 2] and open = true and price is not null",
         AllOf((Condition("seats", "in", (1, 2)), Condition("open", "eq", True),
               Condition("price", "isNull", False)))),
        ('key = "1" or trip = "2" and seats = 3',
         AnyOf((Condition("key", "eq", "1"),
                 AllOf((Condition("trip", "eq", "2"), Condition("seats", "eq", 3)))))),
    ],
)  # fmt: skip
def test_the_grammar(text: str, rule: row_rules.Rule) -> None:
    assert row_rules.parse(text, FIELDS) == rule


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("region = claims.r", "column 1: 'region' is not a field of the store"),
        ("key = 3", "column 7: 3 is not a string value, as key is"),
        ("seats = 2.5", "column 9: 2.5 is not a int value, as seats is"),
        ("open < true", "column 6: < needs an ordered field; open is boolean"),
        ('price starts with "a"', "column 7: starts with needs a string field; price is double"),
        ("key =", "column 6: the rule ends too soon"),
        ('key = "a" price = 1', "column 11: unexpected 'price'"),
        ('(key = "a"', "column 11: expected ')', found 'the end'"),
        ('key ~ "a"', "column 5: cannot read"),
        ('key like "a"', "column 5: expected a comparison after key, found 'like'"),
        ("not " * 17 + "open = true", "nests deeper than 16 levels"),
    ],
)
def test_a_rule_that_does_not_parse_says_where(text: str, message: str) -> None:
    with pytest.raises(RuleError, match=message.replace("(", r"\(").replace(")", r"\)")):
        row_rules.parse(text, FIELDS)


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ('[auth.rows.customer]\nnothing = "key = claims.a"',
         "auth.rows.customer.nothing: 'nothing' is not a store"),
        ('[auth.rows.stranger]\ntotals = "key = claims.a"',
         "auth.rows.stranger.totals: \\[auth.roles\\] does not grant stranger totals"),
        ("[auth.rows.customer]\ntotals = 3",
         "auth.rows.customer.totals must be a rule in a string"),
        ('[auth.rows.customer]\ntotals = "n = \\"x\\""',
         'auth.rows.customer.totals: column 5: "x" is not a long value, as n is: n = "x"'),
        ("[auth.rows]\ncustomer = 1", "auth.rows.customer must be a table"),
    ],
)  # fmt: skip
def test_a_bad_rule_is_refused_when_the_file_is_read(
    tmp_path: Path, rows: str, message: str
) -> None:
    auth = '[auth]\njwt_secret_env = "S"\n[auth.roles]\ncustomer = ["totals"]\n'
    with pytest.raises(ConfigError, match=message):
        load(write(tmp_path, BASE + auth + rows + "\n"))


def visibility(tmp_path: Path, roles: set[str], **claims: object) -> tuple[Visibility, object]:
    project = load(write(tmp_path, BASE + RULES))
    principal = Principal("someone", frozenset(roles), None, claims)
    return Visibility(project.access, principal), project.stores["totals"]


def test_claims_are_bound_and_roles_add_up(tmp_path: Path) -> None:
    visible, store = visibility(tmp_path, {"customer"}, customer_id="C1", limit=10)
    assert visible.of(store) == Condition("key", "eq", "C1")  # type: ignore[arg-type]
    assert visible.decides_by_key(store)  # type: ignore[arg-type]
    both, _ = visibility(tmp_path, {"customer", "auditor"}, customer_id="C1", limit=10)
    assert both.of(store) == AnyOf(  # type: ignore[arg-type]
        (Not(Condition("total", "gt", 10)), Condition("key", "eq", "C1"))  # by role name
    )
    assert not both.decides_by_key(store)  # type: ignore[arg-type]
    whole, _ = visibility(tmp_path, {"customer", "ops"}, customer_id="C1")
    assert whole.of(store) is None  # type: ignore[arg-type]
    narrowed = visible.within(store, Condition("n", "gt", 1))  # type: ignore[arg-type]
    assert narrowed == AllOf((Condition("n", "gt", 1), Condition("key", "eq", "C1")))


@pytest.mark.parametrize(
    "claims", [{}, {"limit": None}, {"limit": "ten"}, {"limit": [10]}, {"limit": True}]
)
def test_a_claim_missing_or_of_the_wrong_type_passes_no_row(
    tmp_path: Path, claims: dict[str, object]
) -> None:
    """Even under `not`: the auditor's rule must not turn into every row."""
    visible, store = visibility(tmp_path, {"auditor"}, **claims)
    assert visible.of(store) == NOTHING  # type: ignore[arg-type]
    test = visible.test(store)  # type: ignore[arg-type]
    assert test is not None and not test(["C1", 5, 1.0])
