"""One word, one thing: no two modules of the product share a file name, and no two share the
name of a public top-level class (issue 48), so that a name found in a traceback, an import
or a review says which of them it is."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = (
    "contracts",
    "topics",
    "snapshot_store",
    "gateway",
    "resolvers",
    "spark_pipeline",
    "stategate",
)


def modules() -> list[Path]:
    return sorted(m for package in PRODUCT for m in (ROOT / package).rglob("*.py"))


def test_no_two_modules_share_a_file_name() -> None:
    found = defaultdict(list)
    for module in modules():
        if module.name != "__init__.py":
            found[module.name].append(str(module.relative_to(ROOT)))
    assert {name: paths for name, paths in found.items() if len(paths) > 1} == {}


def test_no_two_modules_define_a_public_class_of_one_name() -> None:
    found = defaultdict(list)
    for module in modules():
        for node in ast.parse(module.read_text()).body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                found[node.name].append(str(module.relative_to(ROOT)))
    assert {name: paths for name, paths in found.items() if len(paths) > 1} == {}
