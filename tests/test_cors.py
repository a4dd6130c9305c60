"""Browser pages on other origins: preflights and responses carry CORS headers for the
origins the project lists, and for no other (a real node over HTTP)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from contracts.project import load
from stategate.launcher import free_ports
from tests.nodes import Nodes
from tests.projects import write_project

DASHBOARD = "http://dash.example:3000"
OTHER = "http://elsewhere.example"
PLANNED = '{ latestBooking(key: "k") { key } }'  # answered by a compiled plan


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root: Path = tmp_path_factory.mktemp("cors")
    path = write_project(root, free_ports(3))
    path.write_text(path.read_text() + f'\n[settings]\ncors_origins = ["{DASHBOARD}"]\n')
    nodes = Nodes(load(path), root)
    nodes.start("node1")
    yield f"{nodes.url('node1')}/graphql"
    nodes.stop_all()


def preflight(url: str, origin: str) -> httpx.Response:
    return httpx.options(
        url,
        headers={
            "origin": origin,
            "access-control-request-method": "POST",
            "access-control-request-headers": "content-type, authorization",
        },
    )


def test_a_preflight_from_a_listed_origin_is_allowed(node: str) -> None:
    answer = preflight(node, DASHBOARD)
    assert answer.status_code == 200
    assert answer.headers["access-control-allow-origin"] == DASHBOARD
    assert "POST" in answer.headers["access-control-allow-methods"]
    assert "authorization" in answer.headers["access-control-allow-headers"].lower()


def test_a_preflight_from_another_origin_is_refused(node: str) -> None:
    answer = preflight(node, OTHER)
    assert answer.status_code == 400
    assert "access-control-allow-origin" not in answer.headers


@pytest.mark.parametrize("query", ["{ __typename }", PLANNED])
def test_responses_name_the_listed_origin_only(node: str, query: str) -> None:
    mine = httpx.post(node, json={"query": query}, headers={"origin": DASHBOARD})
    assert mine.status_code == 200 and "data" in mine.json()
    assert mine.headers["access-control-allow-origin"] == DASHBOARD
    theirs = httpx.post(node, json={"query": query}, headers={"origin": OTHER})
    assert theirs.status_code == 200
    assert "access-control-allow-origin" not in theirs.headers
