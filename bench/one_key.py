"""One-key lookups against the demo's project, for the benches that compare two ways of
serving the same nodes (bench/tls.py, bench/servers.py): the project built once, one
client's p50, and many clients' throughput on kept-alive connections (bench/rawhttp.py)."""

from __future__ import annotations

import asyncio
import re
import ssl
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from bench.queries import body
from bench.rawhttp import Pool, Reply
from contracts import project as projects
from contracts.project import Project
from spark_pipeline import job
from spark_pipeline.spark import LazySpark
from stategate.demo import PROJECT_TEMPLATE, bookings
from stategate.launcher import free_ports

CUSTOMERS = 20_000
CLIENTS = 16
SEQUENTIAL = 2_000
WARM = 200  # requests before a p50 is timed: connections, plans, caches
LOOKUP = "query($k: String!) { customerTotals(key: $k) { record { bookings revenue } } }"
SETTINGS = "\n[settings]\nworkers = 1\ndriver_batch_records = 100000000\n"


@dataclass(frozen=True)
class Ran:
    requests: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.requests / self.seconds


def demo_built(root: Path, events: int, settings: str = "") -> Project:
    """The demo's project on the file log in `root`, on free ports, one worker a node (and
    more `settings` lines), its `events` bookings of CUSTOMERS customers built in the driver
    (no Spark start)."""
    kafka = PROJECT_TEMPLATE.read_text().split("\n[snapshots]", 1)
    text = '[log]\ndir = "log"\n\n[snapshots]' + kafka[1] + SETTINGS + settings
    for address, port in zip(re.findall(r"127\.0\.0\.1:\d+", text), free_ports(3), strict=True):
        text = text.replace(address, f"127.0.0.1:{port}")
    (root / "dashboard").mkdir()
    (root / "stategate.toml").write_text(text)
    project = projects.load(root / "stategate.toml")
    bookings.generate(project, customers=CUSTOMERS, events=events, end_ms=None)
    job.run(project, LazySpark("local[1]"), notify=False)
    return project


def lookups(keys: list[str]) -> list[bytes]:
    """The request bodies of one-key lookups of `keys`."""
    return [body(LOOKUP, {"k": key}) for key in keys]


async def p50_ms(
    url: str,
    bodies: list[bytes],
    tls: ssl.SSLContext | None = None,
    headers: dict[str, str] | None = None,
) -> float:
    """One client's median of SEQUENTIAL requests to `url` (lookups), after WARM of them."""
    async with Pool(tls) as pool:
        times = []
        for number in range(WARM + SEQUENTIAL):
            started = time.perf_counter()
            reply = await pool.post(url, bodies[number % len(bodies)], headers)
            times.append(time.perf_counter() - started)
            assert reply.status_code == 200 and b'"errors"' not in reply.content, reply.text
    return statistics.median(times[WARM:]) * 1000


async def throughput(
    ask: Callable[[Pool, int], Awaitable[Reply]],
    seconds: float,
    tls: ssl.SSLContext | None = None,
) -> Ran:
    """CLIENTS clients asking `ask(pool, n)` for `seconds`, each on its own connections."""
    done = 0
    deadline = time.monotonic() + seconds

    async def client(number: int) -> None:
        nonlocal done
        async with Pool(tls) as pool:
            while time.monotonic() < deadline:
                reply = await ask(pool, number * 7919 + done)
                assert reply.status_code == 200, reply.text
                done += 1

    started = time.monotonic()
    await asyncio.gather(*(client(n) for n in range(CLIENTS)))
    return Ran(done, time.monotonic() - started)


async def node1_lookups(project: Project, seconds: float) -> tuple[float, float]:
    """One client's p50 and CLIENTS clients' requests per second of one-key lookups to node1,
    keys over every partition (a third through the hop), on `project`'s TLS when it has one."""
    url = f"{project.cluster.nodes[0].url}/graphql"
    bodies = lookups([f"C{i:06d}" for i in range(0, CUSTOMERS, 97)])
    tls = project.tls.client() if project.tls else None
    p50 = await p50_ms(url, bodies, tls)
    ran = await throughput(lambda pool, n: pool.post(url, bodies[n % len(bodies)]), seconds, tls)
    return p50, ran.rate
