"""The clock's helpers: what a progress line says is left, at the pace so far."""

from __future__ import annotations

from contracts.clock import left


def test_left_is_the_rest_at_the_pace_so_far() -> None:
    assert left(50_000, 250_000, 3.0) == ", about 12 s left"


def test_left_says_nothing_before_any_or_after_all() -> None:
    assert left(0, 10, 5.0) == ""
    assert left(10, 10, 5.0) == ""
