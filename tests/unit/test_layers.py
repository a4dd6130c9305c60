"""The packages import in one direction, and so do the floors inside gateway/ and resolvers/;
a test that walks every import keeps it so.

contracts        the shared formats and vocabulary: imports none of ours
topics           the log the pipeline follows (Kafka, or the file log): contracts
snapshot_store   where snapshots are published (a folder, or S3): contracts
gateway          a node's query service, routing, storage: snapshot_store, contracts
spark_pipeline   the pipeline: topics, snapshot_store, contracts
resolvers        the GraphQL front end over the query service: gateway, contracts
stategate        composition (CLI, demo, the ASGI app): any of them

Inside gateway/, from the ground up: model (values and pure rules) and runtime (scheduling);
wire (the internal protocol and transports); storage (snapshots, tables, execution, delivery);
cluster (membership, status, routing, batching) and workers (a node's keeper and its
followers: gateway/workers/); then the node, the parts each role builds for it, its service
and its HTTP routes at the top. Inside gateway/storage/, from the ground up: memory (the
in-memory engine); catalog (the snapshots served: the DuckDB hub, the levels, images); sql
(the SQL engine) and delivery (sync, switches, lateness); then the frame that answers
sub-queries (execution.py) at its top. Inside resolvers/: schema (the typed fields),
execution (operations, the executors, persisted documents, costs), transport (HTTP,
WebSocket, live queries).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OURS = {
    "contracts",
    "topics",
    "snapshot_store",
    "gateway",
    "spark_pipeline",
    "resolvers",
    "stategate",
}
ALLOWED = {
    "contracts": {"contracts"},
    "topics": {"contracts", "topics"},
    "snapshot_store": {"contracts", "snapshot_store"},
    "gateway": {"contracts", "snapshot_store", "gateway"},
    "spark_pipeline": {"contracts", "topics", "snapshot_store", "spark_pipeline"},
    "resolvers": {"contracts", "gateway", "resolvers"},
    "stategate": OURS,
}
# Heavy engines stay where they belong: a serving node never loads Spark or Strawberry's
# schema machinery below the resolvers.
FORBIDDEN = {
    "contracts": {"pyspark", "strawberry", "starlette", "httpx"},
    "topics": {"pyspark", "strawberry", "starlette", "httpx"},
    "snapshot_store": {"pyspark", "strawberry", "starlette", "httpx"},
    "gateway": {"pyspark", "strawberry"},
    "resolvers": {"pyspark"},
}
# The floors inside a package, lowest first; a module directly in the package is its top
# floor. A floor imports its own and the floors below it.
FLOORS = {
    "gateway": [{"model", "runtime"}, {"wire"}, {"storage"}, {"cluster", "workers"}, {""}],
    "gateway.storage": [{"memory"}, {"catalog"}, {"sql", "delivery"}, {""}],
    "resolvers": [{"schema"}, {"execution"}, {"transport"}, {""}],
}


def imports(path: Path) -> set[str]:
    """The dotted names of our modules and the top-level packages a module imports, at any
    depth in the file."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def tops(names: set[str]) -> set[str]:
    return {name.split(".")[0] for name in names}


def floor_of(package: str, dotted: str) -> int:
    """The floor of a module or sub-package `package.<sub>...`; a name of the package's own
    top (a module at its root) is its top floor. `package` may be a sub-package itself
    (gateway.storage), whose own sub-packages are its floors."""
    below = dotted.split(".")[package.count(".") + 1 :]
    sub = below[0] if len(below) > 1 or (below and (folder(package) / below[0]).is_dir()) else ""
    for number, floor in enumerate(FLOORS[package]):
        if sub in floor:
            return number
    raise AssertionError(f"{dotted}: {package}/{sub} is on no floor of {package}")


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_packages_import_only_the_layers_below_them(package: str) -> None:
    modules = sorted((ROOT / package).rglob("*.py"))
    assert modules, f"no modules in {package}"
    wrong = {
        str(m.relative_to(ROOT)): sorted(
            (tops(imports(m)) & OURS) - ALLOWED[package]
            | tops(imports(m)) & FORBIDDEN.get(package, set())
        )
        for m in modules
    }
    assert {m: names for m, names in wrong.items() if names} == {}


def folder(package: str) -> Path:
    return ROOT.joinpath(*package.split("."))


@pytest.mark.parametrize("package", sorted(FLOORS))
def test_floors_import_only_their_own_and_the_floors_below(package: str) -> None:
    wrong = {}
    for module in sorted(folder(package).rglob("*.py")):
        dotted = ".".join(module.relative_to(ROOT).with_suffix("").parts)
        if dotted.endswith(".__init__"):
            continue
        own = floor_of(package, dotted)
        above = sorted(
            name
            for name in imports(module)
            if name.startswith(f"{package}.") and _is_module(name) and floor_of(package, name) > own
        )
        if above:
            wrong[dotted] = above
    assert wrong == {}


@pytest.mark.parametrize("package", sorted(FLOORS))
def test_every_sub_package_is_on_a_floor(package: str) -> None:
    subs = {p.name for p in folder(package).iterdir() if (p / "__init__.py").is_file()}
    assert subs <= set().union(*FLOORS[package])


def _is_module(dotted: str) -> bool:
    path = ROOT.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def test_the_walker_sees_imports_inside_functions(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from resolvers.schema import x\n    import pyspark.sql\n")
    assert tops(imports(module)) == {"resolvers", "pyspark"}


def test_a_floor_that_imports_one_above_it_is_found(tmp_path: Path) -> None:
    assert floor_of("gateway", "gateway.model.queries") < floor_of("gateway", "gateway.node")
    assert floor_of("resolvers", "resolvers.schema.stores") < floor_of(
        "resolvers", "resolvers.transport.live"
    )
    assert floor_of("gateway.storage", "gateway.storage.memory.scans") < floor_of(
        "gateway.storage", "gateway.storage.execution"
    )
