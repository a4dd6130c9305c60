"""The node's HTTP protocol answers a known read itself, and hands every other request to
the app as uvicorn would: the protocol class `stategate node` runs
(stategate/server_protocol.py), fed bytes as a socket would feed them. The app's `at_once`
here answers a body that says "known" and declines anything else; the ASGI app answers
"app"."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

from starlette.types import Receive, Scope, Send
from uvicorn.config import Config
from uvicorn.protocols.http.flow_control import HIGH_WATER_LIMIT
from uvicorn.server import ServerState

from contracts.settings import Settings
from stategate.app import Answered
from stategate.server_protocol import node_protocol

KNOWN = b'{"known": true}'
LATER = b'{"known": "later"}'  # answered once awaited (a read another node serves)
DECLINED_LATER = b'{"known": "later, or not"}'  # awaited, then declined: the app answers
ANSWER = b'{"data":{"one":1}}'
HEAD = [(b"content-type", b"application/json"), (b"x-node", b"n1")]
AWAITED_S = 0.05


class Answers:
    def __init__(self) -> None:
        self.asked: list[bytes] = []
        self.cancelled = 0

    def at_once(self, scope: Scope, body: bytes) -> Answered | Awaitable[Answered | None] | None:
        self.asked.append(body)
        if body in (LATER, DECLINED_LATER):
            return self.later(body == LATER)
        return Answered(HEAD, ANSWER) if body == KNOWN else None

    async def later(self, answers: bool) -> Answered | None:
        try:
            await asyncio.sleep(AWAITED_S)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        return Answered(HEAD, ANSWER) if answers else None


class Transport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.written = bytearray()
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written += data

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8000), "peername": ("127.0.0.1", 5000)}.get(name)

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


RAN: list[str] = []  # the paths the app was asked for


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    RAN.append(scope["path"])
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    reply = b"app:" + body
    headers = [(b"content-length", b"%d" % len(reply))]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": reply})


def connected(answers: Answers, keep_alive_s: int = 5) -> tuple[Any, Transport, ServerState]:
    """The node's protocol on a new connection (in a running loop): it, its transport and
    the server's state."""
    config = Config(app, log_config=None, lifespan="off", timeout_keep_alive=keep_alive_s)
    config.load()
    state = ServerState()
    state.default_headers = [(b"date", b"today"), (b"server", b"uvicorn")]
    protocol = node_protocol(Settings(), answers)(config=config, server_state=state, app_state={})  # type: ignore[call-arg]
    transport = Transport()
    protocol.connection_made(transport)
    return protocol, transport, state


def exchange(*chunks: bytes) -> tuple[bytes, list[bytes], int]:
    """What the node writes back for `chunks` received, what `at_once` was asked, and how
    many requests the app answered."""
    answers = Answers()
    RAN.clear()

    async def run() -> bytes:
        protocol, transport, state = connected(answers)
        for chunk in chunks:  # each once the answers under way were written
            protocol.data_received(chunk)
            for _ in range(5):
                await asyncio.sleep(0)
            while state.tasks:
                await asyncio.gather(*state.tasks)
        assert state.total_requests == len(RAN) + answers.asked.count(KNOWN) + answers.asked.count(
            LATER
        )
        protocol.connection_lost(None)
        return bytes(transport.written)

    written = asyncio.run(run())
    return written, answers.asked, len(RAN)


def post(body: bytes, *headers: bytes, path: bytes = b"/graphql") -> bytes:
    head = [b"POST " + path + b" HTTP/1.1", b"host: node", b"content-type: application/json"]
    head.extend(headers)
    if not any(h.lower().startswith((b"content-length", b"transfer-encoding")) for h in headers):
        head.append(b"content-length: %d" % len(body))
    return b"\r\n".join(head) + b"\r\n\r\n" + body


def test_a_known_read_is_written_by_the_protocol_with_no_task() -> None:
    written, asked, apps = exchange(post(KNOWN))
    assert written == (
        b"HTTP/1.1 200 OK\r\ndate: today\r\nserver: uvicorn\r\n"
        b"content-type: application/json\r\nx-node: n1\r\n\r\n" + ANSWER
    )
    assert asked == [KNOWN] and apps == 0


def test_a_body_in_pieces_is_answered_once_whole() -> None:
    request = post(KNOWN)
    written, asked, apps = exchange(request[:-5], request[-5:])
    assert written.endswith(ANSWER) and asked == [KNOWN] and apps == 0


def test_what_at_once_declines_goes_to_the_app_with_its_body() -> None:
    written, asked, apps = exchange(post(b'{"query": "{ x }"}'))
    assert asked == [b'{"query": "{ x }"}']
    assert written.endswith(b'app:{"query": "{ x }"}') and apps == 1


def test_answers_keep_the_order_of_requests_on_one_connection() -> None:
    """Two known reads and one for the app between them, in one packet: the second known
    read waits behind the app's answer, as uvicorn queues a pipelined request."""
    other = post(b"{}")
    written, asked, apps = exchange(post(KNOWN) + other + post(KNOWN))
    first, second = written.index(ANSWER), written.index(b"app:{}")
    assert first < second < written.index(b"app:" + KNOWN), written
    assert asked == [KNOWN, b"{}"] and apps == 2  # the pipelined third: the app's


def test_an_answer_to_await_is_written_when_it_comes_in_its_turn() -> None:
    """A read another node serves: its answer awaited by the protocol, then written; a
    request pipelined behind it waits for it."""
    written, asked, apps = exchange(post(LATER) + post(KNOWN))
    assert asked == [LATER] and apps == 1  # the pipelined second: the app's
    assert written.index(ANSWER) < written.index(b"app:" + KNOWN)
    written, asked, apps = exchange(post(LATER), post(KNOWN))  # the second, once it was written
    assert written.count(ANSWER) == 2 and asked == [LATER, KNOWN] and apps == 0


def test_an_awaited_answer_declined_goes_to_the_app() -> None:
    written, asked, apps = exchange(post(DECLINED_LATER))
    assert asked == [DECLINED_LATER] and apps == 1
    assert written.endswith(b"app:" + DECLINED_LATER)


def test_a_client_that_leaves_cancels_the_awaited_answer() -> None:
    answers = Answers()

    async def run() -> bytes:
        protocol, transport, state = connected(answers)
        protocol.data_received(post(LATER))
        await asyncio.sleep(AWAITED_S / 5)
        protocol.connection_lost(None)
        await asyncio.sleep(AWAITED_S * 2)
        assert not state.tasks
        return bytes(transport.written)

    assert asyncio.run(run()) == b"" and answers.cancelled == 1


def test_requests_the_protocol_does_not_hold_go_to_the_app() -> None:
    cases = [
        post(KNOWN, b"connection: close"),  # not kept alive
        post(KNOWN, b"expect: 100-continue"),  # the client waits for the app to read
        post(KNOWN, path=b"/health"),
        post(b"7\r\n" + KNOWN[:7] + b"\r\n8\r\n" + KNOWN[7:] + b"\r\n0\r\n\r\n",
             b"transfer-encoding: chunked"),
        post(KNOWN + b" " * HIGH_WATER_LIMIT),  # past uvicorn's read buffer
    ]  # fmt: skip
    for request in cases:
        written, asked, apps = exchange(request)
        assert asked == [] and apps == 1, request[:80]
        assert b"app:" in written, written[:200]


def test_a_client_that_leaves_before_its_body_leaves_nothing_held() -> None:
    request = post(KNOWN)
    answers = Answers()

    async def run() -> bytes:
        protocol, transport, _ = connected(answers)
        protocol.data_received(request[:-3])
        protocol.connection_lost(None)
        await asyncio.sleep(0)
        return bytes(transport.written)

    assert asyncio.run(run()) == b"" and answers.asked == []


def test_an_idle_connection_is_closed_keep_alive_after_its_last_answer() -> None:
    """One keep-alive timer a connection (stategate/deadlines.py): an answer while it runs
    moves the deadline on, to keep-alive after the last answer."""
    answers = Answers()

    async def run() -> list[bool]:
        protocol, transport, _ = connected(answers, keep_alive_s=1)
        closed = []
        for asks in (True, True, False):  # answered at 0 and 0.6 s; seen at 0.6, 1.2, 1.8 s
            if asks:
                protocol.data_received(post(KNOWN))
            await asyncio.sleep(0.6)
            closed.append(transport.closed)
        protocol.connection_lost(None)
        return closed

    assert asyncio.run(run()) == [False, False, True]
    assert answers.asked == [KNOWN] * 2
