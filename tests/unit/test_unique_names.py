"""One word, one thing: no two modules of the product share a file name, and no two share the
name of a public top-level class (issue 48), so that a name found in a traceback, an import
or a review says which of them it is."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("contracts", "topics", "gateway", "resolvers", "spark_pipeline", "stategate")
# Names issue 49's Kafka work gave two modules, to be renamed with it: topics/kafka.py and
# stategate/kafka.py (the broker the tests run), topics/records.py and contracts/records.py.
PENDING = {"kafka.py", "records.py"}


def modules() -> list[Path]:
    return sorted(m for package in PRODUCT for m in (ROOT / package).rglob("*.py"))


def test_no_two_modules_share_a_file_name() -> None:
    found = defaultdict(list)
    for module in modules():
        if module.name != "__init__.py" and module.name not in PENDING:
            found[module.name].append(str(module.relative_to(ROOT)))
    assert {name: paths for name, paths in found.items() if len(paths) > 1} == {}


def test_no_two_modules_define_a_public_class_of_one_name() -> None:
    found = defaultdict(list)
    for module in modules():
        for node in ast.parse(module.read_text()).body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                found[node.name].append(str(module.relative_to(ROOT)))
    assert {name: paths for name, paths in found.items() if len(paths) > 1} == {}
