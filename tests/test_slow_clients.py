"""Slow clients (slowloris) hold a connection for a bounded time: a request whose headers or
body trickle in past header_timeout_s or body_timeout_s gets 408 REQUEST_TIMEOUT, its
connection is closed and one line logged; a connection that sends nothing is closed without
a word; a request that arrives in time is served (a real node)."""

from __future__ import annotations

import json
import re
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from contracts import project as projects
from contracts.cluster_secret import SECRET_HEADER
from stategate.launcher import Processes, free_ports
from tests.projects import write_project

TIMEOUT_S = 1.0
SLACK_S = 2.0  # a loaded machine's delay past the deadline, at most
TRICKLE_S = 0.25  # between two bytes a slow client sends
BODY = json.dumps({"query": "{ stores { name } }"}).encode()


@dataclass(frozen=True)
class Servers:
    node: tuple[str, int]
    logs: Path


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    root = tmp_path_factory.mktemp("slow")
    ports = free_ports(3)
    settings = f"header_timeout_s = {TIMEOUT_S}\nbody_timeout_s = {TIMEOUT_S}"
    project = projects.load(write_project(root, ports, settings=settings))
    processes = Processes(root)
    try:
        processes.start_nodes(project, ["node1"])
        yield Servers(("127.0.0.1", ports[0]), root)
    finally:
        processes.stop_all()


def connected(address: tuple[str, int]) -> socket.socket:
    sock = socket.create_connection(address, timeout=TIMEOUT_S + SLACK_S + 5)
    return sock


def trickle(sock: socket.socket, data: bytes, until: float) -> None:
    """Send `data` a byte at a time, until the server closes or `until` (monotonic) passes."""
    for byte in data:
        if time.monotonic() > until:
            return
        try:
            sock.sendall(bytes([byte]))
        except OSError:
            return
        time.sleep(TRICKLE_S)


def answer(sock: socket.socket) -> bytes:
    """All the server sends until it closes the connection."""
    received = b""
    while chunk := sock.recv(65536):
        received += chunk
    return received


def one_response(sock: socket.socket) -> bytes:
    """One whole response (head and a body of its content-length) on a kept connection."""
    received = b""
    while b"\r\n\r\n" not in received:
        received += sock.recv(65536)
    head, _, body = received.partition(b"\r\n\r\n")
    length = int(re.search(rb"content-length: (\d+)", head.lower()).group(1))  # type: ignore[union-attr]
    while len(body) < length:
        body += sock.recv(65536)
    return head + b"\r\n\r\n" + body


def request_head(path: str, length: int, extra: str = "") -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nhost: node\r\ncontent-type: application/json\r\n"
        f"content-length: {length}\r\n{extra}\r\n"
    ).encode()


def assert_408(received: bytes, started: float) -> dict[str, object]:
    elapsed = time.monotonic() - started
    assert TIMEOUT_S - 0.1 <= elapsed <= TIMEOUT_S + SLACK_S, elapsed
    head, _, body = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408 "), received
    assert b"connection: close" in head.lower(), head
    parsed: dict[str, object] = json.loads(body)
    return parsed


def test_headers_that_trickle_in_get_408_and_the_connection_closed(servers: Servers) -> None:
    with connected(servers.node) as sock:
        started = time.monotonic()
        trickle(sock, request_head("/graphql", len(BODY)), started + TIMEOUT_S + SLACK_S)
        document = assert_408(answer(sock), started)
        assert document["error"] == {
            "code": "REQUEST_TIMEOUT",
            "message": "the request's headers did not arrive within header_timeout_s "
            f"({TIMEOUT_S:g} s): the connection is closed",
        }


def test_a_body_that_trickles_in_gets_408_in_the_endpoints_shape(servers: Servers) -> None:
    secret = f"{SECRET_HEADER}: test-secret\r\n"
    for path, extra in (("/graphql", ""), ("/internal/query", secret)):
        with connected(servers.node) as sock:
            sock.sendall(request_head(path, len(BODY), extra))
            started = time.monotonic()
            trickle(sock, BODY, started + TIMEOUT_S + SLACK_S)
            document = assert_408(answer(sock), started)
            code = {"code": "REQUEST_TIMEOUT"}
            if path == "/graphql":
                (error,) = document["errors"]  # type: ignore[misc]
                assert error["extensions"] == code, error
            else:
                assert document["error"]["code"] == code["code"], document  # type: ignore[index]


def test_the_next_request_on_a_kept_connection_has_its_own_deadline(servers: Servers) -> None:
    with connected(servers.node) as sock:
        sock.sendall(request_head("/graphql", len(BODY)) + BODY)
        first = one_response(sock)
        assert first.startswith(b"HTTP/1.1 200 "), first
        time.sleep(TIMEOUT_S + 0.5)  # idle between requests: keep_alive_s counts, not this
        started = time.monotonic()
        trickle(sock, request_head("/graphql", len(BODY)), started + TIMEOUT_S + SLACK_S)
        assert_408(answer(sock), started)


def test_a_connection_that_sends_nothing_is_closed_without_a_word(servers: Servers) -> None:
    with connected(servers.node) as sock:
        started = time.monotonic()
        assert answer(sock) == b""
        assert time.monotonic() - started <= TIMEOUT_S + SLACK_S


def test_a_slow_request_within_the_deadlines_is_served(servers: Servers) -> None:
    with connected(servers.node) as sock:
        head = request_head("/graphql", len(BODY))
        sock.sendall(head[:10])
        time.sleep(TIMEOUT_S / 3)
        sock.sendall(head[10:] + BODY[:5])
        time.sleep(TIMEOUT_S / 3)
        sock.sendall(BODY[5:])
        served = one_response(sock)
    assert served.startswith(b"HTTP/1.1 200 "), served
    assert b'"stores"' in served
    url = f"http://{servers.node[0]}:{servers.node[1]}"
    assert httpx.get(f"{url}/health").status_code == 200


def test_each_timeout_logs_one_line_naming_the_client(servers: Servers) -> None:
    log = (servers.logs / "node1.log").read_text()
    lines = re.findall(r".*client error REQUEST_TIMEOUT.*", log)
    assert lines and all(
        re.search(r"WARNING node1 .* via=http client=127\.0\.0\.1:\d+: the request's", line)
        for line in lines
    ), lines
    assert set(re.findall(r"client error (\w+)", log)) == {"REQUEST_TIMEOUT"}, log  # no 400
    assert "Traceback" not in log and " ERROR " not in log, log
