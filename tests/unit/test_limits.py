"""An internal sub-query is held to the limits its GraphQL request was: the largest lookup,
page and window span a public request can cause pass, one more is refused with the code
the public API gives."""

from __future__ import annotations

import pytest

from contracts.errors import GatewayError
from contracts.project import Project, load
from contracts.settings import MAX_SUBQUERY_KEYS
from gateway.model.limits import SCAN_LOOKAHEAD, check_subquery
from gateway.model.queries import Get, Prefix, Query, Range, SubQuery, Windows, WindowsOfKey
from tests.projects import HOUR_MS, write_project


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Project:
    settings = "max_page_size = 50\nmax_keys_per_field = 20\ndefault_page_size = 10"
    return load(
        write_project(tmp_path_factory.mktemp("limits"), [7001], replicas=1, settings=settings)
    )


def largest(project: Project) -> list[tuple[str, Query, Query, str]]:
    """(store, the largest query allowed, one past it, the code refusing that)."""
    page = project.settings.max_page_size + SCAN_LOOKAHEAD
    keys = MAX_SUBQUERY_KEYS  # the protocol's, whatever the node's settings
    span = (project.settings.max_page_size - 1) * HOUR_MS // 2  # delaysHopping advances 30m
    return [
        ("trainStatus", Get(tuple(range(keys))), Get(tuple(range(keys + 1))), "TOO_MANY_KEYS"),
        ("latestBooking", Range(None, None, page), Range(None, None, page + 1), "PAGE_SIZE"),
        ("latestBooking", Prefix("C", page), Prefix("C", page + 1), "PAGE_SIZE"),
        ("hourlyRevenue", Windows(0, 9, page), Windows(0, 9, page + 1), "PAGE_SIZE"),
        ("latestBooking", Range(None, None, 2), Range(None, None, 1), "PAGE_SIZE"),
        (
            "delaysHopping",
            WindowsOfKey(1, 0, span),
            WindowsOfKey(1, 0, span + HOUR_MS // 2),
            "WINDOW_RANGE_TOO_LARGE",
        ),
    ]


def test_the_largest_sub_queries_a_request_causes_pass_and_one_more_is_refused(
    project: Project,
) -> None:
    for store, allowed, refused, code in largest(project):
        check_subquery(SubQuery(0, 1, store, allowed), project)
        with pytest.raises(GatewayError) as raised:
            check_subquery(SubQuery(0, 1, store, refused), project)
        assert raised.value.code.startswith(code), (store, refused)
        if code == "PAGE_SIZE":  # the sub-query's own limit, not the page it stands for
            assert isinstance(refused, Range | Prefix | Windows)
            assert str(raised.value).endswith(f"not {refused.limit}"), str(raised.value)


def test_a_windows_query_of_a_store_without_windows_is_left_to_the_store(
    project: Project,
) -> None:
    for store in ("latestBooking", "noSuchStore"):  # answered DOES_NOT_EXIST or STORE_EXCEPTION
        check_subquery(SubQuery(0, 1, store, WindowsOfKey("k", 0, 10**15)), project)
