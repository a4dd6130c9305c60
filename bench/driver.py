"""The load driver: N concurrent asyncio tasks in one process, bounded by time and count, and
the statistics of what they measured.

An operation is an async callable of the request number that returns None on success or an
error text; the driver times each call. Throughput is completed operations per wall second;
the driver also records its own CPU use and, when given server processes, theirs (CPU
milliseconds per operation), so a reader can tell a slow server from a busy client.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import math
import os
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import orjson
import psutil

from bench.rawhttp import Pool

Operation = Callable[[int], Awaitable[str | None]]
SyncOperation = Callable[[int], str | None]


@dataclass
class Stats:
    name: str
    concurrency: int
    count: int
    errors: int
    seconds: float
    p50_ms: float
    p99_ms: float
    mean_ms: float
    qps: float
    client_cpu: float  # CPU seconds of this process per wall second
    server_cpu_ms: float | None  # CPU ms of the given server processes per operation
    first_error: str | None = None
    note: str = ""
    load1: float = 0.0  # the machine's 1-minute load average when the measurement ended
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of sorted values (q in 0..100)."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def summarize(
    name: str,
    concurrency: int,
    latencies_s: list[float],
    errors: int,
    wall_s: float,
    cpu_s: float,
    server_cpu_s: float | None,
    first_error: str | None,
    note: str = "",
) -> Stats:
    ordered = sorted(latencies_s)
    count = len(ordered)
    return Stats(
        name=name,
        concurrency=concurrency,
        count=count,
        errors=errors,
        seconds=round(wall_s, 3),
        p50_ms=percentile(ordered, 50) * 1000,
        p99_ms=percentile(ordered, 99) * 1000,
        mean_ms=(sum(ordered) / count * 1000) if count else math.nan,
        qps=count / wall_s if wall_s > 0 else math.nan,
        client_cpu=cpu_s / wall_s if wall_s > 0 else math.nan,
        server_cpu_ms=None if server_cpu_s is None or not count else server_cpu_s / count * 1000,
        first_error=first_error,
        note=note,
        load1=round(os.getloadavg()[0], 2),
    )


Servers = Sequence[psutil.Process] | Callable[[], Sequence[psutil.Process]]


def _cpu_by_pid(servers: Servers) -> dict[int, float]:
    """CPU seconds of each server process alive now (a callable is asked for the current
    processes: a database starts and ends backends while it is measured)."""
    found = {}
    for process in servers() if callable(servers) else servers:
        try:
            times = process.cpu_times()
        except psutil.NoSuchProcess:
            continue
        found[process.pid] = times.user + times.system
    return found


def _cpu_used(before: dict[int, float], servers: Servers) -> float:
    """CPU seconds since `before` of the processes alive now (a process that ended in
    between is not counted; one that started is counted whole)."""
    after = _cpu_by_pid(servers)
    return sum(seconds - before.get(pid, 0.0) for pid, seconds in after.items())


def _freeze_prepared() -> None:
    """What the run prepared (keys, bodies, expected rows: millions of objects), frozen out
    of this process's collections before it measures: a full collection walking them took
    ~50 ms and landed in the latencies of the calls under way (a 1000-key list at 4 clients:
    p99 76.6 ms, 29.9 ms frozen)."""
    gc.freeze()


async def run_async(
    name: str,
    operation: Operation,
    concurrency: int,
    duration_s: float,
    max_count: int,
    warmup: int = 0,
    servers: Servers = (),
    note: str = "",
    min_count: int = 1,
    until: Callable[[], bool] | None = None,
) -> Stats:
    """Call `operation` from `concurrency` tasks until `duration_s` passed or `until()` holds
    (and at least `min_count` calls were started) or `max_count` calls were made, after
    `warmup` untimed calls."""
    _freeze_prepared()
    for i in range(warmup):
        await operation(-1 - i)
    counter = itertools.count()
    latencies: list[float] = []
    errors = 0
    first_error: str | None = None
    started = time.perf_counter()
    deadline = started + duration_s

    async def worker() -> None:
        nonlocal errors, first_error
        while True:
            i = next(counter)
            over = time.perf_counter() >= deadline or (until is not None and until())
            if i >= max_count or (i >= min_count and over):
                return
            t0 = time.perf_counter()
            error = await operation(i)
            latencies.append(time.perf_counter() - t0)
            if error is not None:
                errors += 1
                first_error = first_error or error

    cpu0, server0 = time.process_time(), _cpu_by_pid(servers)
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    wall = time.perf_counter() - started
    cpu = time.process_time() - cpu0
    server = _cpu_used(server0, servers) if servers else None
    return summarize(name, concurrency, latencies, errors, wall, cpu, server, first_error, note)


async def paced_starts(rate: float, total: int, start: Callable[[int, float], None]) -> None:
    """Call `start(i, due)` on this loop `total` times at `rate` a second, each when due and
    each its own wake-up of the loop: a thread sleeps until each is due (the loop's own
    timers have a millisecond's resolution: paced by them, calls leave in bursts a
    millisecond apart, late by up to a millisecond, or the loop spins)."""
    loop = asyncio.get_running_loop()
    done = loop.create_future()

    def pace() -> None:
        first = time.perf_counter()
        for i in range(total):
            due = first + i / rate
            time.sleep(max(0.0, due - time.perf_counter()))
            loop.call_soon_threadsafe(start, i, due)
        loop.call_soon_threadsafe(done.set_result, None)

    threading.Thread(target=pace, name="pacer", daemon=True).start()
    await done


async def run_paced(
    name: str,
    operation: Operation,
    rate: float,
    duration_s: float,
    warmup: int = 0,
    servers: Servers = (),
) -> Stats:
    """Start calls at `rate` a second for `duration_s`, whether earlier ones answered or not
    (an open loop, as independent clients send), each timed from the moment it was due: time
    it spent waiting to be sent counts (no coordinated omission)."""
    _freeze_prepared()
    for i in range(warmup):
        await operation(-1 - i)
    latencies: list[float] = []
    errors = 0
    first_error: str | None = None
    in_flight: set[asyncio.Task[None]] = set()

    async def call(i: int, due: float) -> None:
        nonlocal errors, first_error
        error = await operation(i)
        latencies.append(time.perf_counter() - due)
        if error is not None:
            errors += 1
            first_error = first_error or error

    def start(i: int, due: float) -> None:
        task = asyncio.create_task(call(i, due))
        in_flight.add(task)
        task.add_done_callback(in_flight.discard)

    cpu0, server0 = time.process_time(), _cpu_by_pid(servers)
    started = time.perf_counter()
    await paced_starts(rate, int(rate * duration_s), start)
    await asyncio.gather(*in_flight)
    wall = time.perf_counter() - started
    cpu = time.process_time() - cpu0
    server = _cpu_used(server0, servers) if servers else None
    return summarize(name, 0, latencies, errors, wall, cpu, server, first_error, f"{rate:.0f}/s")


def run_sync(
    name: str, operation: SyncOperation, duration_s: float, max_count: int, warmup: int = 3
) -> Stats:
    """The same for a blocking operation, one call at a time (the storage floor)."""
    _freeze_prepared()
    for i in range(warmup):
        operation(-1 - i)
    latencies: list[float] = []
    errors = 0
    first_error: str | None = None
    cpu0 = time.process_time()
    started = time.perf_counter()
    deadline = started + duration_s
    for i in range(max_count):
        if time.perf_counter() >= deadline:
            break
        t0 = time.perf_counter()
        error = operation(i)
        latencies.append(time.perf_counter() - t0)
        if error is not None:
            errors += 1
            first_error = first_error or error
    wall = time.perf_counter() - started
    cpu = time.process_time() - cpu0
    return summarize(name, 1, latencies, errors, wall, cpu, None, first_error)


def http_client() -> Pool:
    """One keep-alive client for the whole run (a raw one: httpx would be the bottleneck)."""
    return Pool()


_JSON = {"content-type": "application/json", "accept": "application/json"}


def graphql_operation(
    client: Pool,
    urls: Sequence[str],
    bodies: Sequence[bytes],
    check: Callable[[Any], str | None] | None = None,
    route: Callable[[bytes], str] | None = None,
) -> Operation:
    """POST bodies[i % len] to urls[i % len] (round-robin over the nodes), or to the URL
    `route` chooses for the body; an answer with `errors`, without `data`, or failing
    `check(data)` counts as an error."""

    async def operation(i: int) -> str | None:
        content = bodies[i % len(bodies)]
        url = route(content) if route else urls[i % len(urls)]
        response = await client.post(url, content=content, headers=_JSON)
        if response.status_code != 200:
            return f"HTTP {response.status_code}: {response.text[:300]}"
        answer = orjson.loads(response.content)
        if answer.get("errors"):
            return orjson.dumps(answer["errors"][:2]).decode()[:300]
        data = answer.get("data")
        if data is None:
            return "no data"
        return check(data) if check else None

    return operation


def get_operation(client: Pool, urls: Sequence[str]) -> Operation:
    """GET urls[i % len]; 200 and 404 (no such key) both count as answers."""

    async def operation(i: int) -> str | None:
        response = await client.get(urls[i % len(urls)])
        if response.status_code not in (200, 404):
            return f"HTTP {response.status_code}: {response.text[:300]}"
        orjson.loads(response.content)
        return None

    return operation


def batch_operation(
    client: Pool, batches: Sequence[Sequence[str]], inner_concurrency: int
) -> Operation:
    """One operation = every URL of batches[i % len] fetched by `inner_concurrency` tasks (the
    naive client asking 1000 keys with 1000 requests)."""

    async def operation(i: int) -> str | None:
        urls = batches[i % len(batches)]
        position = itertools.count()
        errors: list[str] = []

        async def fetch() -> None:
            while (j := next(position)) < len(urls):
                response = await client.get(urls[j])
                if response.status_code not in (200, 404):
                    errors.append(f"HTTP {response.status_code}: {response.text[:300]}")
                else:
                    orjson.loads(response.content)

        await asyncio.gather(*(fetch() for _ in range(inner_concurrency)))
        return errors[0] if errors else None

    return operation
