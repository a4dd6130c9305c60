"""A one-key lookup's cost in the node's own Python, without an HTTP server or a client in
the way: node1's ASGI app (the demo's project) called directly, on uvloop, with the
requests a client or a peer sends (issue 52).

    python -m bench.in_process --events 100000 --requests 20000 [--profile CASE]

Seven figures, each the median time of sequential calls after a warm-up (this machine is
noisy): a one-key GraphQL lookup of a key node1 serves, through the ASGI app, as the node's
HTTP protocol asks first (NodeApp.at_once: stategate/inline.py), and fed to that protocol as
a connection's bytes (uvicorn's parsing included, no socket); a peer's /internal/query of
one such key, through the app and as the protocol asks; a 1000-alias document (cached) and
1000 keys as one list field. The other two nodes are not started: every key asked is
node1's own. --profile lookup|inline|protocol|internal|peer|list|aliases prints cProfile's
costliest functions of one.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import uvloop
from starlette.types import ASGIApp, Message, Scope
from uvicorn.config import Config
from uvicorn.server import ServerState

from bench.one_key import CUSTOMERS, demo_built, lookups
from bench.queries import KEYS_LIST, aliased, body
from contracts.cluster_secret import SECRET_HEADER
from contracts.partitioner import partition_for
from contracts.project import Project
from gateway.model.queries import Get, SubQuery
from gateway.wire.protocol import encode_request
from stategate.app import Answered, NodeApp, create_app
from stategate.server_protocol import node_protocol

Call = Callable[[bytes], Awaitable[bytes]]


def posted(path: str, headers: list[tuple[bytes, bytes]], request: bytes) -> Scope:
    """The scope uvicorn makes of a POST of `request`."""
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
            "method": "POST", "scheme": "http", "path": path, "raw_path": path.encode(),
            "query_string": b"", "root_path": "", "client": ("127.0.0.1", 50000),
            "server": ("127.0.0.1", 8000), "state": {},
            "headers": [*headers, (b"content-length", b"%d" % len(request))]}  # fmt: skip


def caller(app: ASGIApp, path: str, headers: list[tuple[bytes, bytes]]) -> Call:
    """POST a body to the app, as uvicorn would hand it over; the response's body."""

    async def call(request: bytes) -> bytes:
        scope = posted(path, headers, request)
        sent, answer = False, []

        async def receive() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": request, "more_body": False}
            await asyncio.Event().wait()  # the client stays
            return {"type": "http.disconnect"}

        async def send(message: Message) -> None:
            if message["type"] == "http.response.body":
                answer.append(message.get("body", b""))

        await app(scope, receive, send)
        return b"".join(answer)

    return call


def inline(app: NodeApp, path: str, headers: list[tuple[bytes, bytes]]) -> Call:
    """POST a body to the app as the node's HTTP protocol asks first (stategate/inline.py)."""

    async def call(request: bytes) -> bytes:
        answered = app.at_once(posted(path, headers, request), request)
        assert isinstance(answered, Answered), "a key node1 reads at once"
        return answered.body

    return call


class Written(asyncio.Transport):
    """A connection's transport that keeps nothing: what the protocol writes is dropped."""

    def write(self, data: bytes | bytearray | memoryview) -> None:
        pass

    def is_closing(self) -> bool:
        return False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8000), "peername": ("127.0.0.1", 50000)}.get(name)


def fed(app: NodeApp) -> Call:
    """POST a body to /graphql as bytes a kept-alive connection receives, to the protocol
    class `stategate node` runs (stategate/server_protocol.py): uvicorn's parsing and the
    protocol's own work included, the socket's not. Answered at once: nothing to await."""
    config = Config(app.asgi, log_config=None, lifespan="off")
    config.load()
    state = ServerState()
    protocol = node_protocol(app.node.project.settings, app)(
        config=config, server_state=state, app_state={}
    )
    protocol.connection_made(Written())
    head = b"POST /graphql HTTP/1.1\r\nhost: 127.0.0.1:8101\r\ncontent-type: application/json\r\n"

    async def call(request: bytes) -> bytes:
        answered = state.total_requests
        protocol.data_received(head + b"content-length: %d\r\n\r\n" % len(request) + request)
        assert state.total_requests == answered + 1 and not state.tasks, "answered at once"
        return b""

    return call


async def lifespan(app: ASGIApp) -> None:
    started = asyncio.Event()
    messages: asyncio.Queue[Message] = asyncio.Queue()
    await messages.put({"type": "lifespan.startup"})

    async def send(message: Message) -> None:
        assert message["type"] != "lifespan.startup.failed", message
        started.set()

    scope = {"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}
    asyncio.ensure_future(app(scope, messages.get, send))
    await started.wait()


async def median_us(call: Call, requests: list[bytes], count: int) -> float:
    """The median call's time (this machine is noisy: a mean takes in its stolen bursts)."""
    for request in requests[: min(len(requests), 200)]:
        await call(request)
    times = []
    for number in range(count):
        started = time.perf_counter()
        await call(requests[number % len(requests)])
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e6


def local_keys(project: Project) -> list[str]:
    mine = {p for p, nodes in project.cluster.replica_map.items() if nodes[0] == "node1"}
    keys = (f"C{i:06d}" for i in range(CUSTOMERS))
    return [k for k in keys if partition_for(k, "string", project.cluster.partitions) in mine]


async def measure(project: Project, count: int, profile: str | None) -> None:
    os.chdir(project.path.parent)
    node_app = create_app(project, "node1")
    app = node_app.asgi
    await lifespan(app)
    keys = local_keys(project)[:1000]
    json = [(b"content-type", b"application/json")]
    graphql = caller(app, "/graphql", json)
    secret = [(SECRET_HEADER.encode(), project.cluster.secret.encode())]
    internal = caller(app, "/internal/query", secret)
    bodies = lookups(keys[:500])
    while b'"record":{' not in await graphql(bodies[0]):  # until node1 serves its partitions
        await asyncio.sleep(0.1)
    store = project.stores["customerTotals"]
    subqueries = [
        encode_request([SubQuery(0, partition_for(k, "string", 9), store.name, Get((k,)))])
        for k in keys[:500]
    ]
    aliases = [body(aliased(keys))]
    listed = [body(KEYS_LIST, {"keys": keys})]
    print(f"one-key lookup: {await median_us(graphql, bodies, count):.1f} us", flush=True)
    answered = inline(node_app, "/graphql", json)
    print(f"the same, as the HTTP protocol asks: {await median_us(answered, bodies, count):.1f} us")
    protocol = fed(node_app)
    print(
        f"the same, fed to the protocol as bytes: {await median_us(protocol, bodies, count):.1f} us"
    )
    internal_us = await median_us(internal, subqueries, count)
    print(f"a peer's one-key /internal/query: {internal_us:.1f} us")
    peer = inline(node_app, "/internal/query", secret)
    print(f"the same, as the HTTP protocol asks: {await median_us(peer, subqueries, count):.1f} us")
    print(f"1000 aliases (cached): {await median_us(graphql, aliases, 100) / 1000:.2f} ms")
    print(f"1000 keys as one list: {await median_us(graphql, listed, 200) / 1000:.2f} ms")
    if profile is not None:
        cases = {
            "lookup": (graphql, bodies, count),
            "inline": (answered, bodies, count),
            "protocol": (protocol, bodies, count),
            "internal": (internal, subqueries, count),
            "peer": (peer, subqueries, count),
            "list": (graphql, listed, 200),
            "aliases": (graphql, aliases, 100),
        }
        called, requests, times = cases[profile]
        profiler = cProfile.Profile()
        profiler.enable()
        await median_us(called, requests, times)
        profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(40)
    os._exit(0)  # the node's threads and tasks: nothing to stop cleanly for


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.in_process")
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument(
        "--profile",
        choices=["lookup", "inline", "protocol", "internal", "peer", "list", "aliases"],
        help="cProfile of one case",
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="stategate-bench-") as work:
        project = demo_built(Path(work), args.events)
        uvloop.run(measure(project, args.requests, args.profile))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
