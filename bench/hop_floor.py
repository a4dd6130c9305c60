"""What one round trip between two processes costs at a fixed rate: the floor under a hop.

A hop (a node asking a peer for a key it does not host) is, below everything the gateway
does, one request written to a kept connection, one wake-up of the peer to read it and
write a reply, and one wake-up of the asker to read that. This measures that floor on
loopback, paced as `bench.run`'s paced rows are (each call its own wake-ups), with both
ends on uvloop:

- `raw`: asyncio Protocols on both ends, a length-prefixed 100-byte request and reply
  (the least any peer link could do);
- `http-bare`: the gateway's own hop client (gateway/wire/hop.py's HopPool) against a bare
  HTTP/1.1 server that writes each 100-byte reply at once (as a node's inline answers are);
- `http`: the gateway's own hop client (gateway/wire/hop.py's HopPool) against uvicorn with
  httptools serving a raw ASGI app that answers 100 bytes (HTTP/1.1 on both ends, no
  gateway code on the server).

CPU of both processes per round trip, the asker's pacing alone (its timer, no call)
measured and taken off. `python -m bench.hop_floor [--rate 2000] [--seconds 6] [--rounds 3]`
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import struct
import subprocess
import sys
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import cast

import psutil
import uvloop
from starlette.types import Receive, Scope, Send

from bench.driver import paced_starts
from gateway.wire.hop import HopPool

BODY = b"x" * 100
HEADER = struct.Struct("!I")
KINDS = ("raw", "http-bare", "http")
REPLY = b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(BODY), BODY)


def _frames(buffer: bytearray, data: bytes) -> list[bytes]:
    """The whole length-prefixed frames in `buffer` once `data` joined it, taken out of it."""
    buffer += data
    frames = []
    while len(buffer) >= HEADER.size:
        (size,) = HEADER.unpack_from(buffer)
        if len(buffer) < HEADER.size + size:
            break
        frames.append(bytes(buffer[HEADER.size : HEADER.size + size]))
        del buffer[: HEADER.size + size]
    return frames


class _Echo(asyncio.Protocol):
    """The raw server: answers each length-prefixed request with BODY, length-prefixed."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self.buffer = bytearray()

    def data_received(self, data: bytes) -> None:
        for _ in _frames(self.buffer, data):
            self.transport.write(HEADER.pack(len(BODY)) + BODY)


class _BareHttp(asyncio.Protocol):
    """A bare HTTP/1.1 server: answers each request (its head, its Content-Length body)
    with a 100-byte reply in one write, as a node's inline answers are written."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.buffer = bytearray()

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while (end := self.buffer.find(b"\r\n\r\n")) >= 0:
            length = 0
            for line in bytes(self.buffer[:end]).split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            if len(self.buffer) < end + 4 + length:
                return
            del self.buffer[: end + 4 + length]
            self.transport.write(REPLY)


class _Caller(asyncio.Protocol):
    """The raw client: one connection, replies in the order asked."""

    transport: asyncio.Transport

    def __init__(self) -> None:
        self.waiting: deque[asyncio.Future[bytes]] = deque()
        self.buffer = bytearray()

    def data_received(self, data: bytes) -> None:
        for reply in _frames(self.buffer, data):
            self.waiting.popleft().set_result(reply)

    def call(self) -> asyncio.Future[bytes]:
        future = asyncio.get_running_loop().create_future()
        self.waiting.append(future)
        self.transport.write(HEADER.pack(len(BODY)) + BODY)
        return future


async def _asgi(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] != "http":
        return
    headers = [(b"content-type", b"application/octet-stream")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": BODY})


def serve(kind: str, port: int) -> None:
    if kind in ("raw", "http-bare"):
        protocol = _Echo if kind == "raw" else _BareHttp

        async def main() -> None:
            server = await asyncio.get_running_loop().create_server(protocol, "127.0.0.1", port)
            await server.serve_forever()

        uvloop.run(main())
    else:
        import uvicorn

        config = uvicorn.Config(
            _asgi, host="127.0.0.1", port=port, loop="uvloop", http="httptools",
            log_level="warning", access_log=False, lifespan="off",
        )  # fmt: skip
        uvicorn.Server(config).run()


async def paced(rate: float, seconds: float, call: Callable[[], Awaitable[object]] | None) -> int:
    """Start `call` at `rate` a second for `seconds` (an open loop, each start its own
    wake-up: bench.driver's pacer); the starts made."""
    in_flight: set[asyncio.Future[object]] = set()
    total = int(rate * seconds)

    def start(i: int, due: float) -> None:
        if call is not None:
            task = asyncio.ensure_future(call())
            in_flight.add(task)
            task.add_done_callback(in_flight.discard)

    await paced_starts(rate, total, start)
    await asyncio.gather(*in_flight)
    return total


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _wait_listening(port: int) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port}")


def _cpu(process: psutil.Process) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


async def measure(kind: str, rate: float, seconds: float) -> tuple[float, float]:
    """(the asker's, the server's) CPU microseconds per round trip of `kind`."""
    port = _free_port()
    server = subprocess.Popen([sys.executable, "-m", "bench.hop_floor", "--serve", kind,
                               "--port", str(port)])  # fmt: skip
    try:
        _wait_listening(port)
        peer = psutil.Process(server.pid)
        if kind == "raw":
            loop = asyncio.get_running_loop()
            transport, caller = await loop.create_connection(_Caller, "127.0.0.1", port)
            caller.transport = transport
            call: Callable[[], Awaitable[object]] = caller.call
        else:
            pool = HopPool(4, 60.0, 5.0)
            url = f"http://127.0.0.1:{port}/hop"

            def call() -> Awaitable[object]:
                return pool.request("POST", url, BODY, {})

        await paced(rate, 1.0, call)  # warm: connections open, code paths run
        mine, theirs = time.process_time(), _cpu(peer)
        calls = await paced(rate, seconds, call)
        mine, theirs = time.process_time() - mine, _cpu(peer) - theirs
        return mine / calls * 1e6, theirs / calls * 1e6
    finally:
        server.terminate()
        server.wait()


async def pacing_alone(rate: float, seconds: float) -> float:
    """The asker's CPU microseconds per tick of its pacing, with no call."""
    mine = time.process_time()
    ticks = await paced(rate, seconds, None)
    return (time.process_time() - mine) / ticks * 1e6


async def run(rate: float, seconds: float, rounds: int) -> None:
    results: dict[str, list[tuple[float, float]]] = {kind: [] for kind in KINDS}
    alone: list[float] = []
    for _ in range(rounds):
        alone.append(await pacing_alone(rate, seconds))
        for kind in KINDS:
            results[kind].append(await measure(kind, rate, seconds))
    base = statistics.median(alone)
    load = ", ".join(f"{x:.2f}" for x in psutil.getloadavg())
    print(f"round trips at {rate:g} a second, {seconds:g} s, median of {rounds}; load {load}")
    print(f"the asker's pacing alone: {base:.1f} us a tick (taken off below)")
    print("| link | asker, us | server, us | both, us |")
    print("| --- | --- | --- | --- |")
    for kind in KINDS:
        asker = statistics.median(a for a, _ in results[kind]) - base
        server = statistics.median(s for _, s in results[kind])
        print(f"| {kind} | {asker:.1f} | {server:.1f} | {asker + server:.1f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=2000.0)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--serve", choices=KINDS, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.port)
        return
    uvloop.run(run(args.rate, args.seconds, args.rounds))


if __name__ == "__main__":
    main()
