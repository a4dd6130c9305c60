"""The typed clients of clients/ (README: Typed clients), generated here from schema.graphql
and clients/operations.graphql, as a user would, and run against real nodes serving the demo's
own project, every answer checked against the oracle:

- Both against nodes that allow only the operations of clients/operations.graphql (README:
  Persisted operations), the registry built from the file the clients are generated from.
- Python: ariadne-codegen (in its own tool venv, .venv-codegen) writes a pydantic client into
  a temporary folder; every operation runs on every node, Longs read into exact ints and
  written back as decimal strings (a position bound past 2^53 crosses the internal hop
  exactly), and the subscription pushes a booking produced during the test.
- TypeScript: `npm ci` installs GraphQL Code Generator and TypeScript from
  clients/typescript/package-lock.json, the generator writes the types, `tsc --noEmit` checks
  the example (and refuses a Long used as a number), and the compiled example answers as the
  oracle does, routed by routing.ts.
- Routing (clients/python/routing.py, clients/typescript/routing.ts): each key's request
  reaches its partition's active replica, no node asks another, and a killed replica's keys
  go to their standby.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import random
import shutil
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest

from contracts import eventlog
from contracts import project as projects
from contracts.partitioner import partition_for
from contracts.project import Project
from spark_pipeline import job
from spark_pipeline.spark import LazySpark
from stategate import demo
from stategate.demo import bookings
from stategate.launcher import wait_serving
from tests import oracle
from tests.checkout import TYPESCRIPT, typescript_client
from tests.nodes import Nodes
from tests.projects import demo_project

ROOT = Path(__file__).resolve().parent.parent
CLIENTS = ROOT / "clients"
CODEGEN_VENV = ROOT / ".venv-codegen"
FROM, TO = "2026-10-25T00:00:00+00:00", "2026-10-31T23:00:00+00:00"  # the demo's last week
JS_LIMIT = 2**53
NPM_TIMEOUT_S = 300  # one npm step at most (npm ci downloads ~300 packages on a new machine)


@pytest.fixture(scope="module")
def cluster(spark: LazySpark, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Nodes]:
    """Three nodes serving the demo's project (the schema the clients are generated from),
    allowing only the operations of clients/operations.graphql: the clients' own file is the
    registry, so every call below also proves the allow-list lets a generated client through."""
    project = demo_project(tmp_path_factory.mktemp("clients"))
    allowed = f'\n[settings]\noperations = "{CLIENTS / "operations.graphql"}"\nallow_list = true\n'
    project.path.write_text(project.path.read_text() + allowed)
    project = projects.load(project.path)
    assert project.settings.allow_list
    bookings.generate(project, customers=300, events=3000, end_ms=demo.END_MS)
    job.run(project, spark, notify=False)
    nodes = Nodes(project, project.path.parent)
    nodes.start_all()
    yield nodes
    nodes.stop_all()


def codegen_venv() -> Path:
    """ariadne-codegen's tool venv, made from clients/python/requirements.txt when missing or
    stale (as `make client-python` does): it cannot share the project's venv (README)."""
    requirements = CLIENTS / "python" / "requirements.txt"
    stamp = CODEGEN_VENV / ".installed"
    if not stamp.exists() or stamp.read_text() != requirements.read_text():
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(CODEGEN_VENV)], check=True)
        pip = [str(CODEGEN_VENV / "bin" / "python"), "-m", "pip", "install", "-q"]
        subprocess.run([*pip, "-r", str(requirements)], check=True, timeout=600)
        stamp.write_text(requirements.read_text())
    return CODEGEN_VENV / "bin" / "ariadne-codegen"


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModuleType]:
    """The Python client, generated into a temporary folder from the committed config (only
    its target folder changed) and imported."""
    folder = tmp_path_factory.mktemp("python-client")
    config = (CLIENTS / "python" / "ariadne-codegen.toml").read_text()
    target = 'target_package_path = "clients/python"'
    assert target in config
    (folder / "ariadne-codegen.toml").write_text(
        config.replace(target, f"target_package_path = {json.dumps(str(folder))}")
    )
    generated = subprocess.run(
        [str(codegen_venv()), "--config", str(folder / "ariadne-codegen.toml"), "client"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert generated.returncode == 0, generated.stdout + generated.stderr
    sys.path.insert(0, str(folder))
    try:
        yield importlib.import_module("stategate_client")
    finally:
        sys.path.remove(str(folder))
        for name in [n for n in sys.modules if n.split(".")[0] == "stategate_client"]:
            del sys.modules[name]


def totals_of(project: Project) -> dict[str, dict[str, Any]]:
    """customerTotals as the oracle computes it from the raw log: key -> column -> value."""
    columns = ["key", *project.stores["customerTotals"].columns]
    rows = oracle.expected_store(project, "customerTotals").values()
    return {row[0]: dict(zip(columns, row, strict=True)) for part in rows for row in part}


def as_totals(record: Any) -> dict[str, Any]:
    """A generated TotalsFields model as the oracle's row: Longs are ints, exactly."""
    row: dict[str, Any] = record.model_dump(by_alias=True)
    for name in ("bookings", "seats"):
        assert row[name] is None or type(row[name]) is int, row
    return row


def assert_totals(got: Any, expected: dict[str, Any] | None) -> None:
    if expected is None:
        assert got is None
        return
    assert as_totals(got) == pytest.approx(expected), (as_totals(got), expected)


def assert_rows(got: list[dict[str, Any]], expected: list[dict[str, Any]]) -> None:
    assert len(got) == len(expected), (got, expected)
    for g, e in zip(got, expected, strict=True):
        assert g == pytest.approx(e), (g, e)


def assert_meta(project: Project, meta: Any, partitions: list[int]) -> None:
    """Every partition answered, at the log's end in its chain's topics (each offset an int
    read from its string)."""
    ends = oracle.expected_chain_positions(project)  # of partitioned stores: chain p
    assert not meta.partial and meta.partitions_failed == 0
    assert sorted(p.partition for p in meta.partitions) == sorted(partitions)
    for part in meta.partitions:
        assert {o.topic: o.offset for o in part.position} == ends[part.partition]
    merged = {(o.topic, o.partition): o.offset for o in meta.position}
    assert merged == {("bookings", p): ends[p]["bookings"] for p in partitions}


def millis(moment: datetime) -> int:
    assert moment.tzinfo is not None, "a DateTime is read as an aware datetime"
    return int(moment.timestamp() * 1000)


async def every_operation(client: ModuleType, cluster: Nodes, node: str) -> None:
    project = cluster.project
    partitions = project.cluster.partitions
    totals = totals_of(project)
    keys = sorted(totals)
    url = cluster.url(node)
    async with client.StategateClient(url=f"{url}/graphql") as api:
        # one key, present and missing
        for key in [keys[0], keys[len(keys) // 2], "nobody"]:
            one = (await api.customer_totals(key=key)).customer_totals
            assert one.key == key and one.partition == partition_for(key, "string", partitions)
            assert one.failure is None
            assert_totals(one.record, totals.get(key))
            assert_meta(project, one.meta, [one.partition])
        # a batch: entries align with the keys asked
        asked = [*keys[::7], "nobody", keys[1]]
        batch = (await api.customer_totals_batch(keys=asked)).customer_totals_batch
        assert [e.key for e in batch.entries] == asked
        for entry in batch.entries:
            assert entry.failure is None
            assert_totals(entry.record, totals.get(entry.key))
        assert_meta(project, batch.meta, sorted({e.partition for e in batch.entries}))
        # a key range, page by page through the cursors
        low, high = keys[10], keys[60]
        scanned, after, pages = [], client.base_model.UNSET, 0
        while True:
            page = (
                await api.customer_totals_range(first=7, from_=low, to=high, after=after)
            ).customer_totals_range
            assert_meta(project, page.meta, list(range(partitions)))
            scanned += [as_totals(r) for r in page.records]
            pages += 1
            if not page.page_info.has_next_page:
                break
            after = page.page_info.end_cursor
        expected = [totals[k] for k in keys if low <= k <= high]
        assert_rows(scanned, expected)
        assert pages == -(-len(expected) // 7)
        # a prefix page of the table store
        latest = {
            r[0]: {"key": r[0], "trip": r[1], "price": r[2], "seats": r[3]}
            for part in oracle.expected_store(project, "latestBooking").values()
            for r in part
        }
        prefix = (
            await api.latest_bookings_by_prefix(prefix="C0001", first=5)
        ).latest_booking_prefix
        want = [latest[k] for k in sorted(latest) if k.startswith("C0001")]
        assert_rows([r.model_dump(by_alias=True) for r in prefix.records], want[:5])
        assert prefix.page_info.has_next_page == (len(want) > 5)
        # bookings with their journeys: a join to the global timetable, on this node alone
        timetable = {
            r[0]: {"key": r[0], "minutes": r[1], "fare": r[2], "operator": r[3]}
            for part in oracle.expected_store(project, "timetable").values()
            for r in part
        }
        joined = (await api.booking_journeys(keys=sorted(latest)[:300])).latest_booking_batch
        assert all(e.record for e in joined.entries)
        assert any(e.record.journey for e in joined.entries), "some trips are in the timetable"
        for entry in joined.entries:
            want_journey = timetable.get(latest[entry.key]["trip"])
            got = entry.record.journey
            assert (None if got is None else got.model_dump(by_alias=True)) == want_journey
        stores = {p.store for p in joined.meta.partitions}
        assert stores == {"latestBooking", "timetable"}
        assert {p.node for p in joined.meta.partitions if p.store == "timetable"} == {node}
        # one key's windows, the bounds given as aware datetimes
        busy = max(keys, key=lambda k: totals[k]["bookings"])
        start, end = datetime.fromisoformat(FROM), datetime.fromisoformat(TO)
        hourly = (await api.hourly_revenue(key=busy, from_=start, to=end)).hourly_revenue
        windows = [
            (busy, millis(w.window_start), w.bookings, w.revenue)
            for w in hourly.windows
            if millis(w.window_end) - millis(w.window_start) == 3_600_000
        ]
        expected_windows = [
            r
            for part in oracle.expected_store(project, "hourlyRevenue").values()
            for r in part
            if r[0] == busy and millis(start) <= r[1] <= millis(end)
        ]
        assert len(windows) == len(expected_windows) > 0
        for got, want_window in zip(windows, sorted(expected_windows), strict=True):
            assert got == pytest.approx(want_window)
        assert_meta(project, hourly.meta, [hourly.partition])
        # what can be asked, and the partition map with positions and lag
        state = await api.cluster_state()
        stores = {s.name: s for s in state.stores}
        assert set(stores) == set(project.stores)
        assert stores["hourlyRevenue"].window_size_ms == 3_600_000
        assert stores["customerTotals"].window_size_ms is None
        assert state.cluster.node == node and state.cluster.partitions_count == partitions
        ends = oracle.expected_chain_positions(project)  # a replica's: its partition's chain
        for part in state.cluster.partitions:
            replicas = project.cluster.replica_map[part.partition]
            assert [r.node for r in part.replicas] == list(replicas)
            for replica in part.replicas:
                assert replica.alive and replica.lag == 0
                assert {o.topic: o.offset for o in replica.position} == ends[part.partition]


def test_the_nodes_run_nothing_but_the_clients_operations(cluster: Nodes) -> None:
    url = cluster.url("node1") + "/graphql"
    body = httpx.post(url, json={"query": "{ __typename }"}).json()
    assert [e["extensions"]["code"] for e in body["errors"]] == ["OPERATION_NOT_ALLOWED"]


@pytest.mark.parametrize("node", ["node1", "node2", "node3"])
def test_the_python_client_answers_every_operation_as_the_oracle(
    client: ModuleType, cluster: Nodes, node: str
) -> None:
    asyncio.run(every_operation(client, cluster, node))


def test_the_python_client_keeps_longs_exact(client: ModuleType, cluster: Nodes) -> None:
    # Read: a decimal string past 2^53 becomes the exact int; a JSON number is refused.
    position = client.fragments.PositionFields
    big = position.model_validate({"topic": "t", "partition": 0, "offset": str(JS_LIMIT + 1)})
    assert big.offset == JS_LIMIT + 1
    with pytest.raises(ValueError, match="decimal string"):
        position.model_validate({"topic": "t", "partition": 0, "offset": JS_LIMIT + 1})
    # Written: an int becomes its decimal string.
    inputs = client.input_types
    bound = inputs.PositionInput(topic="bookings", partition=0, offset=2**63 - 1)
    assert bound.model_dump(by_alias=True)["offset"] == "9223372036854775807"

    async def ask_past_the_log(node: str) -> list[Any]:
        """A position bound past 2^53 on one partition: that partition cannot answer, and
        its replica's message shows the bound it was sent, digit for digit."""
        key = "C000001"
        partition = partition_for(key, "string", cluster.project.cluster.partitions)
        demand = inputs.ConsistencyInput(
            position=[
                inputs.PositionInput(topic="bookings", partition=partition, offset=JS_LIMIT + 1)
            ],
            max_lag=JS_LIMIT + 1,
        )
        async with client.StategateClient(url=f"{cluster.url(node)}/graphql") as api:
            one = (await api.customer_totals(key=key, consistency=demand)).customer_totals
        assert one.failure == client.enums.FailureReason.NOT_UP_TO_BOUND and one.record is None
        return [p.message for p in one.meta.partitions if p.failure]

    for node in cluster.ids:
        (message,) = asyncio.run(ask_past_the_log(node))
        assert f"'bookings': {JS_LIMIT + 1}" in message, message


@pytest.fixture
def typescript_held() -> Iterator[None]:
    """The TypeScript client's folders to this test alone (tests/checkout.py)."""
    with typescript_client():
        yield


def test_the_typescript_types_check_and_the_example_answers(
    cluster: Nodes, typescript_held: None
) -> None:
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("npm is not installed: the TypeScript client needs Node.js and npm")

    def run(*command: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            list(command), cwd=TYPESCRIPT, capture_output=True, text=True, timeout=NPM_TIMEOUT_S
        )
        if check:
            assert done.returncode == 0, f"{command}:\n{done.stdout}\n{done.stderr}"
        return done

    shutil.rmtree(TYPESCRIPT / "generated", ignore_errors=True)
    run("make", "-C", str(ROOT), "client-typescript")  # npm ci (when stale), codegen, tsc
    generated = (TYPESCRIPT / "generated" / "graphql.ts").read_text()
    assert "offset: string" in generated and "bookings: string | null" in generated
    # A Long used as a number does not type-check: the mapping is in force.
    probe = TYPESCRIPT / "probe-long.ts"
    probe.write_text(
        'import type { CustomerTotalsQuery } from "./generated/graphql.js";\n'
        "export const n = (q: CustomerTotalsQuery): number =>\n"
        "  q.customerTotals?.record?.bookings ?? 0;\n"
    )
    try:
        tsc = str(TYPESCRIPT / "node_modules" / ".bin" / "tsc")
        options = ["--noEmit", "--strict", "--module", "NodeNext", "--skipLibCheck"]
        refused = run(tsc, *options, str(probe), check=False)
    finally:
        probe.unlink()
    assert refused.returncode != 0 and "TS2322" in refused.stdout, refused.stdout

    run(npm, "run", "build")
    # routing.ts partitions as Kafka does, for every key type
    rng = random.Random(7)
    keys = [
        *(("string", "".join(rng.choice("aZ9→Kö€😀") for _ in range(n))) for n in range(12)),
        *(("int", rng.randint(-(2**31), 2**31 - 1)) for _ in range(20)),
        *(("long", str(rng.randint(-(2**63), 2**63 - 1))) for _ in range(20)),
    ]
    script = (
        'import { partitionOf } from "./dist/routing.js";'
        "const keys = JSON.parse(process.argv[1]);"
        "console.log(JSON.stringify(keys.map(([t, k]) => partitionOf(k, t, 9))));"
    )
    computed = run("node", "--input-type=module", "-e", script, json.dumps(keys))
    assert json.loads(computed.stdout) == [
        partition_for(int(k) if t != "string" else k, t, 9) for t, k in keys
    ]
    project = cluster.project
    totals = totals_of(project)
    key = max(totals, key=lambda k: totals[k]["bookings"])
    answered = run("node", "dist/example.js", f"{cluster.url('node2')}/graphql", key, FROM, TO)
    output = json.loads(answered.stdout)
    windows = [
        r
        for part in oracle.expected_store(project, "hourlyRevenue").values()
        for r in part
        if r[0] == key
        and millis(datetime.fromisoformat(FROM)) <= r[1] <= millis(datetime.fromisoformat(TO))
    ]
    assert output == {
        "node": "node2",
        "partitions": project.cluster.partitions,
        "totalLag": "0",
        "bookings": {key: str(totals[key]["bookings"]), f"{key}-nobody": None},
        "windows": len(windows),
        "windowBookings": str(sum(r[2] for r in windows)),
        "busiestHour": output["busiestHour"],
        "answeredBy": output["answeredBy"],
        "routed": 2,  # the batch and the windows: the partition map has no keys
    }
    # routing.ts sent the key's windows to the active replica of its partition
    active = project.cluster.replica_map[partition_for(key, "string", project.cluster.partitions)]
    assert output["answeredBy"]["HourlyRevenue"] == active[0], output["answeredBy"]
    assert output["answeredBy"]["ClusterState"] == "node2", "no keys: the URL it was given"
    busiest = max(windows, key=lambda r: r[2])
    assert int(output["busiestHour"]["bookings"]) == busiest[2]


def test_the_python_client_subscription_pushes_a_new_booking(
    client: ModuleType, cluster: Nodes, spark: LazySpark
) -> None:
    project = cluster.project
    key = sorted(totals_of(project))[3]

    async def watch(node: str) -> None:
        url = cluster.url(node)
        ws_url = url.replace("http://", "ws://") + "/graphql"
        async with client.StategateClient(url=f"{url}/graphql", ws_url=ws_url) as api:
            updates = api.watch_customer_totals(key=key)
            try:
                first = (await asyncio.wait_for(anext(updates), 30)).customer_totals
                assert_totals(first.record, totals_of(project)[key])
                before = {(o.topic, o.partition): o.offset for o in first.meta.position}
                value = {"trip": "Berlin→Hamburg", "price": 42.5, "seats": 2}
                record = eventlog.Record(key, value, eventlog.now_ms())
                eventlog.produce(project.log_dir, project.topics["bookings"], 9, [record])
                await asyncio.to_thread(job.run, project, spark)
                pushed = (await asyncio.wait_for(anext(updates), 30)).customer_totals
            finally:
                await updates.aclose()
        now = totals_of(project)[key]
        assert_totals(pushed.record, now)
        assert pushed.record.bookings == first.record.bookings + 1
        after = {(o.topic, o.partition): o.offset for o in pushed.meta.position}
        assert after.keys() == before.keys()
        assert all(after[tp] > offset for tp, offset in before.items())

    for node in cluster.ids:
        asyncio.run(watch(node))


def routing_client(client: ModuleType, cluster: Nodes, seed: str) -> tuple[Any, Any]:
    """The typed client over a RoutingTransport seeded with one node, and the transport."""
    routing = importlib.import_module(f"{client.__name__}.routing")  # copied in, not imported
    transport = routing.RoutingTransport([cluster.url(seed)])
    http = httpx.AsyncClient(transport=transport, timeout=30)
    api = client.StategateClient(url=f"{cluster.url(seed)}/graphql", http_client=http)
    return api, transport


def test_the_routing_client_sends_each_key_to_its_partition(
    client: ModuleType, cluster: Nodes
) -> None:
    """Seeded with node1 alone, the routing client sends each one-key request to the active
    replica of the key's partition and a batch to the node holding most of its keys: no node
    serves an internal request, each one-key answer comes from the active replica, and every
    answer is the oracle's."""
    project = cluster.project
    partitions = project.cluster.partitions
    totals = totals_of(project)
    keys = sorted(totals)[::5][:60] + ["nobody"]

    async def ask() -> tuple[int, set[str]]:
        api, transport = routing_client(client, cluster, "node1")
        answered: set[str] = set()
        async with api:
            for key in keys:
                one = (await api.customer_totals(key=key)).customer_totals
                assert_totals(one.record, totals.get(key))
                (part,) = one.meta.partitions
                active = project.cluster.replica_map[partition_for(key, "string", partitions)][0]
                assert part.node == active and part.role.value == "ACTIVE", (key, part)
                answered.add(part.node)
            held = [k for k in keys if partition_for(k, "string", partitions) in (0, 3)]
            batch = (await api.customer_totals_batch(keys=held)).customer_totals_batch
            for entry in batch.entries:
                assert_totals(entry.record, totals.get(entry.key))
        return transport.routed, answered

    before = {n: cluster.status(n)["internal_requests"] for n in cluster.ids}
    routed, answered = asyncio.run(ask())
    after = {n: cluster.status(n)["internal_requests"] for n in cluster.ids}
    assert after == before, "a routed request made a node ask another"
    assert routed == len(keys) + 1
    assert answered == set(cluster.ids), "the keys asked spread over every node"


def test_the_routing_client_fails_over_to_another_replica(
    client: ModuleType, cluster: Nodes
) -> None:
    """With node2 killed, a key whose active replica is node2 goes to node2 first, then,
    node2 unreachable, to its standby; the next such key skips node2. Last in the module:
    node2 is started again after."""
    project = cluster.project
    partitions = project.cluster.partitions
    totals = totals_of(project)
    on_node2 = [
        k for k in sorted(totals)
        if project.cluster.replica_map[partition_for(k, "string", partitions)][0] == "node2"
    ][:5]  # fmt: skip

    killed: list[str] = []  # started again after, only if it was killed

    async def ask() -> Any:
        api, transport = routing_client(client, cluster, "node1")
        async with api:
            await api.customer_totals(key=on_node2[0])  # the map read, node2 alive in it
            cluster.kill("node2")
            killed.append("node2")
            for key in on_node2:
                one = (await api.customer_totals(key=key)).customer_totals
                assert_totals(one.record, totals[key])
                (part,) = one.meta.partitions
                assert part.node != "node2" and part.failure is None, part
        return transport

    try:
        transport = asyncio.run(ask())
        assert list(transport.down) == [cluster.url("node2")]
    finally:
        for node in killed:
            cluster.start(node)
        wait_serving(project, cluster.ids)
