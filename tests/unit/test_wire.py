"""The wire floor without sockets: the peer client's statuses and headers over the mock
transport, the one HTTP/1.1 reply parser, routing's failover against peers played by a
handler, and the listeners told of a peer that is back."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import orjson
import pytest

from contracts.cluster_secret import SECRET_HEADER
from contracts.errors import Failure
from contracts.project import Project, load
from gateway.cluster.health import Membership
from gateway.cluster.log_end import LogEnd
from gateway.cluster.metrics import NodeMetrics
from gateway.cluster.routing import Local, Router
from gateway.model.queries import Answer, Get, SubQuery
from gateway.wire.hop import ClosedByPeer, read_reply
from gateway.wire.mock import Call, MockTransport
from gateway.wire.peer_errors import PeerRefused, PeerUnreachable
from gateway.wire.peers import PeerClient
from gateway.wire.protocol import (
    PROTOCOL,
    PROTOCOL_HEADER,
    ProtocolError,
    check_version,
    decode_request,
    encode_answers,
)
from gateway.wire.transport import Reply
from tests.cores import node_core
from tests.projects import write_project

T = TypeVar("T")


def run(make: Callable[[], Awaitable[T]]) -> T:
    async def go() -> T:
        return await make()

    return asyncio.run(go())


def test_the_client_sends_the_secret_and_the_callers_authorization() -> None:
    transport = MockTransport(lambda call: Reply(200, b"ok"))
    client = PeerClient("s3cret", transport)
    assert run(lambda: client.post("http://n/internal/query", b"[]", "Bearer t")) == b"ok"
    (call,) = transport.calls
    assert call.headers[SECRET_HEADER] == "s3cret"
    assert call.headers["authorization"] == "Bearer t"
    assert (call.method, call.body) == ("POST", b"[]")


def test_statuses_become_our_vocabulary() -> None:
    replies = {"/missing": Reply(404, b""), "/broken": Reply(500, b"no"), "/ok": Reply(200, b"x")}
    client = PeerClient("s", MockTransport(lambda call: replies[call.url]))
    assert run(lambda: client.get("/missing")) is None
    assert run(lambda: client.get("/ok")) == b"x"
    with pytest.raises(PeerRefused) as refused:
        run(lambda: client.post("/broken", b""))
    assert refused.value.status == 500


async def _parse(raw: bytes) -> tuple[int, bytes, bool]:
    reader = asyncio.StreamReader()
    reader.feed_data(raw)
    reader.feed_eof()
    return await read_reply(reader)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nhi", (200, b"hi", True)),
        (b"HTTP/1.1 503 No\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", (503, b"", False)),
        (
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
            b"3;x=y\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
            (200, b"abcde", True),
        ),
    ],
)
def test_the_parser_reads_sized_and_chunked_replies(
    raw: bytes, expected: tuple[int, bytes, bool]
) -> None:
    assert run(lambda: _parse(raw)) == expected


def test_a_connection_closed_before_the_reply_may_be_retried_a_broken_one_not() -> None:
    with pytest.raises(ClosedByPeer):
        run(lambda: _parse(b""))
    for broken in (b"HTTP/1.1 200 OK\r\n\r\n", b"HTTP/1.1 2x0\r\n\r\n", b"HTTP/1.1 200 OK\r\ncon"):
        with pytest.raises(ConnectionError) as raised:
            run(lambda broken=broken: _parse(broken))  # type: ignore[misc]
        assert not isinstance(raised.value, ClosedByPeer)


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Project:
    return load(write_project(Path(tmp_path_factory.mktemp("wire")), [7101, 7102, 7103]))


def _peer(call: Call, down: set[str]) -> Reply:
    """A peer that answers every sub-query with its own name, unless it is down."""
    node = "node" + call.url.split(":")[2][3]  # 127.0.0.1:710N -> nodeN
    if node in down:
        raise PeerUnreachable("connection refused", hung=False)
    queries = decode_request(call.body)
    return Reply(200, encode_answers([Answer(id=q.id, node=node, rows=[]) for q in queries]))


def _route(
    project: Project,
    down: set[str] = frozenset(),  # type: ignore[assignment]
    peer: Callable[[Call], Reply] | None = None,
    bound: dict[str, int] | None = None,
    log_end: LogEnd = lambda topic, partition: None,
    here: Local | None = None,
) -> tuple[dict[int, Answer], MockTransport]:
    """A sub-query of every partition node1 does not host, asked of node1's router; of
    every partition, node1's own answered by `here`, when given."""
    transport = MockTransport(peer or (lambda call: _peer(call, down)))

    async def go() -> dict[int, Answer]:
        peers = PeerClient(project.cluster.secret, transport)
        core = node_core(project, peers)
        membership = Membership(core)

        async def nowhere(subqueries: list[SubQuery]) -> list[Answer]:
            raise AssertionError("node1 hosts none of these partitions")

        router = Router(core, membership, here or nowhere, lambda p: None, NodeMetrics(), log_end)
        asked = range(project.cluster.partitions)
        away = [p for p in asked if here is not None or "node1" not in _ids(project, p)]
        queries = [
            SubQuery(i, p, "latestBooking", Get(("k",)), bound=dict(bound or {}))
            for i, p in enumerate(away)
        ]
        answers, _ = await router.execute(queries)
        return answers

    return run(go), transport


def _ids(project: Project, partition: int) -> list[str]:
    return list(project.cluster.replica_map[partition])


def test_routing_fails_over_to_the_next_replica_when_a_peer_is_down(project: Project) -> None:
    answers, transport = _route(project, down={"node2"})
    assert answers and all(a.failure is None and a.node == "node3" for a in answers.values())
    asked = {c.url.split("/")[2] for c in transport.calls}
    assert asked == {"127.0.0.1:7102", "127.0.0.1:7103"}


def test_a_partition_with_no_live_replica_fails_with_its_reason(project: Project) -> None:
    answers, _ = _route(project, down={"node2", "node3"})
    assert answers and all(a.failure is Failure.NODE_UNAVAILABLE for a in answers.values())


def test_a_replica_without_the_store_sends_the_read_to_one_that_has_it(project: Project) -> None:
    """node2 runs a project file without the store (one being removed, node2 restarted
    first): its partitions' reads go on to node3, which still has it."""

    def peer(call: Call) -> Reply:
        node = "node" + call.url.split(":")[2][3]
        answers = [Answer(id=q.id, node=node, rows=[]) for q in decode_request(call.body)]
        if node == "node2":
            for answer in answers:
                answer.fail(Failure.DOES_NOT_EXIST, "no store 'latestBooking' on node node2")
        return Reply(200, encode_answers(answers))

    answers, transport = _route(project, peer=peer)
    assert answers and all(a.failure is None and a.node == "node3" for a in answers.values())
    assert {c.url.split("/")[2] for c in transport.calls} == {"127.0.0.1:7102", "127.0.0.1:7103"}


def test_the_peers_requests_are_written_before_this_node_reads_its_share(
    project: Project,
) -> None:
    """node1's own share may be read on its loop at once: the peers' requests of the same
    round are written first, so that the peers answer while it reads."""
    happened: list[str] = []

    def peer(call: Call) -> Reply:
        happened.append("peer asked")
        return _peer(call, set())

    async def here(subqueries: list[SubQuery]) -> list[Answer]:
        happened.append("read here")
        return [Answer(id=q.id, node="node1", rows=[]) for q in subqueries]

    answers, _ = _route(project, peer=peer, here=here)
    assert {a.node for a in answers.values()} == {"node1", "node2", "node3"}
    assert happened == ["peer asked", "peer asked", "read here"]


def test_listeners_hear_once_of_a_peer_that_is_back(project: Project) -> None:
    peers = PeerClient("s", MockTransport(lambda call: Reply(404, b"")))  # never called
    membership = Membership(node_core(project, peers))
    back: list[str] = []
    membership.when_back(back.append)
    membership.mark_up("node2")  # never down: nothing to tell
    membership.mark_down("node2", PeerUnreachable("refused", hung=False), time.monotonic())
    membership.mark_up("node2")
    membership.mark_up("node2")
    assert back == ["node2"]


class Catching:
    """Peers at offset 5 of bookings for their first `behind` calls, at 10 after."""

    def __init__(self, behind: int) -> None:
        self.behind, self.calls = behind, 0

    def __call__(self, call: Call) -> Reply:
        node = "node" + call.url.split(":")[2][3]
        self.calls += 1
        offset = 5 if self.calls <= self.behind else 10
        answers = []
        for q in decode_request(call.body):
            answer = Answer(id=q.id, node=node, rows=[], offsets={"bookings": offset})
            if offset < q.bound["bookings"]:
                answer.fail(Failure.NOT_UP_TO_BOUND, f"at {offset}")
            answers.append(answer)
        return Reply(200, encode_answers(answers))


def test_replicas_behind_a_published_bound_are_asked_again_until_one_caught_up(
    project: Project,
) -> None:
    """Every replica is behind the bound at first (a token from a replica that moved on):
    the bound is within what was published, so they are asked again after a pause."""
    peers = Catching(behind=4)
    answers, _ = _route(project, peer=peers, bound={"bookings": 8}, log_end=lambda t, p: 10)
    assert answers and all(a.failure is None for a in answers.values())
    assert all(a.offsets == {"bookings": 10} for a in answers.values())
    assert peers.calls > 4


def test_a_bound_past_what_was_published_fails_at_once(project: Project) -> None:
    peers = Catching(behind=1000)
    answers, transport = _route(project, peer=peers, bound={"bookings": 8}, log_end=lambda t, p: 7)
    assert answers and all(a.failure is Failure.NOT_UP_TO_BOUND for a in answers.values())
    assert peers.calls == 2  # one round per replica, no waiting


def test_waiting_for_a_bound_ends_after_bound_wait_s(project: Project) -> None:
    peers = Catching(behind=1000)
    started = time.monotonic()
    answers, _ = _route(project, peer=peers, bound={"bookings": 8}, log_end=lambda t, p: 10)
    waited = time.monotonic() - started
    assert answers and all(a.failure is Failure.NOT_UP_TO_BOUND for a in answers.values())
    assert project.settings.bound_wait_s <= waited < project.settings.bound_wait_s * 3


def test_every_internal_call_states_its_protocol_and_a_version_not_read_is_refused() -> None:
    transport = MockTransport(lambda call: Reply(200, b"[]"))
    run(lambda: PeerClient("s", transport).query("http://n/internal/query", []))
    assert transport.calls[0].headers[PROTOCOL_HEADER] == str(PROTOCOL)
    check_version(None)  # a release before the header: it spoke version 1
    check_version(str(PROTOCOL))
    for stated, said in (("2", "version 2; this node reads [1]"), ("x", "'x' is not a version")):
        with pytest.raises(ProtocolError, match=re.escape(said)):
            check_version(stated)


def test_a_peer_that_reads_another_protocol_is_down_for_routing(project: Project) -> None:
    """A node of a release that cannot read this one's calls is never sent one."""
    live = {"subscriptions": 0, "cohorts": 0, "evaluations": 0}
    status = {"node": "node2", "partitions": {}, "sync_errors": {}, "internal_requests": 0,
              "changes": 1, "live": live, "formats": {"protocol": [PROTOCOL + 1]}}  # fmt: skip
    transport = MockTransport(lambda call: Reply(200, orjson.dumps(status)))
    membership = Membership(node_core(project, PeerClient("s", transport)))
    run(membership.poll_once)
    assert not membership.alive("node2")
    status["formats"] = {"protocol": [PROTOCOL]}
    run(membership.poll_once)
    assert membership.alive("node2")
