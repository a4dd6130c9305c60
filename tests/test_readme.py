"""Every example of README.md, read from the README itself and run against a live demo-like
cluster: the demo's project on free ports, 3 nodes, the README's own `stategate pipeline
--follow` following a thread that appends the demo's live bookings (20/s); the examples of
Elastic clusters on nodes of their own, with a real etcd (tests/coordinator.py).

A fenced block is run by its language (sh, console, python, js, graphql, toml), or checked as
what the README says something prints, as an HTML comment right before it says:

    <!-- example: skip: <why> -->            not run (a few, each saying why)
    <!-- example: output of `<command>` -->  the block is what the command prints
    <!-- example: log of the pipeline -->    lines the --follow pipeline logs
    <!-- example: log of a node -->          a line a node logs for the request it names
    <!-- example: until <n> lines -->        a program that runs until stopped: stopped then
    <!-- example: file <path> -->            (alone) a file the README says to run

Placeholders are replaced one way (`substitute`): 127.0.0.1:8101-8103 by the nodes'
addresses, 127.0.0.1:8104 and 127.0.0.1:9108 by free ones, 127.0.0.1:2379 by the test's
etcd, `.demo/stategate.toml` and `stategate.toml` by the cluster's project file,
`.venv/bin/` and a `stategate` that starts a line by this interpreter's bin folder. Commands
run in the repository's root; one that serves until stopped (a node, `--follow`) runs in the
background until the cluster stops. The project is the demo's, with `operations =
clients/operations.graphql` (for `stategate operations`) and `federation = true` (for
`_entities`). Log lines are compared by shape
(numbers, and runs of like items, are what moves in a live stream); an expected line ending
in `...` may go on.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
import tomllib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import sync_playwright

from contracts import project as projects
from contracts.cluster_secret import secret_headers
from contracts.coordination import State
from contracts.partitioner import partition_for
from contracts.project import Project
from stategate import demo
from stategate.broker import Broker
from stategate.demo import bookings
from stategate.launcher import free_ports, wait_serving
from tests.checkout import typescript_client
from tests.coordinator import Etcd
from tests.live import Socket
from tests.nodes import Nodes
from tests.projects import demo_project
from tests.test_dashboard import CHROMIUM, CHROMIUM_ARGS

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
ELASTIC = "Elastic clusters"
MAX_SKIPS = 6  # two of them: the layout across machines, whose addresses are not this one's
LIVE_CUSTOMERS = 40  # live bookings go to C000000-C000039; the README produces C000042
LIVE_RATE = 20.0  # bookings/s, as `make demo` produces them
RUN_S = 300  # one command at most (npm ci on a new machine)
MOVED_S = 60  # until the live stream shows in an answer
FOLLOWING_S = 180
PLACED_S = 120
ELASTIC_SETTINGS = """[settings]
health_interval_s = 0.2
sync_interval_s = 0.5
max_warmups = 9
"""
NOTE = re.compile(r"^<!-- example: (.*) -->$")
FENCE = re.compile(r"^```(\w*)$")
SERVER = re.compile(r"stategate node |pipeline .*--follow")


@dataclass(frozen=True)
class Example:
    line: int
    lang: str
    text: str
    note: str
    section: str

    @property
    def id(self) -> str:
        return f"{self.lang or 'text'}@{self.line}"

    @property
    def kind(self) -> str:
        """How it runs: skip, output, log, or its language."""
        for kind in ("skip", "output", "log"):
            if self.note.startswith(kind):
                return kind
        return self.lang


def read_examples(text: str) -> list[Example]:
    """The fenced blocks, each with the note right before it and its section; and the files
    notes name alone."""
    found: list[Example] = []
    section, note = "", ""
    body: list[str] = []
    opened: tuple[int, str] | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        if opened is not None:
            if line != "```":
                body.append(line)
                continue
            found.append(Example(opened[0], opened[1], "\n".join(body) + "\n", note, section))
            note, body, opened = "", [], None
        elif fence := FENCE.match(line):
            opened = (number, fence.group(1))
        elif (match := NOTE.match(line)) and match.group(1).startswith("file "):
            path = ROOT / match.group(1).removeprefix("file ")
            found.append(Example(number, path.suffix[1:], path.read_text(), "", section))
        elif match:
            note = match.group(1)
        elif line.strip():
            section = line.lstrip("#").strip() if line.startswith("#") else section
            note = ""
    return found


EXAMPLES = read_examples((ROOT / "README.md").read_text())


@dataclass
class Cluster:
    """Nodes of a project, what examples started beside them, and the placeholders' values."""

    project: Project
    nodes: Nodes
    places: dict[str, str]
    servers: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    joined: dict[str, str] = field(default_factory=dict)  # nodes added by command: addresses
    live: bookings.LiveBookings | None = None  # the demo's live bookings, while they run

    @property
    def root(self) -> Path:
        return self.project.path.parent

    def url(self, node: str) -> str:
        return f"http://{self.joined[node]}" if node in self.joined else self.nodes.url(node)

    def serve(self, command: str) -> None:
        """Start a command that serves until stopped, unless it runs already."""
        if command in self.servers:
            return
        argv = shlex.split(command, comments=True)
        if argv[1] == "node":
            node = argv[argv.index("--node") + 1]
            self.joined[node] = argv[argv.index("--address") + 1]
            self.nodes.processes.start(node, argv, self.url(node))
            return
        log = self.root / "pipeline.log"
        with open(log, "ab") as out:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, env=env())
        self.servers[command] = proc
        deadline = time.monotonic() + FOLLOWING_S
        while b"following" not in log.read_bytes():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)

    def stop(self) -> None:
        for proc in self.servers.values():
            proc.terminate()
        self.nodes.stop_all()
        for proc in self.servers.values():
            proc.wait(demo.PIPELINE_STOP_S)


def env(*paths: Path) -> dict[str, str]:
    """This environment, with our code (and `paths`) first on PYTHONPATH."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, (*paths, ROOT)))}


def places(project: Project, **more: str) -> dict[str, str]:
    addresses = {f"127.0.0.1:{8101 + i}": n.address for i, n in enumerate(project.cluster.nodes)}
    spare, metrics = free_ports(2)
    path = str(project.path)
    return {
        **addresses,
        "127.0.0.1:8104": f"127.0.0.1:{spare}",
        "127.0.0.1:9108": f"127.0.0.1:{metrics}",
        ".venv/bin/": f"{BIN}/",
        ".demo/stategate.toml": path,
        "stategate.toml": path,
        **more,
    }


def substitute(text: str, values: dict[str, str]) -> str:
    """The README's placeholders replaced in one pass (so no value is replaced again)."""
    pattern = "|".join(re.escape(p) for p in sorted(values, key=len, reverse=True))
    text = re.sub(pattern, lambda match: values[match.group()], text)
    return re.sub(r"(?m)^stategate ", f"{BIN}/stategate ", text)


def commands(text: str) -> list[str]:
    """A shell block's commands: continued lines joined, blank and comment lines left out."""
    joined = re.sub(r"\\\n\s*", "", text)
    return [line for line in joined.splitlines() if line.strip() and not line.startswith("#")]


def merged(text: str, fragment: str) -> str:
    """A TOML fragment added to a project file: the entries of a table the file has at that
    table's start, other tables at the end."""
    for table in re.split(r"\n(?=\[)", fragment.strip()):
        header, _, entries = table.partition("\n")
        if re.search(rf"(?m)^{re.escape(header)}$", text):
            text = re.sub(rf"(?m)^{re.escape(header)}$", f"{header}\n{entries}", text, count=1)
        else:
            text += f"\n{table}\n"
    return text


def start_nodes(nodes: Nodes) -> None:
    with ThreadPoolExecutor(len(nodes.ids)) as pool:
        list(pool.map(nodes.start, nodes.ids))


@pytest.fixture(scope="module")
def cluster(kafka: Broker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    project = demo_project(tmp_path_factory.mktemp("readme"), kafka.bootstrap)
    operations = f'[settings]\noperations = "{ROOT / "clients" / "operations.graphql"}"\n'
    operations += "federation = true\n"  # README: Federation asks _entities
    project.path.write_text(merged(project.path.read_text(), operations))
    project = projects.load(project.path)
    bookings.generate(project, customers=300, events=3000, end_ms=demo.END_MS)
    here = Cluster(project, Nodes(project, project.path.parent), places(project))
    (follow,) = [c for e in EXAMPLES if e.kind == "sh" for c in commands(e.text) if "--follow" in c]
    try:
        with ThreadPoolExecutor(1) as pool:  # the nodes start while Spark does
            starting = pool.submit(start_nodes, here.nodes)
            here.serve(substitute(follow, here.places))
            starting.result()
        wait_serving(project, here.nodes.ids)
        live_bookings(here, True)
        yield here
    finally:
        live_bookings(here, False)
        here.stop()


def live_bookings(cluster: Cluster, on: bool) -> None:
    """Start the demo's live bookings (LIVE_RATE a second), or stop them."""
    if cluster.live is not None:
        cluster.live.stop()
        cluster.live = None
    if on:
        cluster.live = bookings.LiveBookings(cluster.project, LIVE_CUSTOMERS, LIVE_RATE)
        cluster.live.start()


def bash(script: str, **options: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", script], cwd=ROOT, env=env(), text=True, timeout=RUN_S, **options
    )


def run_sh(example: Example, cluster: Cluster) -> None:
    """Servers start in the background, then the other lines run as one script."""
    typescript = re.search(r"\bnpm\b|client-typescript", example.text) is not None
    if typescript and shutil.which("npm") is None:
        pytest.skip("npm is not installed: the TypeScript client needs Node.js and npm")
    lines = commands(substitute(example.text, cluster.places))
    for line in lines:
        if SERVER.search(line):
            cluster.serve(line)
    script = "\n".join(["set -e", *(line for line in lines if not SERVER.search(line))])
    with typescript_client() if typescript else contextlib.nullcontext():
        done = bash(script, capture_output=True)
    assert done.returncode == 0, f"{script}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    for line in commands(example.text):
        for produced in re.findall(r"^echo '(.*)'\s*\|.*stategate produce", line):
            visible(cluster, json.loads(produced))


def visible(cluster: Cluster, record: dict[str, Any]) -> None:
    """Until every node answers the record as the key's latest value."""
    query = "query($k: String!) { latestBooking(key: $k) { record { trip price seats } } }"
    deadline = time.monotonic() + MOVED_S
    for node in cluster.nodes.ids:
        while (
            cluster.nodes.data(node, query, {"k": record["key"]})["latestBooking"]["record"]
            != record["value"]
        ):
            assert time.monotonic() < deadline, (node, record)
            time.sleep(0.2)


def run_console(example: Example, cluster: Cluster) -> None:
    """`$ ` lines are commands (a `\\` continues one), the lines after each what it prints
    (stdout and stderr); they run in one shell, so a function one defines stays defined."""
    steps: list[tuple[str, list[str]]] = []
    for line in example.text.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        elif steps and steps[-1][0].endswith("\\"):
            steps[-1] = (steps[-1][0] + "\n" + line, [])
        else:
            steps[-1][1].append(line)
    mark = "\x1e"
    script = "".join(f"printf '{mark}\\n'\n{substitute(c, cluster.places)}\n" for c, _ in steps)
    done = bash(script, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    printed = done.stdout.split(f"{mark}\n")[1:]
    for (command, expected), got in zip(steps, printed, strict=True):
        assert_lines(expected, got.splitlines(), command)


def assert_lines(expected: list[str], got: list[str], where: str) -> None:
    """Line for line; an expected line ending in `...` is the start of the line it stands for."""
    assert len(got) == len(expected), (where, got)
    for want, line in zip(expected, got, strict=True):
        assert line.startswith(want[:-3]) if want.endswith("...") else line == want, (where, line)


def run_output(example: Example, cluster: Cluster) -> None:
    (command,) = re.findall(r"`(.+)`", example.note)
    done = bash(substitute(command, cluster.places), capture_output=True)
    assert done.returncode == 0, done.stderr
    if example.lang == "json":
        assert json.loads(done.stdout) == json.loads(example.text)
    else:
        assert_lines(example.text.splitlines(), done.stdout.splitlines(), command)


def shape(line: str) -> str:
    """A line with each number as 0 and each run of like items as one."""
    zeroed = re.sub(r"\d+(?:\.\d+)?", "0", line)
    return re.sub(r"([\w:.-]+)(?:(?:, | )\1)+", r"\1", zeroed)


def logged(expected: str, line: str) -> bool:
    """Whether a log line (time, level, source, logger, message) has the message's shape."""
    want = shape(expected)
    return want[:-3] in shape(line) if want.endswith("...") else shape(line).endswith(want)


def run_log(example: Example, cluster: Cluster) -> None:
    """Each line is logged, numbers aside: by the pipeline as it follows the producer, or by
    a node for the request the line names (one over the cost limit)."""
    log = cluster.root / "pipeline.log"
    if example.note != "log of the pipeline":
        log = cluster.root / f"{cluster.nodes.ids[0]}.log"
        for line in example.text.splitlines():
            over_the_cost_limit(cluster, line)
    deadline = time.monotonic() + MOVED_S
    for line in example.text.splitlines():
        while not any(logged(line, got) for got in log.read_text().splitlines()):
            assert time.monotonic() < deadline, (line, log.read_text()[-3000:])
            time.sleep(0.2)


def over_the_cost_limit(cluster: Cluster, line: str) -> None:
    """The request a `client error COST_LIMIT_EXCEEDED operation=<name> via=http` line is
    about: 40 pages of 1000 rows x 3 fields, cost 120,000."""
    match = re.search(r"client error (\w+) operation=(\w+) via=(\w+)", line)
    assert match and match.group(1, 3) == ("COST_LIMIT_EXCEEDED", "http"), line
    pages = " ".join(
        f"p{i}: customerTotalsRange(first: 1000) {{ records {{ key bookings revenue }} }}"
        for i in range(40)
    )
    request = {"query": f"query {match.group(2)} {{ {pages} }}", "operationName": match.group(2)}
    body = httpx.post(f"{cluster.url(cluster.nodes.ids[0])}/graphql", json=request).json()
    assert body["errors"][0]["extensions"]["code"] == "COST_LIMIT_EXCEEDED", body


def run_python(example: Example, cluster: Cluster) -> None:
    """The typed client's examples (clients/python on PYTHONPATH, as the README says): the
    one that subscribes, and the routing one."""
    if "until" in example.note:
        run_subscribing(example, cluster)
        return
    code = substitute(example.text, cluster.places)
    command = [sys.executable, "-c", code]
    environment = env(ROOT / "clients" / "python")
    done = subprocess.run(command, cwd=ROOT, env=environment, capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    *answers, routed = done.stdout.splitlines()
    replicas = cluster.project.cluster.replica_map
    partitions = cluster.project.cluster.partitions
    assert answers == [
        f"{key} answered by {replicas[partition_for(key, 'string', partitions)][0]}"
        for key in ["C000001", "C000002", "C000003"]
    ], "each key by the active replica of its partition"
    assert routed == f"{len(answers)} requests routed"


def run_subscribing(example: Example, cluster: Cluster) -> None:
    """An int, a result read with max_lag=0 that did not fail (issue 22), then the
    subscription's."""
    (until,) = map(int, re.findall(r"until (\d+) lines", example.note))
    code = substitute(example.text, cluster.places)
    lines = printed([sys.executable, "-c", code], env(ROOT / "clients" / "python"), until)
    first, answer, *updates = lines
    assert first.isdigit(), lines
    assert "failure=None" in answer and "record=None" not in answer, answer
    assert updates and all(line.startswith("key='C000001' bookings=") for line in updates), lines


def printed(argv: list[str], environment: dict[str, str], until: int) -> list[str]:
    """The first `until` lines a program prints, then it is stopped."""
    proc = subprocess.Popen(
        argv, cwd=ROOT, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    lines: list[str] = []
    assert proc.stdout is not None and proc.stderr is not None
    output = proc.stdout

    def read() -> None:
        for line in output:
            lines.append(line.rstrip("\n"))

    reader = threading.Thread(target=read)
    reader.start()
    deadline = time.monotonic() + MOVED_S
    while len(lines) < until and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    proc.terminate()
    reader.join(10)
    errors = proc.stderr.read()
    proc.wait(10)
    assert len(lines) >= until, (lines, errors)
    return lines[:until]


def run_js(example: Example, cluster: Cluster) -> None:
    """In Chromium, on a page of node1 with the graphql-ws the node serves, `render` keeping
    what it is given: the first result, then one the live stream pushed."""
    code = substitute(example.text, cluster.places)
    errors: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.route("**/favicon.ico", lambda route: route.fulfill(status=204))
            page.goto(f"{cluster.nodes.url(cluster.nodes.ids[0])}/health")
            page.add_script_tag(url="/static/graphql-ws/graphql-ws.min.js")
            page.evaluate("code => { window.rendered = []; window.render = r => rendered.push(r);"
                          " (0, eval)(code); }", code)  # fmt: skip
            page.wait_for_function("window.rendered.length >= 2", timeout=MOVED_S * 1000)
            first, pushed = page.evaluate("window.rendered")[:2]
        finally:
            browser.close()
    assert errors == [] and answered(first) and answered(pushed), (errors, first, pushed)
    assert first != pushed


def answered(body: dict[str, Any]) -> bool:
    """No error, every root field there, no partition failed."""
    fields = (body.get("data") or {}).values()
    text = json.dumps(body)
    return (
        "errors" not in body
        and all(v is not None for v in fields)
        and '"partial": true' not in text
        and not re.search(r'"failure": "', text)
    )


def offsets(value: Any, path: tuple[Any, ...] = ()) -> dict[tuple[Any, ...], int]:
    """Every `offset` of a response, by where it is."""
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list):
        items = enumerate(value)  # type: ignore[assignment]
    else:
        return {}
    found = {}
    for key, item in items:
        if key == "offset":
            found[path] = int(item)
        found.update(offsets(item, (*path, key)))
    return found


def run_graphql(
    example: Example, cluster: Cluster, node: str = "", variables: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A subscription: its first result on `node`. A query: answered on every node, and run
    again until the positions it shows, if any, have moved (the stream goes on)."""
    document = example.text
    if re.search(r"(?m)^subscription\b", document):
        socket = Socket(cluster.url(node or cluster.nodes.ids[0]))
        try:
            socket.subscribe("1", document, variables or {})
            first = socket.next_of("1")
        finally:
            socket.close()
        assert answered(first), first
        return first
    bodies = [cluster.nodes.gql(n, document, variables) for n in cluster.nodes.ids]
    assert all(answered(body) for body in bodies), bodies
    before = offsets(bodies[0])
    if not before:  # it shows none (records as a federation gateway asks for them)
        return bodies[0]
    deadline = time.monotonic() + MOVED_S
    while True:
        after = offsets(cluster.nodes.gql(cluster.nodes.ids[0], document, variables))
        if after.keys() == before.keys() and after != before:
            assert all(after[at] >= offset for at, offset in before.items()), (before, after)
            return bodies[0]
        assert time.monotonic() < deadline, (before, after)
        time.sleep(0.5)


def run_toml(example: Example, cluster: Cluster) -> None:
    """A whole project file is the demo's (the README says so); a fragment, added to the
    cluster's project file, loads."""
    folder = cluster.root
    if {"cluster", "topics"} <= tomllib.loads(example.text).keys():
        readme, template = folder / "readme.toml", folder / "template.toml"
        readme.write_text(example.text)
        template.write_text(demo.PROJECT_TEMPLATE.read_text())
        assert dataclasses.replace(projects.load(readme), path=template) == projects.load(template)
        return
    path = folder / f"{example.id.replace('@', '-')}.toml"
    text = cluster.project.path.read_text()
    if "kafka" in tomllib.loads(example.text):  # another cluster: in place of the broker's
        text = re.sub(r"(?m)^\[kafka\]\n(?:[^\[\n].*\n)*", "", text)
    path.write_text(merged(text, example.text))
    projects.load(path)


RUNNERS: dict[str, Callable[[Example, Cluster], object]] = {
    "sh": run_sh,
    "console": run_console,
    "output": run_output,
    "log": run_log,
    "python": run_python,
    "js": run_js,
    "graphql": run_graphql,
    "toml": run_toml,
}


def test_every_block_runs_or_is_skipped_saying_why() -> None:
    unknown = [e.id for e in EXAMPLES if e.kind not in RUNNERS and e.kind != "skip"]
    assert unknown == [], "blocks no runner takes: say how to run them, or skip saying why"
    skipped = {e.id: e.note.removeprefix("skip:").strip() for e in EXAMPLES if e.kind == "skip"}
    assert all(skipped.values()) and len(skipped) <= MAX_SKIPS, skipped


@pytest.mark.parametrize(
    "example",
    [e for e in EXAMPLES if e.kind in RUNNERS and e.section != ELASTIC],
    ids=lambda e: e.id,
)
def test_the_example_runs_as_the_readme_says(example: Example, cluster: Cluster) -> None:
    RUNNERS[example.kind](example, cluster)


def test_the_elastic_examples_add_a_node_drain_one_and_resume_elsewhere(
    cluster: Cluster, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The section's [cluster] lines make a cluster of the demo's project elastic (nodes of
    its own, the same log and snapshots); its commands add node4 and drain node2; a client
    that read on node2 subscribes on node4 with its last token. The live bookings pause
    meanwhile: nothing here reads them, and a delta a second for seven nodes to install
    (and for each warm-up to chase) only slowed placement on 2 cores (tests/test_elastic.py
    moves partitions while a producer appends)."""
    section = [e for e in EXAMPLES if e.section == ELASTIC and e.kind != "skip"]
    assert [e.kind for e in section] == ["toml", "sh", "graphql"], section
    folder = tmp_path_factory.mktemp("elastic")
    etcd = Etcd(folder)
    etcd.start()
    elastic = elastic_cluster(cluster, folder, section[0], etcd)
    live_bookings(cluster, False)
    try:
        start_nodes(elastic.nodes)
        placed(etcd, elastic, {"node1", "node2", "node3"})
        read = elastic.nodes.gql("node2", '{ customerTotals(key: "C000001") { key } }')
        run_sh(section[1], elastic)
        drained = etcd.read(elastic.project.cluster.name).assignment
        assert drained is not None and not drained.assigned_to("node2"), "drain --wait returned"
        placed(etcd, elastic, {"node1", "node3", "node4"})
        variables = {"k": "C000001", "token": read["extensions"]["consistencyToken"]}
        first = run_graphql(section[2], elastic, "node4", variables)
        assert first["data"]["customerTotals"]["record"] is not None, first
    finally:
        elastic.stop()
        etcd.stop()
        live_bookings(cluster, True)  # for any example that runs after this one


def elastic_cluster(cluster: Cluster, folder: Path, toml: Example, etcd: Etcd) -> Cluster:
    """The demo's project on other ports, reading the cluster's log and snapshots, made
    elastic by the README's lines."""
    assert cluster.project.kafka is not None
    project = demo_project(folder)
    text = project.path.read_text()
    text = text.replace(
        '[log]\ndir = "log"', f'[kafka]\nbootstrap = "{cluster.project.kafka.bootstrap}"'
    )
    text = text.replace('store = "snapshots"', f'store = "{cluster.project.snapshot_store}"')
    text = merged(text, ELASTIC_SETTINGS)
    values = places(project, **{"127.0.0.1:2379": etcd.url.removeprefix("etcd://")})
    project.path.write_text(merged(text, substitute(toml.text, values)))
    project = projects.load(project.path)
    assert project.cluster.coordinator == etcd.url
    return Cluster(project, Nodes(project, folder), values)


def placed(etcd: Etcd, cluster: Cluster, serving: set[str]) -> State:
    """Until exactly `serving` serve every partition's replicas, nothing warming, each node
    serving what it is assigned."""
    deadline = time.monotonic() + PLACED_S
    while True:
        state = etcd.read(cluster.project.cluster.name)
        assignment = state.assignment
        if (
            assignment is not None
            and not any(assignment.warming)
            and set().union(*assignment.serving) == serving
            and all(len(s) == cluster.project.cluster.replicas for s in assignment.serving)
            and all(serves(cluster, n, assignment.hosted_by(n)) for n in serving)
        ):
            return state
        assert time.monotonic() < deadline, (state, cluster.nodes.logs_tail())
        time.sleep(0.2)


def serves(cluster: Cluster, node: str, partitions: list[int]) -> bool:
    url = f"{cluster.url(node)}/internal/status"
    status = httpx.get(url, headers=secret_headers(cluster.project.cluster.secret)).json()
    return {int(p) for p in status["partitions"]} >= set(partitions)
