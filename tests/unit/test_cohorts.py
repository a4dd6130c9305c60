"""A subscription's updates never go back on a partition, across an evaluation that failed
on it (resolvers/transport/live.py, Cohort.settle): found by the network-partition scenarios,
where a flapping link made one evaluation fail on a partition and the next answer it from a
replica behind what the subscriber had been sent."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

from strawberry.types import ExecutionResult

from contracts.positions import Position
from resolvers.transport.live import Cohort

P7 = ("bookings", 7)


@dataclass
class Evaluated:
    """What Cohort.settle reads of an evaluation's context: its queries' partitions,
    failures, stores and position."""

    position: Position
    partitions: set[int] = field(default_factory=lambda: {7})
    failed: set[int] = field(default_factory=set)
    stores: set[str] = field(default_factory=lambda: {"latestBooking"})

    def response_token(self) -> Position:
        return self.position

    @property
    def queries(self) -> Evaluated:
        return self


def settle(cohort: Cohort, data: dict[str, Any], evaluated: Evaluated) -> bool:
    """Whether the evaluation is pushed."""
    return cohort.settle(ExecutionResult(data=data, errors=None), cast(Any, evaluated)) is not None


def test_an_update_behind_one_sent_before_a_failed_evaluation_is_not_pushed() -> None:
    cohort = Cohort(operation=cast(Any, None))
    assert settle(cohort, {"bookings": 5}, Evaluated({P7: 501}))
    assert settle(cohort, {"bookings": None}, Evaluated({}, failed={7}))  # p7 failed: said
    assert not settle(cohort, {"bookings": 4}, Evaluated({P7: 491}))  # a replica behind
    assert settle(cohort, {"bookings": 6}, Evaluated({P7: 502}))
    assert cohort.position == {P7: 502}
