"""The demo's live bookings keep its leaderboard moving (issue 50): the customers who book
most live are the week's top customers by revenue, as the oracle counts it from the log."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

from contracts.eventlog import read
from stategate.demo import bookings
from tests import oracle
from tests.projects import demo_project

CUSTOMERS, EVENTS = 2000, 40_000
TOP = 10
LIVE_S = 3.0
RATE = 400.0  # bookings/s: enough for the busiest customers to show in LIVE_S


def test_the_weeks_top_customers_by_revenue_book_most_live(tmp_path: Path) -> None:
    project = demo_project(tmp_path)  # on the file log
    bookings.generate(project, customers=CUSTOMERS, events=EVENTS, end_ms=1_767_225_600_000)
    totals = oracle.expected_store(project, "customerTotals").values()
    revenue = {row[0]: row[2] or 0.0 for part in totals for row in part}
    top = sorted(revenue, key=lambda key: -revenue[key])[:TOP]
    week_end = {
        p: sum(1 for _ in read(project.log_dir, "bookings", p))
        for p in range(project.cluster.partitions)
    }
    live = bookings.LiveBookings(project, CUSTOMERS, RATE)
    live.start()
    time.sleep(LIVE_S)
    live.stop()
    booked: Counter[str] = Counter(
        str(record["key"])
        for p, end in week_end.items()
        for record in read(project.log_dir, "bookings", p, start=end)
    )
    assert live.appended >= RATE  # a second's worth at least
    busiest = {key for key, _ in booked.most_common(5 * TOP)}
    assert len(busiest & set(top)) >= TOP // 2, (top, booked.most_common(TOP))
