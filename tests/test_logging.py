"""What a real node logs, in JSON (settings.log_format): uvicorn's own lines and ours as one
object per line with its fields, and every mistake a client can make (a document that does
not parse or validate, bad variables, transport errors, limits, failed authentication, a
forbidden store, a broken WebSocket protocol) as exactly one line at INFO or WARNING naming
its code and operation, never a traceback; a request that succeeds logs nothing."""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect
from websockets.typing import Origin

from contracts import project as projects
from contracts.project import Project
from stategate.launcher import Processes, free_ports, wait_serving
from tests.live import PROTOCOL, closed_code
from tests.nodes import Served
from tests.projects import reading, write_project
from tests.test_auth import AUTH, SECRET, SECRET_ENV, bearer, token

SETTLE_S = 0.5  # how long a node gets to log a second line it should not log
FIELDS = ["ts", "level", "source", "logger", "message"]


class NodeLog:
    """The node's log file, read line by line as it grows."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.read = 0  # bytes of whole lines read so far

    def lines(self) -> list[dict[str, Any]]:
        """Every whole line since the last call, each parsed (each must be JSON)."""
        data = self.path.read_bytes()[self.read :]
        whole = data[: data.rfind(b"\n") + 1]
        self.read += len(whole)
        return [json.loads(line) for line in whole.decode().splitlines()]

    def after(self, action: Any, expect_one: bool = True) -> list[dict[str, Any]]:
        """The lines logged because of `action`: waits for the first, then SETTLE_S more."""
        self.lines()
        action()
        found: list[dict[str, Any]] = []
        deadline = time.monotonic() + 10
        while expect_one and not found and time.monotonic() < deadline:
            found += self.lines()
            time.sleep(0.05)
        time.sleep(SETTLE_S)
        return found + self.lines()


@dataclass
class Node:
    project: Project
    url: str
    log: NodeLog


@pytest.fixture(scope="module")
def node(served: Served, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    """One node logging JSON, with [auth], over the shared cluster's snapshot store."""
    root = tmp_path_factory.mktemp("logging")
    settings = 'log_format = "json"\nmax_request_cost = 500'
    path = write_project(root, free_ports(1), replicas=1, settings=settings)
    reading(path, served.project)
    path.write_text(path.read_text() + AUTH)
    project = projects.load(path)
    processes = Processes(root)
    os.environ[SECRET_ENV] = SECRET
    try:
        processes.start_nodes(project)
    finally:
        del os.environ[SECRET_ENV]
    try:
        wait_serving(project, ["node1"])
        yield Node(project, project.cluster.nodes[0].url, NodeLog(root / "node1.log"))
    finally:
        processes.stop_all()


def ops() -> dict[str, str]:
    """A token minted now: one minted at import would expire before a long run reaches us."""
    return bearer(token(("ops",)))


FORGED = token(("ops",), key="not the secret, but 32 bytes long")
PAGE = (
    "query Page($after: String) { latestBookingRange(first: 5, after: $after) { records { key } } }"
)
HTTP_MISTAKES = {  # name: (request, code, operation, level)
    "parse": ({"json": {"query": "{ nope("}}, "GRAPHQL_PARSE_FAILED", None, "INFO"),
    "validation": (
        {"json": {"query": "query Dash { nope }", "operationName": "Dash"}},
        "GRAPHQL_VALIDATION_FAILED",
        "Dash",
        "INFO",
    ),
    "variables": (
        {
            "json": {
                "query": "query Latest($k: String!) { latestBooking(key: $k) { record { trip } } }",
                "variables": {"k": 5},
            }
        },
        "BAD_USER_INPUT",
        None,  # no operationName sent: the line names none
        "INFO",
    ),
    "not json": (
        {"content": b"{nope", "headers": {"content-type": "application/json"}},
        "BAD_REQUEST",
        None,
        "INFO",
    ),  # fmt: skip
    "media type": (
        {"content": b"{}", "headers": {"content-type": "text/plain"}},
        "UNSUPPORTED_MEDIA_TYPE",
        None,
        "INFO",
    ),  # fmt: skip
    "method": ({"method": "PUT"}, "METHOD_NOT_ALLOWED", None, "INFO"),
    "cost": (
        {"json": {"query": "{ latestBookingRange(first: 900) { records { key } } }"}},
        "COST_LIMIT_EXCEEDED",
        None,
        "INFO",
    ),
    "page size": (
        {"json": {"query": "{ latestBookingRange(first: 0) { records { key } } }"}},
        "PAGE_SIZE_OUT_OF_RANGE",
        None,
        "INFO",
    ),
    "cursor": (
        {"json": {"query": PAGE, "operationName": "Page", "variables": {"after": "garbage"}}},
        "BAD_CURSOR",
        "Page",
        "INFO",
    ),
    "no token": (
        {"json": {"query": "{ stores { name } }"}, "headers": {}},
        "UNAUTHENTICATED",
        None,
        "WARNING",
    ),  # fmt: skip
    "forbidden": (
        {
            "json": {"query": '{ latestBooking(key: "x") { key } stores { name } }'},
            "roles": ("analyst",),
        },
        "FORBIDDEN",
        None,
        "WARNING",
    ),
    "bad token": (
        {"json": {"query": "{ stores { name } }"}, "headers": bearer(FORGED)},
        "UNAUTHENTICATED",
        None,
        "WARNING",
    ),  # fmt: skip
}
# Access failures name the client and the subject its token claims (tests.test_auth.token's).
SUBJECTS = {"no token": None, "forbidden": "someone", "bad token": "someone"}


def test_the_node_logs_json_lines_uvicorns_included(node: Node) -> None:
    lines = node.log.lines()
    assert lines, "the node logged its start"
    assert all(list(line)[:5] == FIELDS for line in lines)
    assert {line["source"] for line in lines} == {"node1"}
    started = [line for line in lines if line["logger"] == "uvicorn.error"]
    assert any("Application startup complete" in line["message"] for line in started)


@pytest.mark.parametrize("mistake", list(HTTP_MISTAKES))
def test_a_client_mistake_over_http_logs_one_line(node: Node, mistake: str) -> None:
    request, code, operation, level = HTTP_MISTAKES[mistake]
    options = {"method": "POST", **request}
    options.setdefault("headers", bearer(token(options.pop("roles", ("ops",)))))
    method = options.pop("method")
    answers = []

    def send() -> None:
        answers.append(httpx.request(method, f"{node.url}/graphql", timeout=30, **options))

    lines = node.log.after(send)
    body = answers[0].json()
    assert code in json.dumps(body), body
    who = accessed_by(mistake in SUBJECTS, SUBJECTS.get(mistake))
    assert_one_client_line(lines, code, operation, level, "http", who)
    assert FORGED not in json.dumps(lines)


def test_a_client_mistake_over_websocket_logs_one_line(node: Node) -> None:
    ws_url = node.url.replace("http://", "ws://") + "/graphql"

    def bad_subscription() -> None:
        with connect(ws_url, subprotocols=[PROTOCOL]) as ws:
            ws.send(json.dumps({"type": "connection_init", "payload": ops()}))
            assert json.loads(ws.recv(10))["type"] == "connection_ack"
            payload = {"query": "subscription Live { nope }", "operationName": "Live"}
            ws.send(json.dumps({"id": "1", "type": "subscribe", "payload": payload}))
            assert json.loads(ws.recv(10))["type"] == "error"

    lines = node.log.after(bad_subscription)
    assert_one_client_line(lines, "GRAPHQL_VALIDATION_FAILED", "Live", "INFO", "websocket")

    def subscription_with_an_error() -> None:
        with connect(ws_url, subprotocols=[PROTOCOL]) as ws:
            ws.send(json.dumps({"type": "connection_init", "payload": ops()}))
            assert json.loads(ws.recv(10))["type"] == "connection_ack"
            scan = 'latestBookingRange(first: 5, after: "garbage") { records { key } }'
            query = f"subscription Scan {{ {scan} }}"
            payload = {"query": query, "operationName": "Scan"}
            ws.send(json.dumps({"id": "1", "type": "subscribe", "payload": payload}))
            pushed = json.loads(ws.recv(10))  # data, with the field's error: subscribed
            assert pushed["type"] == "next", pushed
            assert pushed["payload"]["data"] == {"latestBookingRange": None}, pushed

    lines = node.log.after(subscription_with_an_error)
    assert_one_client_line(lines, "BAD_CURSOR", "Scan", "INFO", "websocket")

    def not_the_protocol() -> None:
        with connect(ws_url, subprotocols=[PROTOCOL]) as ws:
            ws.send("not json")
            assert closed_code(ws) == 4400

    assert_one_client_line(node.log.after(not_the_protocol), "4400", None, "INFO", "websocket")

    def no_token() -> None:
        with connect(ws_url, subprotocols=[PROTOCOL]) as ws:
            ws.send(json.dumps({"type": "connection_init"}))
            assert closed_code(ws) == 4403

    lines = node.log.after(no_token)
    assert_one_client_line(lines, "4403", None, "WARNING", "websocket", accessed_by(True, None))

    def bad_token() -> None:
        with connect(ws_url, subprotocols=[PROTOCOL]) as ws:
            init = {"Authorization": f"Bearer {FORGED}"}
            ws.send(json.dumps({"type": "connection_init", "payload": init}))
            assert closed_code(ws) == 4403

    lines = node.log.after(bad_token)
    who = accessed_by(True, "someone")
    assert_one_client_line(lines, "4403", None, "WARNING", "websocket", who)
    assert FORGED not in json.dumps(lines)

    def foreign_page() -> None:
        with pytest.raises(InvalidStatus):
            connect(ws_url, subprotocols=[PROTOCOL], origin=Origin("http://evil.example"))

    lines = node.log.after(foreign_page)
    rejected = [line for line in lines if line["logger"] == "uvicorn.error"]  # its own, INFO
    assert [line["message"] for line in rejected] == ["connection rejected (403 Forbidden)"]
    lines = [line for line in lines if line not in rejected]
    who = accessed_by(True, None)
    assert_one_client_line(lines, "FORBIDDEN", None, "WARNING", "websocket", who)


def test_a_request_that_succeeds_logs_nothing(node: Node) -> None:
    def fine() -> None:
        query = '{ customerTotals(key: "Zoë") { key } }'
        response = httpx.post(f"{node.url}/graphql", json={"query": query}, headers=ops())
        assert response.status_code == 200 and "errors" not in response.json()

    assert node.log.after(fine, expect_one=False) == []


def accessed_by(access: bool, subject: str | None) -> str:
    """What a line names of who, as a pattern: for an access failure, the client (this test,
    on loopback) and the token's subject when it has one."""
    if not access:
        return ""
    return r" client=127\.0\.0\.1:\d+" + ("" if subject is None else f' sub="{subject}"')


def assert_one_client_line(
    lines: list[dict[str, Any]],
    code: str,
    operation: str | None,
    level: str,
    via: str,
    who: str = "",
) -> None:
    assert len(lines) == 1, lines
    (line,) = lines
    assert line["level"] == level and line["logger"] == "resolvers.execution.client_errors", line
    assert "exception" not in line and "Traceback" not in json.dumps(line)
    named = f" operation={operation}" if operation else ""
    start = re.escape(f"client error {code}{named} via={via}") + who + ": "
    assert re.match(start, line["message"]), line
