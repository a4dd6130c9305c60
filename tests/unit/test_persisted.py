"""Persisted operations without a node: the hash a request names its document by, the
registry of an operations file and its canonical texts, and what a request resolves to, with
and without the allow-list (resolvers/transport/requests.py, resolvers/execution/persisted.py)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import orjson
import pytest
from graphql import parse, print_ast

from contracts import project as projects
from contracts.project import ConfigError
from contracts.settings import Settings, SettingsError
from resolvers.execution.operations import Operations, Refused
from resolvers.execution.persisted import MAX_REMEMBERED_CHARS, Source, canonical
from resolvers.schema.build import build_schema
from resolvers.transport.requests import TransportError, persisted_hash, read_get, read_post
from tests.projects import write_project

OPERATIONS = """
# what a client asks
query Train($k: Int!) {
  trainStatus(key: $k) { ...Status }
}

fragment Status on TrainStatusLookup { key record { ...Where delay } }
fragment Where on TrainStatus { station }

subscription Totals($k: String!) { customerTotals(key: $k) { key record { bookings } } }
"""
# Train's canonical text: the operation, then its fragments by name, as print_ast prints them
TRAIN = (
    "query Train($k: Int!) {\n  trainStatus(key: $k) {\n    ...Status\n  }\n}\n\n"
    "fragment Status on TrainStatusLookup {\n  key\n  record {\n    ...Where\n    delay\n  }\n}"
    "\n\nfragment Where on TrainStatus {\n  station\n}"
)
# The same operation as a client may send it: other whitespace, commas, comments, order.
TRAIN_REFORMATTED = (
    "fragment Where on TrainStatus{station}\n"
    "query Train ( $k : Int! ) { trainStatus ( key : $k ) , { ...Status } } # hi\n"
    "fragment Status on TrainStatusLookup{key,record{...Where,delay}}"
)
OTHER = "query Other { trainStatus(key: 1) { key } }"


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def apq(hash: str) -> dict[str, object]:
    return {"persistedQuery": {"version": 1, "sha256Hash": hash}}


@pytest.fixture
def project_path(tmp_path: Path) -> Path:
    (tmp_path / "ops.graphql").write_text(OPERATIONS)
    return write_project(tmp_path, [1, 2, 3], settings='operations = "ops.graphql"')


def operations(project_path: Path, **settings: object) -> Operations:
    project = projects.load(project_path)
    configured = Settings(**{"operations": "ops.graphql", **settings})  # type: ignore[arg-type]
    return Operations(build_schema(project), configured, project.operations_file)


def refused_code(call: object) -> tuple[str, int]:
    assert callable(call)
    with pytest.raises(Refused) as caught:
        call()
    return caught.value.errors[0]["extensions"]["code"], caught.value.status


# --- the hash a request names ------------------------------------------------------------


def test_a_request_without_a_hash_has_none() -> None:
    assert persisted_hash(None, None, "{ a }") is None
    assert persisted_hash({"other": 1, "persistedQuery": None}, None, "{ a }") is None


def test_the_hash_is_read_from_either_place_and_lower_cased() -> None:
    hash = sha("{ a }")
    assert persisted_hash(apq(hash.upper()), None, None) == hash
    assert persisted_hash(None, f"sha256:{hash}", None) == hash
    assert persisted_hash(apq(hash), f"sha256:{hash}", "{ a }") == hash


@pytest.mark.parametrize(
    ("extensions", "document_id", "code", "words"),
    [
        ({"persistedQuery": "x"}, None, "BAD_REQUEST", "must be an object"),
        ({"persistedQuery": {"version": 2, "sha256Hash": "a" * 64}}, None, "BAD_REQUEST", "1"),
        ({"persistedQuery": {"version": True, "sha256Hash": "a" * 64}}, None, "BAD_REQUEST", "1"),
        ({"persistedQuery": {"sha256Hash": "a" * 64}}, None, "BAD_REQUEST", "version"),
        ({"persistedQuery": {"version": 1}}, None, "BAD_REQUEST", "64 hexadecimal"),
        ({"persistedQuery": {"version": 1, "sha256Hash": "g" * 64}}, None, "BAD_REQUEST", "64"),
        ({"persistedQuery": {"version": 1, "sha256Hash": 5}}, None, "BAD_REQUEST", "64"),
        (None, "a" * 64, "BAD_REQUEST", "sha256:"),
        (None, "sha256:" + "A" * 64, "BAD_REQUEST", "lower-case"),
        (None, 7, "BAD_REQUEST", "sha256:"),
        (apq("a" * 64), "sha256:" + "b" * 64, "BAD_REQUEST", "other documents"),
        (apq("a" * 64), None, "PERSISTED_QUERY_HASH_MISMATCH", sha("{ a }")),
    ],
)
def test_a_wrong_hash_is_a_bad_request(
    extensions: object, document_id: object, code: str, words: str
) -> None:
    with pytest.raises(TransportError) as caught:
        persisted_hash(extensions, document_id, "{ a }")
    assert (caught.value.status, caught.value.code) == (400, code)
    assert words in caught.value.message


def test_a_request_may_send_its_hash_alone_over_post_and_get() -> None:
    hash = sha("{ a }")
    body = orjson.dumps({"extensions": apq(hash), "operationName": "A"})
    posted = read_post("application/json", body, 10)
    assert not isinstance(posted, list)
    assert (posted.query, posted.hash, posted.operation_name) == (None, hash, "A")
    got = read_get({"extensions": orjson.dumps(apq(hash)).decode()})
    assert (got.query, got.hash) == (None, hash)
    assert read_get({"documentId": f"sha256:{hash}"}).hash == hash


def test_a_request_with_neither_query_nor_hash_is_a_bad_request() -> None:
    with pytest.raises(TransportError) as caught:
        read_post("application/json", b'[{"query": "{ a }"}, {"variables": {}}]', 10)
    assert caught.value.code == "BAD_REQUEST"
    assert caught.value.message.startswith("operation 1 of the batch: the request has no query")


# --- the registry ------------------------------------------------------------------------


def test_each_operation_is_registered_by_the_hash_of_its_canonical_text(
    project_path: Path,
) -> None:
    registry = operations(project_path).persisted.registry
    assert [(op.name, op.kind.value) for op in registry.operations] == [
        ("Train", "query"),
        ("Totals", "subscription"),
    ]
    train = registry.operations[0]
    assert train.text == TRAIN and train.hash == sha(TRAIN)
    document = parse(TRAIN_REFORMATTED)
    picked = [d for d in document.definitions if getattr(d, "operation", None)][0]
    assert canonical(document, picked) == TRAIN  # type: ignore[arg-type]
    assert print_ast(parse(TRAIN)) == TRAIN  # the canonical text prints as itself


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("query A { nope }", "operation 'A': Cannot query field 'nope' on type 'Query'."),
        ("query A { trainStatus(key: 1) { key } } query B($k: Int!) { trainStatus(key: $k) }",
         "operation 'B': Field 'trainStatus' of type"),
        ("query A { trainStatus(key: 1) { ...F } }", "operation 'A': Unknown fragment 'F'."),
        ("query A { trainStatus(key: 1) { key }", "Syntax Error"),
        ("{ stores { name } }", "line 1: an operation without a name"),
        ("query A { stores { name } } query A { stores { kind } }", "'A' is defined twice"),
        ("fragment F on Query { stores { name } } fragment F on Query { cluster { replicas } }"
         " query A { ...F }", "fragment 'F' is defined twice"),
        ("type T { a: Int }", "only operations and fragments"),
        ("# nothing", "Syntax Error"),
        ("fragment F on Query { stores { name } }", "no operation to register"),
    ],
)  # fmt: skip
def test_a_bad_operations_file_is_one_line_naming_the_file(
    project_path: Path, text: str, words: str
) -> None:
    (project_path.parent / "ops.graphql").write_text(text)
    with pytest.raises(ConfigError) as caught:
        operations(project_path)
    message = str(caught.value)
    assert message.startswith(f"{project_path.parent / 'ops.graphql'}: ") and words in message
    assert "\n" not in message


def test_a_missing_operations_file_is_named(project_path: Path) -> None:
    (project_path.parent / "ops.graphql").unlink()
    with pytest.raises(ConfigError, match=r"ops.graphql: No such file .*settings.operations"):
        operations(project_path)


def test_introspection_off_refuses_a_registered_introspection(project_path: Path) -> None:
    (project_path.parent / "ops.graphql").write_text("query Schema { __schema { types { name } } }")
    assert operations(project_path).persisted.registry.operations
    with pytest.raises(ConfigError, match="operation 'Schema': GraphQL introspection"):
        operations(project_path, introspection=False)


def test_the_allow_list_needs_an_operations_file() -> None:
    with pytest.raises(SettingsError, match="settings.allow_list needs settings.operations"):
        Settings(allow_list=True)


def test_the_operations_file_is_relative_to_the_project_file(project_path: Path) -> None:
    project = projects.load(project_path)
    assert project.operations_file == project_path.parent / "ops.graphql"
    assert projects.load(write_project(project_path.parent, [1, 2, 3])).operations_file is None


# --- automatic persisted queries ---------------------------------------------------------


def test_a_hash_alone_is_found_once_its_document_ran(project_path: Path) -> None:
    ops = operations(project_path)
    hash = sha(OTHER)
    assert refused_code(lambda: ops.resolve(None, None, hash)) == ("PERSISTED_QUERY_NOT_FOUND", 200)
    source = ops.resolve(OTHER, None, hash)
    assert source == Source(OTHER, None, hash)
    ops.prepare(source, None)
    assert ops.resolve(None, "Other", hash) == Source(OTHER, "Other", None)


def test_a_document_that_does_not_validate_is_not_remembered(project_path: Path) -> None:
    ops = operations(project_path)
    bad = "{ nope }"
    with pytest.raises(Refused):
        ops.prepare(ops.resolve(bad, None, sha(bad)), None)
    assert refused_code(lambda: ops.resolve(None, None, sha(bad)))[0] == "PERSISTED_QUERY_NOT_FOUND"


def test_the_remembered_documents_are_bounded(project_path: Path) -> None:
    ops = operations(project_path, persisted_query_cache_size=2)
    texts = [f"query Q{i} {{ trainStatus(key: {i}) {{ key }} }}" for i in range(3)]
    for text in texts:
        ops.prepare(ops.resolve(text, None, sha(text)), None)
    assert ops.resolve(None, None, sha(texts[1])).query == texts[1]  # the least recent: 2
    assert ops.resolve(None, None, sha(texts[2])).query == texts[2]
    assert refused_code(lambda: ops.resolve(None, None, sha(texts[0])))[1] == 200
    long = "query Long { stores { name } }" + " " * MAX_REMEMBERED_CHARS
    ops.prepare(ops.resolve(long, None, sha(long)), None)
    assert refused_code(lambda: ops.resolve(None, None, sha(long)))[1] == 200
    assert ops.resolve(None, None, sha(texts[2])).query == texts[2]  # nothing evicted for it


def test_a_registered_operation_runs_by_its_hash_on_any_node(project_path: Path) -> None:
    ops = operations(project_path)
    assert ops.resolve(None, None, sha(TRAIN)) == Source(TRAIN, "Train", None)
    assert ops.resolve(OTHER, None, None) == Source(OTHER, None, None)  # no allow-list


# --- the allow-list ----------------------------------------------------------------------


def test_the_allow_list_runs_registered_operations_only(project_path: Path) -> None:
    ops = operations(project_path, allow_list=True)
    train = Source(TRAIN, "Train", None)
    assert ops.resolve(None, None, sha(TRAIN)) == train
    assert ops.resolve(TRAIN, None, None) == train
    assert ops.resolve(TRAIN_REFORMATTED, None, None) == train
    assert ops.resolve(TRAIN_REFORMATTED, "Train", None) == train
    file_as_sent = OPERATIONS  # the whole file, naming the operation
    assert ops.resolve(file_as_sent, "Train", None) == train
    for text, name in [
        (OTHER, None),
        (TRAIN, "Totals"),
        (file_as_sent, None),
        (TRAIN.replace("delay", "delay\n    station"), None),
        ("{ nope", None),
        ("query Train($k: Int!) { trainStatus(key: $k) { ...Status } }", None),
    ]:
        with pytest.raises(Refused) as caught:
            ops.resolve(text, name, None)
        assert caught.value.errors[0]["extensions"]["code"] == "OPERATION_NOT_ALLOWED"
        assert (caught.value.status, caught.value.outcome) == (403, "not_allowed")


def test_the_allow_list_remembers_no_unregistered_hash(project_path: Path) -> None:
    ops = operations(project_path, allow_list=True)
    with pytest.raises(Refused):
        ops.resolve(OTHER, None, sha(OTHER))
    assert refused_code(lambda: ops.resolve(None, None, sha(OTHER)))[0] == (
        "PERSISTED_QUERY_NOT_FOUND"
    )


def test_a_clients_own_hash_of_a_registered_text_names_that_operation(project_path: Path) -> None:
    ops = operations(project_path, allow_list=True)
    mine = sha(TRAIN_REFORMATTED)
    assert refused_code(lambda: ops.resolve(None, None, mine))[0] == "PERSISTED_QUERY_NOT_FOUND"
    source = ops.resolve(TRAIN_REFORMATTED, None, mine)
    assert source == Source(TRAIN, "Train", mine)
    ops.prepare(source, {"k": 1})
    assert ops.resolve(None, None, mine) == Source(TRAIN, "Train", None)


def test_max_aliases_bounds_the_aliases_of_a_document_and_says_so(project_path: Path) -> None:
    ops = operations(project_path, max_aliases=2)
    two = "{ a: __typename b: __typename }"
    ops.prepare(ops.resolve(two, None), None)
    three = "{ a: __typename b: __typename c: __typename }"
    with pytest.raises(Refused) as refused:
        ops.prepare(ops.resolve(three, None), None)
    (error,) = refused.value.errors
    assert error["extensions"]["code"] == "GRAPHQL_VALIDATION_FAILED"
    assert "3 aliases" in error["message"] and "max_aliases, 2" in error["message"]
