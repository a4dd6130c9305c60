"""The elastic demo (`stategate demo --elastic`): the demo's cluster with a coordinator, an
etcd of its own under the demo's folder, and the one command that adds a node to it.

The command is made once (`join_command`): the demo prints it, and its check runs it."""

from __future__ import annotations

import contextlib
import shlex
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from contracts.coordination import State
from contracts.project import Project
from stategate.etcd import Etcd, serving_settled
from stategate.launcher import free_ports

CLUSTER_NAME = "demo"
FIRST_NEW = 4  # node4 is the first node the project file lacks
SETTLE_S = 120.0  # after lost_node_grace_s: a rerun first places a lost node's replicas again
POLL_S = 0.2
ASK_EVERY_S = 0.2
HOLD_S = 2.0  # the readers go on this long after the join settled: the old owners let go
WATCHED = [f"C{i:06d}" for i in range(48)]  # the busiest customers, as the dashboard's
BATCH = """query Busiest($keys: [String!]!) {
  customerTotalsBatch(keys: $keys) {
    entries { key failure record { bookings revenue } }
    meta { partial partitions { partition node failure } }
  }
}"""


def coordinator_entries(url: str) -> str:
    """The [cluster] entries that make the demo's cluster elastic."""
    return f'coordinator = "{url}"\nname = "{CLUSTER_NAME}"\n'


@dataclass(frozen=True)
class Joining:
    """A node to add: an id the coordinator does not know yet, on a free port."""

    node: str
    address: str

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    @classmethod
    def next(cls, state: State) -> Joining:
        """The first nodeN the coordinator has no member of."""
        number = FIRST_NEW
        while f"node{number}" in state.members:
            number += 1
        (port,) = free_ports(1)
        return cls(f"node{number}", f"127.0.0.1:{port}")


def shown(path: Path) -> str:
    """`path` as typed here: relative when it is below the working folder."""
    with contextlib.suppress(ValueError):
        return str(path.absolute().relative_to(Path.cwd()))
    return str(path.absolute())


def stategate(project: Project, command: str, *args: str) -> str:
    """A `stategate` command line on the demo's project, as this interpreter's bin has it."""
    script = Path(sys.executable).parent / "stategate"
    program = [shown(script)] if script.exists() else [sys.executable, "-m", "stategate.cli"]
    return shlex.join([*program, *command.split(), "--config", shown(project.path), *args])


def join_command(project: Project, joining: Joining) -> str:
    """The one command that adds the node (its data dir is relative to the project file)."""
    return stategate(
        project, "node", "--node", joining.node, "--address", joining.address,
        "--data-dir", joining.node,
    )  # fmt: skip


def instructions(project: Project, etcd: Etcd, joining: Joining) -> str:
    data_dir = shown(project.path.parent / joining.node)
    lines = [
        "",
        f"The cluster is elastic: etcd at {etcd.url} (its log in {shown(etcd.folder)}/).",
        f"Add a node ({data_dir} its folder); it takes its share of the replicas, warm first:",
        f"  {join_command(project, joining)}",
        "then watch the members and every partition's replicas, or the dashboard's partitions:",
        f"  {stategate(project, 'cluster status')}",
        "and move its replicas away again before you stop it:",
        f"  {stategate(project, f'cluster drain {joining.node}')}",
        "Ctrl-C stops etcd too, after the nodes (a node you added, you stop yourself).",
    ]
    return "\n".join(lines)


def wait_settled(project: Project, etcd: Etcd, urls: dict[str, str]) -> State:
    """Until the nodes of `urls` are the members, every partition has its replicas, nothing
    warms up, and every node serves what it is assigned."""
    deadline = time.monotonic() + project.settings.lost_node_grace_s + SETTLE_S
    while True:
        state = etcd.read(CLUSTER_NAME)
        if serving_settled(state, urls, project):
            return state
        if time.monotonic() > deadline:
            raise RuntimeError(f"the cluster did not settle: {state}")
        time.sleep(POLL_S)


def node_urls(project: Project) -> dict[str, str]:
    return {n.id: n.url for n in project.cluster.nodes}


@dataclass
class Reader:
    """Asks a node the dashboard's batch query every ASK_EVERY_S, counting partial answers."""

    url: str
    answers: int = 0
    partial: int = 0
    nodes: dict[int, str | None] = field(default_factory=dict)  # the last answer's
    _stop: threading.Event = field(default_factory=threading.Event)

    def __enter__(self) -> Reader:
        self._thread = threading.Thread(target=self._run, name="batch-reader", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        request = {"query": BATCH, "variables": {"keys": WATCHED}}
        with httpx.Client(timeout=30) as client:
            while not self._stop.wait(ASK_EVERY_S):
                self.answers += 1
                try:
                    body = client.post(f"{self.url}/graphql", json=request).json()
                except httpx.HTTPError:
                    body = {}
                meta = ((body.get("data") or {}).get("customerTotalsBatch") or {}).get("meta")
                if body.get("errors") or meta is None or meta["partial"]:
                    self.partial += 1
                    continue
                self.nodes = {p["partition"]: p["node"] for p in meta["partitions"]}
