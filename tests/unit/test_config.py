"""The project file: every mistake is refused with a message naming the entry."""

from __future__ import annotations

import copy
import json
import os
import re
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

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
        (("partitions = 3", "partitions = 0"), "partitions must be 1 to 10000, not 0"),
        (("partitions = 3", "partitions = 100000000"), "partitions must be 1 to 10000"),
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
        # an address its peers can call, and folders of the node's own
        *(
            (('address = "127.0.0.1:1"', f'address = "{address}"'), "address must be host:port")
            for address in [
                "127.0.0.1:0",
                "127.0.0.1:65536",
                "127.0.0.1:\uff11",  # a full-width digit: str.isdigit says yes
                "http://127.0.0.1:1",
                "local host:1",
                ":1",
            ]
        ),
        (('data_dir = "n1"', 'data_dir = ""'), "overlaps [snapshots] store"),
        (('data_dir = "n1"', 'data_dir = "snapshots/n1/.."'), "overlaps [snapshots] store"),
        (('data_dir = "n1"', 'data_dir = "log/n1"'), "overlaps [log] dir"),
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
    for second, entry in (
        ('id = "n2"\naddress = "127.0.0.1:1"\ndata_dir = "n2"', "node address"),
        ('id = "n2"\naddress = "x:2"\ndata_dir = "n1"', "node data_dir"),
    ):
        twice = BASE.replace("[[topics]]", f"[[cluster.nodes]]\n{second}\n[[topics]]", 1)
        with pytest.raises(ConfigError, match=f"{entry} .* is declared twice"):
            load(write(tmp_path, twice))
    for address in ["[::1]:8101", "node-1.internal:8101", "stategate_node1:8101"]:
        load(write(tmp_path, BASE.replace("127.0.0.1:1", address)))


JOINED = (
    BASE
    + """
[[topics]]
name = "fares"
key = "string"
value = { fare = "double", zone = "int" }
[[stores]]
name = "fareTable"
kind = "table"
topic = "fares"
global = true
[[stores]]
name = "latest"
kind = "table"
topic = "t"
joins = { JOIN }
"""
)


def test_a_join_reads_a_global_store_by_a_field_of_its_key_type(tmp_path: Path) -> None:
    project = load(write(tmp_path, JOINED.replace("JOIN", 'fare = "fareTable(key)"')))
    (join,) = project.stores["latest"].joins
    assert (join.name, join.store, join.field) == ("fare", "fareTable", "key")
    assert project.global_stores == (project.stores["fareTable"],)


@pytest.mark.parametrize(
    ("join", "message"),
    [
        ('fare = "fareTable"', "is not store(field)"),
        ('fare = "nothing(key)"', "unknown store 'nothing'"),
        ('fare = "totals(key)"', "'totals' must be a global table or aggregate store"),
        ('fare = "fareTable(price)"', "'price' is double but 'fareTable' is keyed by string"),
        ('fare = "fareTable(nothing)"', "'latest' has no field 'nothing'"),
        ('price = "fareTable(key)"', "store 'latest' field 'price' is declared twice"),
    ],
)
def test_a_join_that_cannot_be_read_is_refused(tmp_path: Path, join: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        load(write(tmp_path, JOINED.replace("JOIN", join)))


def test_a_global_store_declares_no_joins(tmp_path: Path) -> None:
    text = JOINED.replace("JOIN", 'fare = "fareTable(key)"').replace(
        "global = true", 'global = true\njoins = { again = "fareTable(key)" }'
    )
    with pytest.raises(ConfigError, match="a global store declares no joins"):
        load(write(tmp_path, text))


def test_a_versioned_table_keeps_its_history_and_no_other_store_can(tmp_path: Path) -> None:
    text = JOINED.replace("JOIN", 'fare = "fareTable(key)"')
    versioned = load(write(tmp_path, text.replace("joins =", 'history = "7d"\njoins =')))
    store = versioned.stores["latest"]
    assert store.versioned and store.history_ms == 7 * 86_400_000
    assert not versioned.stores["fareTable"].versioned
    for wrong, message in (
        ('history = "7 days"', "duration '7 days' must look like"),
        ('history = "0h"', "duration '0h' must look like"),
        ('history = "90d\\n"', "duration '90d\\n' must look like"),  # one line, whole
        ('history = "36500d"', None),
        ('history = "36501d"', "duration '36501d' is past a century"),
        ('history = "\uff19\uff10d"', "must look like"),  # full-width digits: not ASCII
        ('history = "99999999999999999999d"', "is past a century"),
    ):
        if message is None:
            load(write(tmp_path, text.replace("joins =", f"{wrong}\njoins =")))
            continue
        with pytest.raises(ConfigError, match=re.escape(message)):
            load(write(tmp_path, text.replace("joins =", f"{wrong}\njoins =")))
    aggregate = BASE.replace('topic = "t"\naggregates', 'topic = "t"\nhistory = "1h"\naggregates')
    with pytest.raises(ConfigError, match="history keeps the versions of a table store's keys"):
        load(write(tmp_path, aggregate))


def test_a_versioned_stores_fields_must_not_clash(tmp_path: Path) -> None:
    text = (
        JOINED.replace("JOIN", 'fare = "fareTable(key)"')
        .replace('name = "fareTable"', 'name = "latestHistory"')
        .replace('"fareTable(key)"', '"latestHistory(key)"')
    )
    load(write(tmp_path, text))
    with pytest.raises(ConfigError, match="its field 'latestHistory' is"):
        load(write(tmp_path, text.replace("joins =", 'history = "1d"\njoins =')))


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


# Every table and array of the file, with optional entries given: the mutations below drop,
# retype or add to each entry of it in turn.
RICH: dict[str, Any] = {
    "log": {"dir": "log"},
    "snapshots": {"store": "snapshots", "url": "s3://bucket/prefix"},
    "pages": {"dir": "pages"},
    "cluster": {
        "partitions": 3,
        "replicas": 2,
        "secret": "s",
        "secret_env": "STATEGATE_TEST_NEVER_SET",
        "nodes": [
            {"id": "n1", "address": "127.0.0.1:1", "data_dir": "n1"},
            {"id": "n2", "address": "127.0.0.1:2", "data_dir": "n2"},
        ],
    },
    "topics": [
        {"name": "bookings", "key": "string", "value": {"price": "double", "trip": "string"}},
        {"name": "trains", "key": "int", "value": {"delay": "int"}},
    ],
    "stores": [
        {"name": "latest", "kind": "table", "topic": "trains"},
        {
            "name": "totals",
            "kind": "aggregate",
            "topic": "bookings",
            "aggregates": {"n": "count", "revenue": "sum(price)"},
            "joins": {"fare": "fares(key)"},
        },
        {
            "name": "hourly",
            "kind": "window",
            "topic": "bookings",
            "size": "1h",
            "advance": "30m",
            "aggregates": {"mean": "avg(price)"},
        },
        {"name": "fares", "kind": "table", "topic": "bookings", "global": True},
    ],
    "settings": {"default_page_size": 10, "internal_timeout_s": 1.5, "cors_origins": ["*"]},
}
Path_ = tuple[str | int, ...]
# Dropping these is refused, with a message that says this; any other entry is optional.
REQUIRED: dict[Path_, str] = {
    ("cluster",): "declare at least one [[cluster.nodes]] entry",
    ("cluster", "secret"): "set secret",
    ("cluster", "nodes"): "declare at least one [[cluster.nodes]] entry",
    ("topics",): "store 'latest': unknown topic 'trains'",
    ("stores",): "declare at least one [[stores]] entry",
    **{("cluster", "nodes", i, key): f"{key} is missing" for i in (0, 1)
       for key in ("id", "address", "data_dir")},
    **{("topics", i, "name"): f"[[topics]] entry {i + 1}: name is missing" for i in (0, 1)},
    ("topics", 0, "value"): "no field 'price' in the topic",
    ("topics", 0, "value", "price"): "no field 'price' in the topic",
    **{("stores", i, key): f"{key} is missing" for i in (0, 1, 2, 3)
       for key in ("name", "kind", "topic")},
    ("stores", 3): "store 'totals' join 'fare': unknown store 'fares'",
    ("stores", 3, "name"): "[[stores]] entry 4: name is missing",
    ("stores", 3, "global"): "'fares' must be a global table or aggregate store",
    ("stores", 1, "aggregates"): "store 'totals': aggregates is missing",
    ("stores", 2, "aggregates"): "store 'hourly': aggregates is missing",
    ("stores", 2, "size"): "store 'hourly': size is missing",
}  # fmt: skip
MAPS = {"value", "aggregates", "joins"}  # tables whose keys are declared names, not entries


def as_toml(value: Any) -> str:
    """A value as TOML inline syntax (strings as JSON writes them, which TOML reads)."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {as_toml(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(as_toml(v) for v in value) + "]"
    return json.dumps(value)


def paths(value: Any, at: Path_ = ()) -> Iterator[Path_]:
    """Every entry's path below `value`: table keys and array indexes."""
    items = value.items() if isinstance(value, dict) else enumerate(value)
    for key, item in items:
        yield (*at, key)
        if isinstance(item, dict | list):
            yield from paths(item, (*at, key))


def dig(value: Any, path: Path_) -> Any:
    for key in path:
        value = value[key]
    return value


def changed(path: Path_, change: Callable[[Any, str | int], None]) -> dict[str, Any]:
    project = copy.deepcopy(RICH)
    change(dig(project, path[:-1]), path[-1])
    return project


def wrong_type(value: Any) -> Any:
    return "3" if isinstance(value, int | float) else 3


def named(path: Path_) -> str:
    """What a message about the entry at `path` must name: its key (with its table's, in a
    table of declared names), or its array's."""
    if len(path) > 1 and path[-2] in MAPS:
        return f"{path[-2]}.{path[-1]}"
    return str(next(key for key in reversed(path) if isinstance(key, str)))


def refusal(tmp_path: Path, project: dict[str, Any]) -> str | None:
    """None if the project loads, else its one-line message (any other exception fails)."""
    (tmp_path / "pages").mkdir(exist_ok=True)
    text = "".join(f"{key} = {as_toml(value)}\n" for key, value in project.items())
    path = write(tmp_path, text)
    try:
        load(path)
    except ConfigError as exc:
        message = str(exc)
        assert message.startswith(f"{path}: ") and "\n" not in message, message
        return message
    return None


def test_the_rich_project_loads(tmp_path: Path) -> None:
    assert refusal(tmp_path, RICH) is None


@pytest.mark.parametrize("path", list(paths(RICH)), ids=str)
def test_dropping_an_entry_is_refused_only_if_it_is_required(tmp_path: Path, path: Path_) -> None:
    message = refusal(tmp_path, changed(path, lambda parent, key: parent.pop(key)))
    if path in REQUIRED:
        assert message is not None and REQUIRED[path] in message, message
    elif not isinstance(path[-1], int):  # another entry of an array goes with its references
        assert message is None


@pytest.mark.parametrize("path", list(paths(RICH)), ids=str)
def test_an_entry_of_the_wrong_type_is_refused_by_name(tmp_path: Path, path: Path_) -> None:
    def retype(parent: Any, key: str | int) -> None:
        parent[key] = wrong_type(parent[key])

    message = refusal(tmp_path, changed(path, retype))
    assert message is not None and named(path) in message, message
    assert "must be" in message, message


TABLES = [(), *(p for p in paths(RICH) if isinstance(dig(RICH, p), dict) and p[-1] not in MAPS)]


@pytest.mark.parametrize("path", TABLES, ids=str)
def test_an_unknown_entry_is_refused_by_name(tmp_path: Path, path: Path_) -> None:
    project = copy.deepcopy(RICH)
    dig(project, path)["bogus"] = 1
    message = refusal(tmp_path, project)
    assert message is not None and ("'bogus'" in message or "settings.bogus" in message)


def test_an_unknown_entry_is_refused_with_the_closest_known_one(tmp_path: Path) -> None:
    project = copy.deepcopy(RICH)
    project["cluster"]["partitons"] = project["cluster"].pop("partitions")
    project["snapshot"] = project.pop("snapshots")
    message = refusal(tmp_path, project)
    assert message is not None
    assert message.endswith("unknown entry 'snapshot' (did you mean 'snapshots'?)")
    del project["snapshot"]
    message = refusal(tmp_path, project)
    assert message is not None
    assert message.endswith("[cluster]: unknown entry 'partitons' (did you mean 'partitions'?)")


@pytest.mark.parametrize("kind", ["table", "aggregate"])
def test_an_entry_another_kind_of_store_takes_is_refused(tmp_path: Path, kind: str) -> None:
    project = copy.deepcopy(RICH)
    project["stores"][2]["kind"] = kind
    message = refusal(tmp_path, project)
    assert message is not None
    assert message.endswith(f"store 'hourly': {kind} stores have no 'size'")


@pytest.mark.parametrize(
    ("command", "change", "message"),
    [
        ("schema", ("partitions = 3", 'partitions = "3"'), "[cluster]: partitions must be an"),
        ("node --node n1", ('address = "127.0.0.1:1"\n', ""), "node 'n1': address is missing"),
        ("operations", ("[cluster]", "[sttings]\n[cluster]"), "unknown entry 'sttings'"),
        ("produce --topic t", ("[cluster]", "[cluster"), "line 2"),
    ],
)
def test_the_cli_prints_a_config_error_as_one_line_and_exits_2(
    tmp_path: Path, command: str, change: tuple[str, str], message: str
) -> None:
    """Every command that reads a project, each with another kind of mistake."""
    path = write(tmp_path, BASE.replace(*change, 1))
    argv = [sys.executable, "-m", "stategate.cli", *command.split(), "--config", str(path)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith(f"stategate: {path}: ") and message in done.stderr
    assert done.stderr.count("\n") == 1, done.stderr


def test_a_metrics_address_the_pipeline_cannot_serve_is_one_line(tmp_path: Path) -> None:
    path = write(tmp_path, BASE)
    argv = [sys.executable, "-m", "stategate.cli", "pipeline", "--config", str(path), "--follow"]
    for address in ["notaport", "127.0.0.1:99999", "127.0.0.1:0"]:
        done = subprocess.run([*argv, "--metrics", address], capture_output=True, text=True)
        assert done.returncode == 2 and "is not HOST:PORT" in done.stderr, done.stderr
        assert "Traceback" not in done.stderr
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        done = subprocess.run([*argv, "--metrics", address], capture_output=True, text=True)
    said = [line for line in done.stderr.splitlines() if line.startswith("stategate:")]
    assert done.returncode == 2 and len(said) == 1, done.stderr
    assert said[0].startswith(f"stategate: cannot listen on {address}: "), said
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("wait", ["-5", "nan", "inf", "soon"])
def test_a_wait_that_is_no_number_of_seconds_is_refused(tmp_path: Path, wait: str) -> None:
    path = write(tmp_path, BASE)
    argv = [sys.executable, "-m", "stategate.cli", "apply", "--config", str(path), "--dry-run"]
    done = subprocess.run([*argv, "--wait", wait], capture_output=True, text=True)
    assert done.returncode == 2 and "is not a number of seconds (0 or more)" in done.stderr


def test_only_the_commands_that_call_or_serve_nodes_need_the_cluster_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The secret guards the internal endpoints, and the pages are what a node serves:
    printing the schema or the operations and appending records use neither, so a machine
    without them runs them."""
    from stategate.cli import main

    text = BASE.replace('secret = "s"', 'secret_env = "STATEGATE_TEST_NEVER_SET"')
    text += '[pages]\ndir = "not made"\n'
    path = write(tmp_path, text + '[settings]\noperations = "ops.graphql"\n')
    (tmp_path / "ops.graphql").write_text('query Totals { totals(key: "a") { key } }\n')
    monkeypatch.delenv("STATEGATE_TEST_NEVER_SET", raising=False)
    assert main(["schema", "--config", str(path)]) == 0
    assert "type Query" in capsys.readouterr().out
    assert main(["operations", "--config", str(path)]) == 0
    assert list(json.loads(capsys.readouterr().out)) == ["Totals"]
    with pytest.raises(ConfigError, match="set secret"):
        load(path)
    assert load(path, serving=False).cluster.secret == ""
    assert main(["node", "--node", "n1", "--config", str(path)]) == 2
    assert "set secret, or the environment variable" in capsys.readouterr().err
    monkeypatch.setenv("STATEGATE_TEST_NEVER_SET", "s")
    assert main(["node", "--node", "n1", "--config", str(path)]) == 2
    assert "[pages]: dir must be a folder" in capsys.readouterr().err


def test_a_kafka_table_names_the_cluster_and_passes_client_properties(tmp_path: Path) -> None:
    text = BASE + (
        '[kafka]\nbootstrap = "b1:9092,b2:9093"\nprefix = "prod."\n'
        '[kafka.client]\n"security.protocol" = "SASL_SSL"\n'
    )
    kafka = load(write(tmp_path, text)).kafka
    assert kafka is not None and kafka.bootstrap == "b1:9092,b2:9093"
    assert kafka.group == "stategate" and kafka.topic("orders") == "prod.orders"
    assert kafka.client == {"security.protocol": "SASL_SSL"}
    assert load(write(tmp_path, BASE)).kafka is None  # the file log


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ('[kafka]\nbootstrap = "b1"\n', "bootstrap must be host:port[,host:port...], not 'b1'"),
        ('[kafka]\nprefix = "p."\n', "[kafka]: bootstrap is missing"),
        ('[kafka]\nbootstrap = "b:1"\nbrokers = 3\n', "[kafka]: unknown entry 'brokers'"),
        ('[kafka]\nbootstrap = "b:1"\n[kafka.client]\nacks = 1\n', "kafka]: client.acks must be"),
        ('[settings]\nlog_end = "log"\n[kafka]\nbootstrap = "b:1"\n', "log_end = 'published'"),
    ],
)
def test_a_kafka_table_that_cannot_be_is_one_line(tmp_path: Path, table: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        load(write(tmp_path, BASE + table))


@pytest.mark.parametrize("url", ["http://10.0.0.5:8100", "https://store.example", "gs://b/p"])
def test_a_snapshot_url_is_a_folder_or_a_bucket_on_the_s3_api(tmp_path: Path, url: str) -> None:
    with pytest.raises(ConfigError, match=r"a folder, or s3://bucket/prefix"):
        load(write(tmp_path, f'[snapshots]\nurl = "{url}"\n{BASE}'))
    bucket = load(write(tmp_path, f'[snapshots]\nurl = "s3://b/p/"\n{BASE}'))
    assert bucket.snapshot_url == bucket.object_store == "s3://b/p"


def test_a_node_joining_from_the_command_line_is_held_to_the_files_rules(tmp_path: Path) -> None:
    """`stategate node --address` (an elastic cluster's new node) is checked as a node of the
    file is: an address and a data_dir of its own, a snapshots folder apart from the store."""
    from contracts.project import apart, node_entry

    project = load(write(tmp_path, BASE))
    cluster = project.cluster

    def joining(address: str, data_dir: str) -> None:
        raw = {"id": "n9", "address": address, "data_dir": data_dir}
        node = node_entry(raw, cluster, tmp_path)
        apart(project, node)
        cluster.with_node(node)

    joining("127.0.0.1:9", "n9")
    with pytest.raises(ConfigError, match="address 127.0.0.1:1 is taken by node 'n1'"):
        joining("127.0.0.1:1", "n9")
    with pytest.raises(ConfigError, match="is taken by node 'n1'"):
        joining("127.0.0.1:9", "n1")
    with pytest.raises(ConfigError, match="overlaps \\[snapshots\\] store"):
        joining("127.0.0.1:9", ".")


def test_tls_files_the_cli_and_the_pipeline_cannot_load_are_one_line(tmp_path: Path) -> None:
    """A client certificate missing, or a CA that is not PEM: `stategate cluster status` and
    the pipeline say so in one line naming the files (the pipeline before it publishes)."""
    from contracts.tls import CLIENT
    from tests.projects import write_project

    path = write_project(tmp_path, [1, 2, 3], tls=True)
    tls = load(path).tls
    assert tls is not None
    stategate = [sys.executable, "-m", "stategate.cli"]
    commands = [["cluster", "status"], ["pipeline"]]
    for cert in tls.files(CLIENT):
        cert.unlink()
    for command in commands:
        done = subprocess.run([*stategate, *command, "--config", str(path)], capture_output=True,
                              text=True, timeout=60)  # fmt: skip
        assert done.returncode == 2, done.stderr
        assert done.stderr.startswith("stategate: [tls]: the CA ") and "client's" in done.stderr
        assert done.stderr.count("\n") == 1, done.stderr
    assert not (tmp_path / "snapshots" / "manifest.json").exists()
    tls.ca.write_text("not a certificate\n")
    done = subprocess.run([*stategate, "cluster", "status", "--config", str(path)],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr


def test_a_ca_bundle_the_s3_store_cannot_read_is_one_line(tmp_path: Path) -> None:
    """AWS_CA_BUNDLE missing or not PEM (README: Across machines): the node and the pipeline
    say so in one line, before they ask the store anything."""
    from stategate.launcher import free_ports
    from tests.projects import write_project

    path = write_project(tmp_path, free_ports(1), replicas=1, snapshot_url="s3://bucket/prefix")
    not_pem = tmp_path / "ca.pem"
    not_pem.write_text("not a certificate\n")
    stategate = [sys.executable, "-m", "stategate.cli"]
    for bundle in (tmp_path / "missing.pem", not_pem):
        environment = {**os.environ, "AWS_CA_BUNDLE": str(bundle)}
        for command in (["pipeline"], ["node", "--node", "node1"]):
            done = subprocess.run([*stategate, *command, "--config", str(path)], env=environment,
                                  capture_output=True, text=True, timeout=60)  # fmt: skip
            said = [line for line in done.stderr.splitlines() if line.startswith("stategate:")]
            assert done.returncode == 2 and len(said) == 1, done.stderr
            assert said[0].startswith("stategate: the snapshot store s3://bucket/prefix: "), said
            assert "Traceback" not in done.stderr
