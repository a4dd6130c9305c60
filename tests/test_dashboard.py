"""The demo's live dashboard in headless Chromium (Debian's package, driven by Playwright):
served by a node with every asset local, its leaderboard shows the top 10 customers by
revenue as the oracle ranks them, and a booking produced during the test moves its customer
to the top of the page within two seconds of the pipeline publishing it; with the pipeline
following and the demo's live bookings arriving, the top 10 moves within seconds."""

from __future__ import annotations

import contextlib
import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from playwright.sync_api import Page, sync_playwright

from contracts.clock import now_ms
from contracts.partitioner import partition_for
from contracts.project import Project
from contracts.records import Record
from contracts.release import release
from resolvers.schema.build import build_schema
from spark_pipeline import job
from spark_pipeline.spark import LazySpark
from stategate import demo
from stategate.app import schema_version
from stategate.broker import Broker
from stategate.demo import bookings
from tests import oracle
from tests.nodes import Nodes, following
from tests.projects import demo_project
from topics import open_log

CHROMIUM = "/usr/bin/chromium"
# As Debian's Chromium must run here: no sandbox as root, nothing started in the background.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TOP = 10  # the leaderboard's length
CUSTOMERS = 400
VISIBLE_WITHIN_MS = 2000


@pytest.fixture(scope="module")
def cluster(
    spark: LazySpark, kafka: Broker, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Nodes]:
    if shutil.which(CHROMIUM) is None:
        pytest.fail(f"{CHROMIUM} is missing: `make test` installs Debian's chromium package")
    project = demo_project(tmp_path_factory.mktemp("dashboard"), kafka.bootstrap)
    bookings.generate(project, customers=CUSTOMERS, events=4000, end_ms=demo.END_MS)
    job.run(project, spark, notify=False)
    nodes = Nodes(project, project.path.parent)
    for node_id in nodes.ids:
        nodes.start(node_id)
    yield nodes
    nodes.stop_all()


def totals_of(project: Project) -> dict[str, tuple[int, float]]:
    """Each customer's bookings and revenue, as the oracle counts them from the raw log."""
    rows = oracle.expected_store(project, "customerTotals").values()
    return {row[0]: (row[1], row[2] or 0.0) for part in rows for row in part}


def leaders(project: Project) -> list[tuple[str, int]]:
    """The oracle's top 10 by revenue (ties by key): (key, bookings)."""
    ranked = sorted(totals_of(project).items(), key=lambda kv: (-kv[1][1], kv[0]))
    return [(key, bookings) for key, (bookings, _) in ranked[:TOP]]


def newest_append(project: Project) -> int:
    """When the log appended its newest record, as the oracle reads it."""
    return max(record["append_ms"] for record in oracle.records(project, "bookings"))


def timetable_entry(project: Project, trip: str) -> str:
    """A trip's timetable record as the dashboard shows it, from the oracle; "–" for none."""
    rows = {r[0]: r for part in oracle.expected_store(project, "timetable").values() for r in part}
    if trip not in rows:
        return "–"
    _, minutes, fare, operator = rows[trip]
    return f"{operator} · {minutes // 60} h {minutes % 60:02d} · {fare:.2f}"


def book(project: Project, key: str, value: dict[str, object]) -> None:
    """Produce one booking now, as a producer would."""
    log = open_log(project)
    try:
        log.append(project.topics["bookings"], [Record(key, value, now_ms())])
    finally:
        log.close()


def shown(page: Page) -> list[tuple[str, int]]:
    rows = page.query_selector_all("#customers tbody tr")
    return [
        (row.get_attribute("data-key") or "", int(row.get_attribute("data-bookings") or -1))
        for row in rows
    ]


@contextlib.contextmanager
def local_page(origin: str, path: str) -> Iterator[Page]:
    """A page of the node at `origin` in headless Chromium; once closed, every request it
    made (HTTP and WebSocket) must have gone to that node."""
    requested: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page()
        page.on("request", lambda request: requested.append(request.url))
        page.on("websocket", lambda socket: requested.append(socket.url))
        page.goto(origin + path)
        yield page
        browser.close()
    local = (origin + "/", origin.replace("http://", "ws://") + "/")
    assert requested and all(url.startswith(local) for url in requested), requested


def test_the_dashboard_is_local_and_its_leaderboard_moves(
    cluster: Nodes, spark: LazySpark, tmp_path: Path
) -> None:
    project = cluster.project
    with local_page(cluster.url(cluster.ids[1]), "/pages/") as page:
        page.wait_for_selector("#status[data-state=live]", timeout=15_000)
        page.wait_for_function(f"document.querySelectorAll('#customers tbody tr').length == {TOP}")
        assert shown(page) == leaders(project)
        page.wait_for_function(  # the leader is followed until a row is clicked
            "document.querySelector('.selected-key').textContent.includes('"
            + leaders(project)[0][0]
            + "')"
        )

        totals = totals_of(project)
        ranked = sorted(totals, key=lambda k: (-totals[k][1], k))
        key = ranked[TOP + 5]  # off the board, until it books a lot
        count = totals[key][0]
        book(project, key, {"trip": "Berlin→Hamburg", "price": 99_999.0, "seats": 2})
        job.run(project, spark)  # publishes, then tells the nodes
        published = time.monotonic()
        page.wait_for_function(
            f"document.querySelector('#customers tbody tr').dataset.key == '{key}'",
            timeout=VISIBLE_WITHIN_MS,
        )
        seen_after = time.monotonic() - published
        assert shown(page) == leaders(project) and shown(page)[0] == (key, count + 1)
        newest = page.get_attribute("#freshness [data-field=newest]", "data-appended-ms")
        assert newest == str(newest_append(project))  # the booking just made
        assert "appended" in page.inner_text("#freshness [data-field=newest]")
        page.click(f"#customers tr[data-key={key}]")  # follow the new leader
        page.wait_for_function(
            "document.querySelector('#latest [data-field=price]').textContent.includes('99999')",
            timeout=VISIBLE_WITHIN_MS,
        )
        journey = page.inner_text("#latest [data-field=journey]")
        assert journey == timetable_entry(project, "Berlin→Hamburg"), "the booking's trip, joined"
        as_of_before_the_booking(page, project, key)
        schema = schema_version(build_schema(project))
        runs = f"{', '.join(cluster.ids)}: {release()} · schema {schema}"
        page.wait_for_function(  # what each node runs: one release all around
            f"document.querySelector('#releases').innerText.trim() == {json.dumps(runs)}"
        )
        page.screenshot(path=str(tmp_path / "dashboard.png"), full_page=True)
    print(f"the new leader showed {seen_after * 1000:.0f} ms after the pipeline published")


# A time as the page's datetime-local picker writes it: local time, to the second.
LOCAL = """(ms) => { const d = new Date(ms), p = (n) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}T${p(d.getHours())}:` +
    `${p(d.getMinutes())}:${p(d.getSeconds())}`; }"""


def as_of_before_the_booking(page: Page, project: Project, key: str) -> None:
    """Picking a time before the booking shows the version valid then, as the oracle has it,
    with the interval it was valid in; "now" goes back to the latest."""
    partition = partition_for(key, "string", project.cluster.partitions)
    history = oracle.expected_history(project, "latestBooking")[partition]
    *earlier, latest = history.versions[key]
    then = next(v for v in reversed(earlier) if v.row is not None and v.valid_to is not None)
    at = -(-then.valid_from // 1000) * 1000  # the picker's whole seconds
    assert at < then.valid_to and history.as_of(key, at) == then
    page.fill("#as-of", page.evaluate(LOCAL, at))
    page.dispatch_event("#as-of", "change")
    price = f"{then.row[2]:.2f}" if then.row[2] is not None else "–"
    page.wait_for_function(
        f"document.querySelector('#latest [data-field=price]').textContent == '{price}'",
        timeout=VISIBLE_WITHIN_MS,
    )
    assert " – " in page.inner_text("#latest [data-field=valid]")  # replaced since
    page.click("#as-of-now")
    page.wait_for_function(
        "document.querySelector('#latest [data-field=price]').textContent.includes('99999')",
        timeout=VISIBLE_WITHIN_MS,
    )
    assert page.inner_text("#latest [data-field=valid]") == "–"  # the latest, unbounded


def response_pane(page: Page) -> str:
    return str(page.evaluate("document.querySelector('.graphiql-response').innerText"))


def test_the_playground_is_local_and_its_subscription_shows_a_produced_booking(
    cluster: Nodes, spark: LazySpark
) -> None:
    """GraphiQL from the node's own assets: a subscription run from the editor shows the
    oracle's count, then the count after a booking produced during the test."""
    project = cluster.project
    key = leaders(project)[7][0]
    query = f'subscription {{ customerTotals(key: "{key}") {{ record {{ bookings }} }} }}'
    with local_page(cluster.url(cluster.ids[2]), f"/graphql?q={quote(query)}") as page:
        page.click(".graphiql-execute-button", timeout=15_000)
        count = totals_of(project)[key][0]
        page.wait_for_function(
            "document.querySelector('.graphiql-response').innerText"
            f'.includes(\'"bookings": "{count}"\')',
            timeout=15_000,
        )
        book(project, key, {"trip": "Köln→Bonn", "price": 19.9, "seats": 1})
        job.run(project, spark)
        page.wait_for_function(
            "document.querySelector('.graphiql-response').innerText"
            f'.includes(\'"bookings": "{count + 1}"\')',
            timeout=VISIBLE_WITHIN_MS,
        )
        assert totals_of(project)[key][0] == count + 1, response_pane(page)


LIVE_RATE = 20.0  # bookings/s, as `make demo` produces them
MOVES_WITHIN_S = 10.0


def test_the_leaderboard_moves_within_seconds_while_the_demos_bookings_arrive(
    cluster: Nodes, tmp_path: Path
) -> None:
    """With the continuous pipeline following and the demo's live bookings arriving (issue
    50), the page's top 10 changes (a customer's bookings, or the ranking) within
    MOVES_WITHIN_S: the busiest customers of the week book most live."""
    project = cluster.project
    follow = following(project, tmp_path / "pipeline.log")
    live = bookings.LiveBookings(project, CUSTOMERS, LIVE_RATE)
    try:
        with local_page(cluster.url(cluster.ids[0]), "/pages/") as page:
            page.wait_for_selector("#status[data-state=live]", timeout=15_000)
            page.wait_for_function(
                f"document.querySelectorAll('#customers tbody tr').length == {TOP}"
            )
            before = shown(page)
            live.start()
            started = time.monotonic()
            while shown(page) == before:
                assert time.monotonic() - started < MOVES_WITHIN_S, f"still {before}"
                time.sleep(0.2)
            print(f"the leaderboard moved {time.monotonic() - started:.1f} s into live bookings")
    finally:
        live.stop()
        follow.terminate()
        follow.wait(60)
