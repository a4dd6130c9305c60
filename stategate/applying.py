"""`stategate apply`: what a changed project file does to the running cluster, then its
progress until every node serves it (README: Changing stores).

It asks every node what it declares and has built (its /internal/status, with the cluster
secret), compares the file's stores, and prints the plan: the stores to add, to change in
place and to remove, what building them reads and writes, and the steps that apply it. With
`--dry-run` it stops there. Otherwise it prints a line each time the progress changes (the
new declarations built on how many nodes, how many serve the file's schema), and exits 0
once every node serves the file's schema, 1 if `--wait` seconds pass first. A file that
does not load and nodes that cannot be asked exit 2, with one line saying why."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass

import httpx
from prometheus_client.parser import text_string_to_metric_families

from contracts import chains
from contracts.coordination import Coordination, CoordinatorError
from contracts.entries import ConfigError
from contracts.generations import built_tables, kept
from contracts.manifest import FILE_NAME, Manifest
from contracts.project import Project, scheme
from contracts.snapshot_file import FormatError, rows_as
from gateway.cluster.metrics import SUBSCRIPTIONS_READING
from gateway.cluster.status import NodeStatus
from resolvers.execution import persisted
from resolvers.execution.rules import node_rules
from resolvers.schema.build import build_schema
from snapshot_store import StoreError, open_store
from spark_pipeline.plan import Rebuild, to_rebuild
from stategate.app import schema_version
from stategate.cluster_commands import ask_nodes, cluster_client
from stategate.reloading import REFUSED

# A rebuild's pace on two cores, from the records read again (README: Performance, "a full
# rebuild of the 5M-event log": 28-29 s): what the time the plan gives is estimated from.
REBUILD_RECORDS_PER_S = 175_000
POLL_S = 0.5


class NotApplied(Exception):
    """A change `apply` does not make, and why."""


@dataclass(frozen=True)
class Plan:
    added: tuple[str, ...]  # declared by the file, not built on every node yet
    changed: tuple[str, ...]  # of those, declared otherwise before: changed in place
    removed: tuple[str, ...]  # declared by a node, not by the file
    schema: str  # the version of the schema the file's stores make
    declared: dict[str, str]  # the file's stores: name -> rows_as
    tables: dict[str, str]  # the table each is built as (contracts/generations.py)
    rebuild: Rebuild | None  # what the pipeline builds (None: the published chains hold it)
    records: int  # what the rebuild reads again: the published records of its topics
    size: int  # the published layers' bytes: about what the rebuild's bases write

    def lines(self) -> list[str]:
        new = [n for n in self.added if n not in self.changed]
        said = [
            f"stores to add: {', '.join(new) or 'none'}",
            f"stores to change in place: {', '.join(self.changed) or 'none'}",
            f"stores to remove: {', '.join(self.removed) or 'none'}",
            f"schema: {self.schema}",
        ]
        if self.rebuild is not None:
            built = ", ".join(sorted(self.rebuild.stores))
            read = ", ".join(sorted(self.rebuild.topics))
            seconds = self.records / REBUILD_RECORDS_PER_S
            said.append(
                f"building: the pipeline builds {built or 'no store'} from the log "
                f"({self.records:,} records of {read or 'no topic'} read again) and folds "
                f"every other store into a new base of each chain: about "
                f"{self.size / 2**20:,.1f} MiB written, about {max(1, round(seconds)):,} s "
                "on two cores"
            )
        elif self.added:
            said.append("building: done (the published chains hold every store of the file)")
        if self.added:
            said.append(
                "steps: this file on every host; SIGHUP the pipeline (or restart it); each "
                "node reads it again (apply asks them, as SIGHUP does); each node serves the "
                "new stores, and the new declarations of those changed, once every node has "
                "them built"
            )
        if self.changed:
            said.append(
                "in place: each store changed is built as a table of its own beside the one "
                "read now; each node reads it instead once every node has it built, its "
                "subscriptions carried over (those whose documents no longer validate end "
                "with SCHEMA_CHANGED); the pipeline leaves the old table out once no node "
                "reads it"
            )
        elif self.removed:
            said.append(
                "steps: this file on every host; each node reads it again (apply asks them, as "
                "SIGHUP does) and serves the removed stores no more, ending the subscriptions "
                "that read them (SCHEMA_CHANGED); SIGHUP the pipeline (or restart it)"
            )
        return said


def plan(project: Project, said: dict[str, NodeStatus], manifest: Manifest) -> Plan:
    """The change from what the nodes have built to the file's stores: a store is to add
    until every node has the table of its declaration built (a store changed in place: the
    generation beside the one built before, contracts/generations.py), to remove while a
    node declares it. NotApplied when a node does not say what it declares, and for a
    store made global or partitioned (its chains are others)."""
    if not said or any(s.declared is None or s.stores is None for s in said.values()):
        raise NotApplied("a node does not say what it declares (a release before `apply`)")
    moved = sorted(
        {
            t.declared_name
            for t in built_tables(manifest.built).values()
            if (store := project.stores.get(t.declared_name)) and store.is_global != t.is_global
        }
    )
    if moved:
        raise NotApplied(
            f"{', '.join(moved)} made global or partitioned: declare the new form as a store "
            "of another name, move the clients to it, then remove the old one"
        )
    wanted = {name: rows_as(store) for name, store in project.stores.items()}
    tables = kept(project, manifest.built)
    target = {
        s.declared_name: s.name
        for s in tables.stores.values()
        if rows_as(s) == wanted[s.declared_name]
    }
    added = sorted(
        n for n, t in target.items() if not all(t in (s.stores or ()) for s in said.values())
    )
    otherwise = {
        n for s in said.values() for n, d in (s.declared or {}).items() if wanted.get(n, d) != d
    }
    declared = set().union(*(s.declared or {} for s in said.values()))
    rebuild = to_rebuild(tables, manifest)
    return Plan(
        added=tuple(added),
        changed=tuple(n for n in added if n in otherwise or target[n] != n),
        removed=tuple(sorted(declared - wanted.keys())),
        schema=schema_version(build_schema(project)),
        declared=wanted,
        tables=target,
        rebuild=rebuild,
        records=sum(
            at
            for p in range(project.cluster.partitions)
            for topic, at in chains.position(project, manifest, p).items()
            if rebuild is not None and rebuild.reads(topic)
        ),
        size=sum(layer.size for entry in manifest.partitions.values() for layer in entry.layers),
    )


def run(project: Project, dry_run: bool, wait_s: float, force: bool = False) -> int:
    try:
        said = _answered(asyncio.run(_statuses(project)))
        manifest = _manifest(project)
        change = plan(project, said, manifest)
        check_operations(project)
        if change.removed and not force:
            check_unread(change.removed, asyncio.run(_reading(project)))
    except NotApplied as refused:
        print(f"stategate apply: {refused}", file=sys.stderr)
        return 2
    for line in change.lines():
        print(line)
    if dry_run:
        return 0
    asked = asyncio.run(_reload(project))
    print("asked each node to read its project file again: " + ", ".join(
        f"{node} {'ok' if isinstance(outcome, int) else outcome}"
        for node, outcome in sorted(asked.items())
    ))  # fmt: skip
    times = {node: at for node, at in asked.items() if isinstance(at, int)}
    return _follow(project, change, wait_s, times)


def check_operations(project: Project) -> None:
    """NotApplied when an operation of the operations file does not validate against the
    file's schema (one reads a store it removes): a node refuses to start with it."""
    path = project.operations_file
    if path is None:
        return
    try:
        persisted.load(path, build_schema(project)._schema, node_rules(project.settings))
    except ConfigError as exc:
        raise NotApplied(f"{exc}: change the operations file first") from None


def check_unread(removed: Iterable[str], reading: dict[str, int]) -> None:
    """NotApplied when an open subscription reads a store to remove."""
    read = {store: reading[store] for store in removed if reading.get(store)}
    if read:
        said = ", ".join(f"{store} by {count}" for store, count in sorted(read.items()))
        raise NotApplied(
            f"stores to remove are read by open subscriptions: {said}; move their clients "
            "off them first, or --force (they end with SCHEMA_CHANGED as each node takes the file)"
        )


async def _reading(project: Project) -> dict[str, int]:
    """Each store's open subscriptions, summed over the nodes (a node's /internal/metrics
    sums its workers'); NotApplied when a node does not say."""
    addresses = await _addresses(project)
    found: dict[str, int] = {}
    async with cluster_client(project) as client:
        for node, url in addresses.items():
            try:
                reply = await client.get(f"{url}/internal/metrics")
                reply.raise_for_status()
            except httpx.HTTPError as exc:
                said = f"{node} does not say which stores its subscriptions read: {exc}"
                raise NotApplied(said) from None
            for family in text_string_to_metric_families(reply.text):
                for sample in family.samples if family.name == SUBSCRIPTIONS_READING else ():
                    store = sample.labels["store"]
                    found[store] = found.get(store, 0) + int(sample.value)
    return found


async def _reload(project: Project) -> dict[str, int | str]:
    """POST /internal/reload to every node (each reads its own copy of the file, as on
    SIGHUP): node -> the node's time as it was asked (milliseconds, its clock; 0 from a
    release that does not say), or why it was not asked."""
    said: dict[str, int | str] = {}
    async with cluster_client(project) as client:
        for node, url in (await _addresses(project)).items():
            try:
                reply = await client.post(f"{url}/internal/reload")
                reply.raise_for_status()
                said[node] = int(reply.json().get("asked_ms") or 0)
            except (httpx.HTTPError, ValueError, AttributeError) as exc:
                said[node] = f"not asked ({exc}): SIGHUP it"
    return said


def _follow(project: Project, change: Plan, wait_s: float, asked: dict[str, int]) -> int:
    """Print the progress each time it changes, until every node asked (`asked`: the node's
    time then) has read the file since, by a reload or a restart, and every node serves the
    schema; 1 at once when a node refused the file (it says why: a setting only a restart
    applies, a file it cannot load), with nothing changed on it."""
    started, last = time.monotonic(), ""
    while True:
        try:
            said = asyncio.run(_statuses(project))
        except NotApplied as refused:
            said = {"coordinator": str(refused)}
        statuses = {n: s for n, s in said.items() if isinstance(s, NodeStatus)}
        refusals = _refusals(statuses, asked)
        if refusals:
            for node, why in sorted(refusals.items()):
                print(f"stategate apply: {node} did not take the file: {why}", file=sys.stderr)
            return 1
        progress = _progress(change, said)
        if progress != last:
            print(f"progress: {progress}", flush=True)
            last = progress
        done = [_read(s, asked.get(n, 0)) and _serves(s, change) for n, s in statuses.items()]
        if len(statuses) == len(said) and all(done):
            print(f"applied in {time.monotonic() - started:.1f} s")
            return 0
        if time.monotonic() - started > wait_s:
            print(f"stategate apply: not applied after {wait_s:g} s", file=sys.stderr)
            return 1
        time.sleep(POLL_S)


def _refusals(statuses: dict[str, NodeStatus], asked: dict[str, int]) -> dict[str, str]:
    """node -> why, of the nodes whose reading since they were asked refused the file."""
    return {
        node: status.reloaded
        for node, status in statuses.items()
        if asked.get(node)
        and (status.reloaded_ms or 0) >= asked[node]
        and status.reloaded.startswith(REFUSED)
    }


def _progress(change: Plan, asked: dict[str, NodeStatus | str]) -> str:
    said = [s for s in asked.values() if isinstance(s, NodeStatus)]
    nodes = len(asked)
    parts = [
        f"{store} declared on {sum(_declares(s, change, store) for s in said)} of {nodes}, "
        f"built on {sum(change.tables[store] in (s.stores or ()) for s in said)} of {nodes}"
        + (f", read on {sum(_reads(s, change, store) for s in said)} of {nodes}"
           if store in change.changed else "")
        for store in change.added
    ]  # fmt: skip
    serving = sum(s.schema == change.schema for s in said)
    parts.append(f"{serving} of {nodes} nodes serve schema {change.schema}")
    silent = sorted(node for node, s in asked.items() if isinstance(s, str))
    return "; ".join(parts + ([f"no answer from {', '.join(silent)}"] if silent else []))


def _read(status: NodeStatus, asked_ms: int) -> bool:
    """Whether the answering process has read the file since its node was asked at
    `asked_ms` (its clock): it read it again since, or it started since (a node restarted,
    as in a rolling upgrade). True when that cannot be told: a node not asked, or of a
    release that does not say (its schema is what tells then)."""
    if not asked_ms or status.started_ms is None:
        return True
    return status.started_ms >= asked_ms or (status.reloaded_ms or 0) >= asked_ms


def _serves(status: NodeStatus, change: Plan) -> bool:
    """Whether a node serves the file's schema, each store changed in place read from the
    table of its new declaration (the schema may be the same before and after)."""
    return status.schema == change.schema and all(_reads(status, change, n) for n in change.changed)


def _reads(status: NodeStatus, change: Plan, store: str) -> bool:
    return change.tables[store] in (status.serving or ())


def _declares(status: NodeStatus, change: Plan, store: str) -> bool:
    """Whether a node declares `store` as the file does."""
    return (status.declared or {}).get(store) == change.declared[store]


async def _statuses(project: Project) -> dict[str, NodeStatus | str]:
    """Every node's status, or why it gave none."""
    return await ask_nodes(project, await _addresses(project))


def _answered(asked: dict[str, NodeStatus | str]) -> dict[str, NodeStatus]:
    """The statuses; NotApplied naming the nodes that gave none."""
    silent = {node: why for node, why in asked.items() if isinstance(why, str)}
    if silent:
        named = "; ".join(f"{node}: {why}" for node, why in sorted(silent.items()))
        raise NotApplied(f"nodes that do not answer: {named}")
    return {node: status for node, status in asked.items() if isinstance(status, NodeStatus)}


async def _addresses(project: Project) -> dict[str, str]:
    """The nodes to ask: the file's, or an elastic cluster's members."""
    cluster = project.cluster
    if cluster.coordinator is None:
        return {n.id: n.url for n in cluster.nodes}
    coordination = Coordination(cluster.coordinator, cluster.name, tls=cluster.tls)
    try:
        await coordination.connect()
        state = await coordination.read()
    except CoordinatorError as exc:
        raise NotApplied(f"the coordinator: {exc}") from exc
    finally:
        await coordination.close()
    return {m.id: f"{scheme(cluster.tls)}://{m.address}" for m in state.members.values()}


def _manifest(project: Project) -> Manifest:
    try:
        found = open_store(project.snapshot_url).read(FILE_NAME)
        return Manifest() if found is None else Manifest.from_json(found[0])
    except (StoreError, FormatError) as exc:
        raise NotApplied(f"the snapshot store: {exc}") from exc
