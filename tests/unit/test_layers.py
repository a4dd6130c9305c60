"""The packages import in one direction; a test that walks every import keeps it so.

contracts        the shared formats and vocabulary: imports none of ours
gateway          a node's query service, routing, storage: contracts
spark_pipeline   the pipeline: contracts
resolvers        the GraphQL schema over the query service: gateway, contracts
stategate        composition (CLI, demo, the ASGI app): any of them
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OURS = {"contracts", "gateway", "spark_pipeline", "resolvers", "stategate"}
ALLOWED = {
    "contracts": {"contracts"},
    "gateway": {"contracts", "gateway"},
    "spark_pipeline": {"contracts", "spark_pipeline"},
    "resolvers": {"contracts", "gateway", "resolvers"},
    "stategate": OURS,
}
# Heavy engines stay where they belong: a serving node never loads Spark or Strawberry's
# schema machinery below the resolvers.
FORBIDDEN = {
    "contracts": {"pyspark", "strawberry", "starlette", "httpx"},
    "gateway": {"pyspark", "strawberry"},
    "resolvers": {"pyspark"},
}


def imports(path: Path) -> set[str]:
    """The top-level packages a module imports, at any depth in the file."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_packages_import_only_the_layers_below_them(package: str) -> None:
    modules = sorted((ROOT / package).rglob("*.py"))
    assert modules, f"no modules in {package}"
    wrong = {
        str(m.relative_to(ROOT)): sorted(
            (imports(m) & OURS) - ALLOWED[package] | imports(m) & FORBIDDEN.get(package, set())
        )
        for m in modules
    }
    assert {m: names for m, names in wrong.items() if names} == {}


def test_the_walker_sees_imports_inside_functions(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from resolvers.schema import sdl\n    import pyspark.sql\n")
    assert imports(module) == {"resolvers", "pyspark"}
