"""Browser pages on other origins: preflights and responses carry CORS headers for the
origins the project lists, and for no other; WebSocket handshakes from a page of any other
origin are refused before connection_init, in headless Chromium and from a raw client, while
the node's own pages, listed origins and clients that send no Origin subscribe (real nodes)."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Page, sync_playwright
from websockets.exceptions import InvalidStatus
from websockets.sync.client import ClientConnection, connect
from websockets.typing import Origin, Subprotocol

from contracts.project import load
from stategate.launcher import free_ports
from tests.live import PROTOCOL
from tests.nodes import Nodes
from tests.projects import write_project
from tests.test_dashboard import CHROMIUM, CHROMIUM_ARGS

DASHBOARD = "http://dash.example:3000"
OTHER = "http://elsewhere.example"
PLANNED = '{ latestBooking(key: "k") { key } }'  # answered by a compiled plan
SUBSCRIPTION = "subscription { stores { name } }"
# In a page: open a graphql-transport-ws socket, subscribe, and say what came of it.
SUBSCRIBE_JS = """([url, query]) => new Promise((resolve) => {
  const ws = new WebSocket(url, "graphql-transport-ws");
  ws.onopen = () => ws.send(JSON.stringify({type: "connection_init"}));
  ws.onmessage = (event) => {
    const message = JSON.parse(event.data);
    if (message.type === "connection_ack") {
      ws.send(JSON.stringify({id: "1", type: "subscribe", payload: {query}}));
    } else if (message.type === "next") {
      resolve("next " + JSON.stringify(message.payload.data));
      ws.close();
    }
  };
  ws.onclose = (event) => resolve("closed " + event.code);
})"""


@dataclass(frozen=True)
class Served:
    listing: str  # a node whose cors_origins lists DASHBOARD and `dashboard`
    same_origin: str  # a node with cors_origins = [] (the default)
    dashboard: int  # a loopback port whose pages the first node lists

    def ws(self, url: str) -> str:
        return url.replace("http://", "ws://") + "/graphql"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root: Path = tmp_path_factory.mktemp("cors")
    (root / "listing").mkdir()
    (root / "default").mkdir()
    dashboard, *ports = free_ports(4)
    listed = f'cors_origins = ["{DASHBOARD}", "http://127.0.0.1:{dashboard}"]'
    listing = write_project(root / "listing", ports, settings=listed)
    default = write_project(root / "default", free_ports(3))
    clusters = [Nodes(load(path), path.parent) for path in (listing, default)]
    try:
        for nodes in clusters:
            nodes.start("node1")
        yield Served(clusters[0].url("node1"), clusters[1].url("node1"), dashboard)
    finally:
        for nodes in clusters:
            nodes.stop_all()


@pytest.fixture(scope="module")
def node(served: Served) -> str:
    return f"{served.listing}/graphql"


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
    exposed = mine.headers["access-control-expose-headers"].lower()
    assert "stategate-node" in exposed and "stategate-assignment" in exposed, "routing pages"
    assert mine.headers["stategate-assignment"] == "0", "the project file's placement"
    theirs = httpx.post(node, json={"query": query}, headers={"origin": OTHER})
    assert theirs.status_code == 200
    assert "access-control-allow-origin" not in theirs.headers


def handshake(ws_url: str, origin: str | None = None) -> ClientConnection:
    """A raw client's socket, its handshake sending `origin` (none by default)."""
    sent = None if origin is None else Origin(origin)
    return connect(ws_url, subprotocols=[Subprotocol(PROTOCOL)], origin=sent)


def subscribed(ws_url: str, origin: str | None = None) -> dict[str, Any]:
    """The first result of SUBSCRIPTION over a raw socket."""
    with handshake(ws_url, origin) as ws:
        ws.send(json.dumps({"type": "connection_init"}))
        assert json.loads(ws.recv(10))["type"] == "connection_ack"
        ws.send(json.dumps({"id": "1", "type": "subscribe", "payload": {"query": SUBSCRIPTION}}))
        message: dict[str, Any] = json.loads(ws.recv(10))
        assert message["type"] == "next", message
        return message


@pytest.mark.parametrize("origin", [OTHER, "null", "http://127.0.0.1", "https://evil.example"])
def test_a_handshake_from_a_foreign_origin_is_refused_with_403(served: Served, origin: str) -> None:
    for url in (served.same_origin, served.listing):
        with pytest.raises(InvalidStatus) as refused:
            handshake(served.ws(url), origin)
        assert refused.value.response.status_code == 403


def test_its_own_origin_a_listed_one_and_no_origin_may_subscribe(served: Served) -> None:
    for url in (served.same_origin, served.listing):
        assert subscribed(served.ws(url), origin=url)["payload"]["data"]["stores"]
        assert subscribed(served.ws(url))["payload"]["data"]["stores"]  # not a browser
    assert subscribed(served.ws(served.listing), origin=DASHBOARD)["payload"]["data"]["stores"]
    with pytest.raises(InvalidStatus):  # listed on the other node only
        handshake(served.ws(served.same_origin), DASHBOARD)


@contextlib.contextmanager
def site(port: int = 0) -> Iterator[str]:
    """A page on another loopback port: another origin, as any local web app is."""

    class Blank(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"<!doctype html><title>elsewhere</title>"
            self.send_response(200)
            self.send_header("content-type", "text/html")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Blank)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def browser_page() -> Iterator[Page]:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser.new_page()
        finally:
            browser.close()


def from_page(page: Page, ws_url: str) -> str:
    return str(page.evaluate(SUBSCRIBE_JS, [ws_url, SUBSCRIPTION]))


def test_in_chromium_a_page_of_another_origin_cannot_open_a_socket(served: Served) -> None:
    with site() as elsewhere, browser_page() as page:
        page.goto(elsewhere)
        for url in (served.same_origin, served.listing):
            assert from_page(page, served.ws(url)) == "closed 1006"  # the handshake failed


def test_in_chromium_the_nodes_own_page_and_a_listed_origin_subscribe(served: Served) -> None:
    with site(served.dashboard) as dashboard, browser_page() as page:
        page.goto(f"{served.same_origin}/graphql")  # the playground, the node's own page
        assert from_page(page, served.ws(served.same_origin)).startswith('next {"stores":[{')
        page.goto(dashboard)
        assert from_page(page, served.ws(served.listing)).startswith('next {"stores":[{')
        assert from_page(page, served.ws(served.same_origin)) == "closed 1006"
