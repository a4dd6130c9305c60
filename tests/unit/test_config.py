"""The project file: every mistake is refused with a message naming the entry."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from contracts.project import ConfigError, load

BASE = """
[cluster]
partitions = 3
secret = "s"
[[cluster.nodes]]
id = "n1"
address = "127.0.0.1:1"
data_dir = "n1"
[[topics]]
name = "t"
key = "string"
value = { price = "double" }
[[stores]]
name = "totals"
kind = "aggregate"
topic = "t"
aggregates = { n = "count", total = "sum(price)" }
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "stategate.toml"
    path.write_text(text)
    return path


def test_the_base_project_loads(tmp_path: Path) -> None:
    project = load(write(tmp_path, BASE))
    assert project.cluster.replica_map == {0: ("n1",), 1: ("n1",), 2: ("n1",)}
    assert project.stores["totals"].columns == {"n": "long", "total": "double"}


def test_an_average_is_stored_as_its_sum_and_count(tmp_path: Path) -> None:
    store = load(write(tmp_path, BASE.replace('"sum(price)"', '"avg(price)"'))).stores["totals"]
    assert store.columns == {"n": "long", "total": "double"}
    assert store.stored_columns == {"n": "long", "total_sum": "double", "total_n": "long"}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("partitions = 3", "partitions = 0"), "at least 1"),
        (
            ('value = { price = "double" }', 'value = { price = "double", Price = "int" }'),
            "declared twice",
        ),
        (('value = { price = "double" }', 'value = { key = "string" }'), "reserved"),
        (('total = "sum(price)"', 'Key = "sum(price)"'), "reserved"),
        (('total = "sum(price)"', 'total = "median(price)"'), "not count or f(field)"),
        (('value = { price = "double" }', 'value = { price = "string" }'), "numeric field"),
        (('total = "sum(price)"', 'total = "sum(nope)"'), "no field 'nope'"),
        (('key = "string"', 'key = "uuid"'), "key must be one of"),
        (('name = "totals"', 'name = "to-tals"'), "GraphQL-style name"),
        (('topic = "t"\naggregates', 'topic = "x"\naggregates'), "unknown topic"),
        (('secret = "s"', ""), "secret"),
    ],
)
def test_mistakes_are_refused(tmp_path: Path, change: tuple[str, str], message: str) -> None:
    old, new = change
    assert old in BASE
    with pytest.raises(ConfigError, match=re.escape(message)):
        load(write(tmp_path, BASE.replace(old, new, 1)))


def test_names_clash_ignoring_case(tmp_path: Path) -> None:
    twice = BASE + BASE[BASE.index("[[stores]]") :].replace('name = "totals"', 'name = "Totals"')
    with pytest.raises(ConfigError, match="declared twice"):
        load(write(tmp_path, twice))
    nodes = BASE.replace(
        "[[topics]]", '[[cluster.nodes]]\nid = "N1"\naddress = "x:2"\ndata_dir = "n2"\n[[topics]]'
    )
    with pytest.raises(ConfigError, match="node id"):
        load(write(tmp_path, nodes))


def test_window_durations(tmp_path: Path) -> None:
    window = BASE.replace(
        'kind = "aggregate"', 'kind = "window"\nsize = "{size}"\nadvance = "{advance}"'
    )
    ok = load(write(tmp_path, window.replace("{size}", "1h").replace("{advance}", "15m")))
    assert ok.stores["totals"].window_size_ms == 3_600_000
    assert ok.stores["totals"].window_advance_ms == 900_000
    for size, advance in [("0h", "0h"), ("1h", "7m"), ("1h", "2h"), ("soon", "1h")]:
        with pytest.raises(ConfigError):
            load(write(tmp_path, window.replace("{size}", size).replace("{advance}", advance)))
