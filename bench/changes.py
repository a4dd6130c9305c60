"""Changes to a running deployment (issue 53), on a built workload: three nodes serve it
while a client asks one key at a time of the nodes in rotation. First a settings reload: a
limit changed in the project file and each node sent SIGHUP in turn; then another index for
a store, taken the same way. Then a store added: it is declared in the file, `stategate
apply` asks every node to read the file again (each takes it with no restart) and follows
the change, and the pipeline builds it (one run, on local Spark or in its driver: the new
store from the log, the others folded). Then that store removed again with `apply --force`
while a dashboard subscribes to it and to another store: the first subscription must end
with SCHEMA_CHANGED, the second stay open. Last, a store changed in place: hourlyRevenue's
windows resized from one hour to two (`apply` and a pipeline run build the new declaration
beside the old, every node switches once all have it built), while a dashboard subscribes
to one key's windows, which must be pushed the new ones; the pipeline's next run leaves
the old table out.

    python -m bench.changes --workload main --reuse

With `--upgrade TREE`, every node is rolled instead to the release checked out at TREE (a
git worktree of another commit), then rolled back:

    git worktree add /tmp/previous <commit>
    python -m bench.changes --workload main --reuse --upgrade /tmp/previous

Printed, per phase (idle, then the change): how long it took, the client's answers and its
failed or partial ones, its p50 / p99, and the machine's load; for a store, also the
rebuild's time and the snapshot store's extra bytes after it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections import defaultdict
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
from websockets.sync.client import connect

from bench.elastic import built
from bench.freshness import copy_workload
from bench.queries import ONE_KEY, body
from bench.workload import NAMES
from contracts.project import Project
from stategate.launcher import Processes, node_command, wait_serving

NEW_STORE = """
[[stores]]
name = "seatsByCustomer"
kind = "aggregate"
topic = "bookings"
aggregates = { seats = "sum(seats)", bookings = "count" }
"""
SUBSCRIPTIONS = {
    "gone": 'subscription { seatsByCustomer(key: "C000001") { record { seats } } }',
    "kept": 'subscription { customerTotals(key: "C000001") { record { bookings } } }',
}
HOURLY = 'name = "hourlyRevenue"\nkind = "window"\ntopic = "bookings"\nsize = "1h"\n'
WINDOWS = (
    'subscription { hourlyRevenue(key: "C000001", from: "2026-01-01T00:00:00Z", '
    'to: "2026-01-07T23:00:00Z") { windows { windowStart windowEnd bookings } } }'  # the week
)
WS_PROTOCOL = "graphql-transport-ws"
IDLE_S = 20.0
RELOAD_S = 10.0  # the settings reload's phase: the three SIGHUPs, spread over it
RELOADED = "SIGHUP: the project file read again"
STATEGATE = [sys.executable, "-m", "stategate.cli"]


class Client(threading.Thread):
    """One key at a time, of a node of the rotation; latencies and failures by phase."""

    def __init__(self, project: Project, customers: int) -> None:
        super().__init__(daemon=True)
        self.urls = {n.id: n.url + "/graphql" for n in project.cluster.nodes}
        self.rotation = list(self.urls)
        self.lock = threading.Lock()
        self.customers = customers
        self.phase = "idle"
        self.took: dict[str, list[float]] = defaultdict(list)
        self.failed: dict[str, list[str]] = defaultdict(list)
        self.stopping = threading.Event()

    def run(self) -> None:
        rng = random.Random(5)
        headers = {"content-type": "application/json"}
        with httpx.Client(timeout=10) as client:
            while not self.stopping.is_set():
                with self.lock:
                    node = rng.choice(self.rotation)
                key = f"C{rng.randrange(self.customers):06d}"
                phase, began = self.phase, time.perf_counter()
                try:
                    reply = client.post(
                        self.urls[node], content=body(ONE_KEY, {"key": key}), headers=headers
                    )
                    answer = reply.json()
                except (httpx.HTTPError, ValueError) as exc:
                    self.failed[phase].append(f"{node}: {exc!r}")
                    continue
                took = time.perf_counter() - began
                if answer.get("errors") or answer["data"]["customerTotals"]["meta"]["partial"]:
                    self.failed[phase].append(f"{node}: {str(answer)[:200]}")
                    continue
                self.took[phase].append(took * 1000)

    def roll(self, processes: Processes, project: Project, tree: Path | None = None) -> None:
        """Each node in turn out of the rotation, restarted (from `tree` when given, else
        this one) on `project`, and back in once it serves."""
        for node in [n.id for n in project.cluster.nodes]:
            with self.lock:
                self.rotation.remove(node)
            time.sleep(0.3)  # what the balancer sent it before is answered
            processes.stop(node)
            url = project.cluster.node(node).url
            processes.start(node, node_command(project, node), url, cwd=tree)
            wait_serving(project, [node])
            with self.lock:
                self.rotation.append(node)

    def row(self, phase: str, seconds: float) -> str:
        took = sorted(self.took[phase])
        return (
            f"| {phase} | {seconds:.1f} s | {len(took):,} / {len(self.failed[phase])} | "
            f"{_q(took, 0.5):.2f} / {_q(took, 0.99):.2f} ms | {os.getloadavg()[0]:.2f} |"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.changes")
    parser.add_argument("--workload", default="main", choices=NAMES)
    parser.add_argument("--reuse", action="store_true", help="reuse the workload when built")
    parser.add_argument(
        "--upgrade",
        type=Path,
        metavar="TREE",
        help="instead of adding a store, roll every node to the release checked out at TREE "
        "(a git worktree), then back",
    )
    args = parser.parse_args(argv)
    workload = built(args.workload, args.reuse)
    project = copy_workload(workload, prefix="changes")
    processes = Processes(project.path.parent / "logs")
    processes.start_nodes(project)
    wait_serving(project, [n.id for n in project.cluster.nodes])
    client = Client(project, workload.customers)
    rows: list[str] = []
    try:
        client.start()
        time.sleep(IDLE_S)
        rows.append(client.row("idle", IDLE_S))
        if args.upgrade is not None:
            for phase, tree in (("upgrade", args.upgrade), ("rollback", None)):
                client.phase, began = phase, time.monotonic()
                client.roll(processes, project, tree)
                rows.append(client.row(phase, time.monotonic() - began))
        else:
            rows.append(_reload_settings(client, processes, project))
            rows.append(_reindex(client, processes, project))
            rows += _add_store(client, project)
            rows += _remove_store(client, project)
            rows += _change_window(client, project)
    finally:
        client.stopping.set()
        client.join(30)
        processes.stop_all()
    print(f"\n{workload.events:,} events, one client asking one key at a time")
    print("| phase | took | answers / failed or partial | p50 / p99 | load |")
    print("| --- | --- | --- | --- | --- |")
    print("\n".join(rows))
    failed = [f for phase in client.failed.values() for f in phase]
    for failure in failed[:5]:
        print(f"failed: {failure}")
    return 0 if not failed else 1


def _reload_settings(client: Client, processes: Processes, project: Project) -> str:
    """A limit changed in the file, each node sent SIGHUP in turn: the phase's row."""
    client.phase, began = "settings reload", time.monotonic()
    project.path.write_text(project.path.read_text() + "\n[settings]\nmax_aliases = 40\n")
    _hang_up(processes, project, RELOAD_S / 3)
    time.sleep(max(0.0, RELOAD_S - (time.monotonic() - began)))
    return client.row("settings reload", time.monotonic() - began)


def _reindex(client: Client, processes: Processes, project: Project) -> str:
    """customerTotals given another index, each node sent SIGHUP in turn: the phase's row
    (each node opens its chains again, sorting that store's tables by the new column)."""
    client.phase, began = "another index", time.monotonic()
    text = project.path.read_text()
    assert 'index = ["revenue"]' in text, "the workload's customerTotals has another index"
    project.path.write_text(text.replace('index = ["revenue"]', 'index = ["seats"]', 1))
    _hang_up(processes, project, RELOAD_S / 3)
    time.sleep(max(0.0, RELOAD_S - (time.monotonic() - began)))
    return client.row("another index", time.monotonic() - began)


def _hang_up(processes: Processes, project: Project, apart_s: float) -> None:
    """SIGHUP each node in turn, `apart_s` apart, once it said it read the file again."""
    for node in project.cluster.nodes:
        before = processes.tail(node.id, 10_000).count(RELOADED)
        os.kill(processes.pid(node.id), signal.SIGHUP)
        while processes.tail(node.id, 10_000).count(RELOADED) == before:
            time.sleep(0.05)
        time.sleep(apart_s)


def _add_store(client: Client, project: Project) -> list[str]:
    """Declare NEW_STORE; `stategate apply` asks every node to read the file again and
    follows the change while the one-shot pipeline builds the store. The rows of the whole
    change (the file's edit to every node serving the store) and of the pipeline's run."""
    stored = _bytes(Path(project.snapshot_store))
    client.phase, began = "add a store", time.monotonic()
    project.path.write_text(project.path.read_text() + NEW_STORE)
    built_s, extra = _applied(project, stored, began)
    return [
        client.row("add a store", time.monotonic() - began),
        f"| of it, the pipeline's run (Spark's start included) | {built_s:.1f} s | | | |",
        f"| the snapshot store's extra bytes after it | {extra / 2**20:,.0f} MiB | | | |",
    ]


def _applied(project: Project, stored: int, began: float) -> tuple[float, int]:
    """The edited file applied: `stategate apply` follows the change while one pipeline run
    builds it. The run's seconds since `began`, and the snapshot store's bytes after it
    beyond `stored`."""
    config = ["--config", str(project.path)]
    applying = subprocess.Popen([*STATEGATE, "apply", *config, "--wait", "1800"])
    subprocess.run([*STATEGATE, "pipeline", *config], check=True, capture_output=True)
    built_s = time.monotonic() - began
    extra = _bytes(Path(project.snapshot_store)) - stored
    assert applying.wait(1800) == 0, "apply did not see the change through"
    return built_s, extra


def _remove_store(client: Client, project: Project) -> list[str]:
    """NEW_STORE removed again by `apply --force` (every node takes the file with no
    restart) while a dashboard on node1 subscribes to it and to customerTotals: the phase's
    row, and what each subscription got."""
    url = "ws" + project.cluster.nodes[0].url.removeprefix("http") + "/graphql"
    with connect(url, subprotocols=[WS_PROTOCOL], open_timeout=10) as dashboard:  # type: ignore[list-item]
        dashboard.send(json.dumps({"type": "connection_init"}))
        assert json.loads(dashboard.recv(10))["type"] == "connection_ack"
        for id, query in SUBSCRIPTIONS.items():
            dashboard.send(json.dumps({"id": id, "type": "subscribe", "payload": {"query": query}}))
        got = {json.loads(dashboard.recv(30))["id"] for _ in SUBSCRIPTIONS}
        assert got == set(SUBSCRIPTIONS), got
        client.phase, began = "remove a store", time.monotonic()
        project.path.write_text(project.path.read_text().replace(NEW_STORE, ""))
        config = ["--config", str(project.path), "--force", "--wait", "600"]
        applied = subprocess.run([*STATEGATE, "apply", *config], capture_output=True, text=True)
        assert applied.returncode == 0, applied
        took = time.monotonic() - began
        said: dict[str, str] = {}
        with contextlib.suppress(TimeoutError):
            while True:
                message = json.loads(dashboard.recv(2))
                said[message["id"]] = message["type"] + "".join(
                    f" {e['extensions']['code']}" for e in message.get("payload") or ()
                    if message["type"] == "error"
                )  # fmt: skip
    assert said.get("gone") == "error SCHEMA_CHANGED", said
    assert "kept" not in said or said["kept"] == "next", said
    return [
        client.row("remove a store", took),
        "| of it, the subscription on the store | ended: SCHEMA_CHANGED | | | |",
        "| of it, the subscription on customerTotals | open | | | |",
    ]


def _change_window(client: Client, project: Project) -> list[str]:
    """hourlyRevenue's windows resized in place (one hour to two) by `apply` and one
    pipeline run, a dashboard subscribed to one key's windows: the phase's row (the file's
    edit to every node reading the new table), the pipeline's run, the disk both tables
    take, and the next run that leaves the old one out."""
    url = "ws" + project.cluster.nodes[1].url.removeprefix("http") + "/graphql"
    with connect(url, subprotocols=[WS_PROTOCOL], open_timeout=10) as dashboard:  # type: ignore[list-item]
        dashboard.send(json.dumps({"type": "connection_init"}))
        assert json.loads(dashboard.recv(10))["type"] == "connection_ack"
        payload = {"query": WINDOWS}
        dashboard.send(json.dumps({"id": "w", "type": "subscribe", "payload": payload}))
        assert _window_hours(json.loads(dashboard.recv(30))) == {1}
        stored = _bytes(Path(project.snapshot_store))
        client.phase, began = "change a window", time.monotonic()
        text = project.path.read_text()
        assert HOURLY in text, "the workload's hourlyRevenue has other windows"
        project.path.write_text(text.replace(HOURLY, HOURLY.replace('"1h"', '"2h"'), 1))
        built_s, extra = _applied(project, stored, began)
        took = time.monotonic() - began
        pushed: set[int] = set()
        with contextlib.suppress(TimeoutError):
            while pushed != {2}:
                pushed = _window_hours(json.loads(dashboard.recv(10)))
    assert pushed == {2}, f"the subscription was pushed windows of {pushed} hours"
    row = client.row("change a window", took)
    client.phase, began = "its old table left out", time.monotonic()
    subprocess.run(
        [*STATEGATE, "pipeline", "--config", str(project.path)], check=True, capture_output=True
    )
    return [
        row,
        f"| of it, the pipeline's run (Spark's start included) | {built_s:.1f} s | | | |",
        f"| the snapshot store's extra bytes after it | {extra / 2**20:,.0f} MiB | | | |",
        "| of it, the subscription on the store | pushed the new windows | | | |",
        client.row("its old table left out", time.monotonic() - began),
    ]


def _window_hours(message: dict[str, Any]) -> set[int]:
    """The sizes, in hours, of the windows a subscription's `next` message holds."""
    assert message["type"] == "next", message
    windows = message["payload"]["data"]["hourlyRevenue"]["windows"]
    return {round((_ms(w["windowEnd"]) - _ms(w["windowStart"])) / 3_600_000) for w in windows}


def _ms(text: str) -> int:
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def _q(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q * 100) - 1] if len(values) > 1 else 0.0


def _bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


if __name__ == "__main__":
    sys.exit(main())
