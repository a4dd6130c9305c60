"""What the processes log, without running them: the JSON lines' fields, the one line a
client's error gets (never a traceback), the traceback a bug gets, and how a stopped process
ends (by its signal, in a child process)."""

from __future__ import annotations

import io
import json
import logging
import re
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest
from graphql import GraphQLError

from contracts.errors import GatewayError
from contracts.settings import Settings
from resolvers.execution import client_errors, results
from stategate import logs

RFC3339_MS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    """What the root logger writes once configured as a node's, in JSON."""
    stream = io.StringIO()
    before = logging.root.handlers[:], logging.root.level
    logs.configure("node7", Settings(log_format="json", log_level="debug"))
    handler = logging.root.handlers[0]
    assert isinstance(handler, logging.StreamHandler)
    handler.setStream(stream)
    yield stream
    logging.root.handlers[:], level = before
    logging.root.setLevel(level)


def lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_a_json_line_has_the_documented_fields(captured: io.StringIO) -> None:
    logging.getLogger("gateway.storage.delivery.sync").warning(
        "partition %s not updated: %s", 3, "gone"
    )
    (line,) = lines(captured)
    assert list(line) == ["ts", "level", "source", "logger", "message"]
    assert RFC3339_MS.match(str(line["ts"]))
    assert line["level"] == "WARNING" and line["source"] == "node7"
    assert line["logger"] == "gateway.storage.delivery.sync"
    assert line["message"] == "partition 3 not updated: gone"


def test_an_exception_is_one_field_of_one_line(captured: io.StringIO) -> None:
    try:
        raise ZeroDivisionError("boom")
    except ZeroDivisionError:
        logging.getLogger("resolvers.transport.endpoint").exception("answering failed")
    assert len(captured.getvalue().splitlines()) == 1
    (line,) = lines(captured)
    assert line["level"] == "ERROR" and line["message"] == "answering failed"
    exception = str(line["exception"])
    assert exception.startswith("Traceback") and "ZeroDivisionError: boom" in exception


def test_uvicorn_logs_through_the_same_handler(captured: io.StringIO) -> None:
    logging.getLogger("uvicorn.error").info("Started server process [%d]", 42)
    (line,) = lines(captured)
    assert (line["logger"], line["source"]) == ("uvicorn.error", "node7")


def test_uvicorns_line_per_websocket_connection_shows_at_debug_only(
    captured: io.StringIO,
) -> None:
    uvicorn = logging.getLogger("uvicorn.error")
    uvicorn.info('%s - "WebSocket %s" [accepted]', "127.0.0.1:5", "/graphql")
    uvicorn.info("connection open")
    (accepted, opened) = lines(captured)
    assert accepted["level"] == opened["level"] == "DEBUG"
    logging.root.setLevel(logging.INFO)
    uvicorn.info("connection closed")
    uvicorn.info("Shutting down")
    assert [line["message"] for line in lines(captured)[2:]] == ["Shutting down"]


def test_a_message_no_utf8_can_hold_is_still_one_json_line(captured: io.StringIO) -> None:
    # to the node's handler alone: pytest's own capture cannot carry the surrogate to xdist
    record = logging.LogRecord("x", logging.INFO, "", 0, "a lone surrogate: \ud800", (), None)
    logging.root.handlers[0].handle(record)
    (line,) = lines(captured)
    assert line["message"] == "a lone surrogate: \ud800"


def test_the_timestamp_is_utc_to_the_millisecond() -> None:
    assert logs.rfc3339(0.0) == "1970-01-01T00:00:00.000Z"
    assert logs.rfc3339(1_767_225_600.1239) == "2026-01-01T00:00:00.123Z"


def test_text_lines_name_the_source_and_the_logger() -> None:
    formatter = logging.root.handlers[0].formatter if logging.root.handlers else None
    logs.configure("pipeline", Settings())
    try:
        record = logging.LogRecord("spark_pipeline.job", logging.INFO, "", 0, "run done", (), None)
        text = logging.root.handlers[0].format(record)
        assert re.match(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} INFO pipeline ", text)
        assert text.endswith(" spark_pipeline.job: run done")
    finally:
        if formatter is not None:
            logging.root.handlers[0].setFormatter(formatter)


# --- a client's errors: one line each ------------------------------------------------------


def client_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "resolvers.execution.client_errors"]


def test_a_refused_operation_logs_one_line_with_code_operation_and_message(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    errors = [
        {"message": "Cannot query field 'nope'\non type 'Query'.", "extensions": {"code": "X"}},
        {"message": "another", "extensions": {"code": "Y"}},
    ]
    client_errors.refused(errors, "Dashboard", "http")
    (record,) = client_lines(caplog)
    assert record.levelno == logging.INFO and record.exc_info is None
    assert record.getMessage() == (
        "client error X operation=Dashboard via=http: "
        "Cannot query field 'nope' on type 'Query'. (and 1 more)"
    )


@pytest.mark.parametrize(
    ("code", "level"),
    [
        ("GRAPHQL_PARSE_FAILED", logging.INFO),
        ("COST_LIMIT_EXCEEDED", logging.INFO),
        ("BAD_REQUEST", logging.INFO),
        ("UNAUTHENTICATED", logging.WARNING),
        ("FORBIDDEN", logging.WARNING),
        ("DEADLINE_EXCEEDED", logging.WARNING),
        ("4403", logging.WARNING),
    ],
)
def test_the_level_says_whether_an_operator_may_have_to_act(
    caplog: pytest.LogCaptureFixture, code: str, level: int
) -> None:
    caplog.set_level(logging.INFO)
    client_errors.transport(code, "why")
    (record,) = client_lines(caplog)
    assert record.levelno == level
    assert record.getMessage() == f"client error {code} via=http: why"


def test_a_long_message_is_cut_and_the_line_stays_one_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    client_errors.transport("BAD_REQUEST", "x\r\n\u2028" * 500, "websocket")
    (record,) = client_lines(caplog)
    message = record.getMessage()
    assert len(message) < 300 and message.endswith("…")
    assert len(message.splitlines()) == 1


def test_errors_of_a_result_log_one_line_and_a_bug_logs_its_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    cursor = GraphQLError(
        "a cursor from another store", original_error=GatewayError("BAD_CURSOR", "x")
    )
    try:
        raise KeyError("a bug")
    except KeyError as exc:
        bug = GraphQLError("'a bug'", original_error=exc)
    client_errors.failed([bug, cursor], "Q", "http")
    (record,) = client_lines(caplog)
    assert (
        record.getMessage()
        == "client error BAD_CURSOR operation=Q via=http: a cursor from another store"
    )
    caplog.clear()
    assert results.coded(bug)["extensions"]["code"] == "INTERNAL_SERVER_ERROR"
    (error,) = caplog.records
    assert error.levelno == logging.ERROR and error.exc_info is not None
    assert error.exc_info[0] is KeyError
    caplog.clear()
    client_errors.failed([bug], None, "http")
    assert client_lines(caplog) == [], "a bug alone is not a client's error"


def test_a_result_without_errors_logs_nothing(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    client_errors.failed(None, "Q", "http")
    client_errors.failed([], "Q", "websocket")
    assert caplog.records == []


# --- stopping -------------------------------------------------------------------------------


STOPPED_BY = textwrap.dedent(
    """
    import os, signal, sys
    from stategate import stopping
    stop = stopping.StopRequest().install()
    cleaned = []
    stop.on_stop(lambda: cleaned.append("callback"))
    os.kill(os.getpid(), signal.{signal})
    os.kill(os.getpid(), signal.SIGTERM)  # a second one while stopping: ignored
    assert stop.event.is_set() and cleaned == ["callback"]
    print("cleaned up", flush=True)
    stop.exit()
    """
)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stopped_process_cleans_up_then_ends_by_its_signal(signum: signal.Signals) -> None:
    done = subprocess.run(
        [sys.executable, "-c", STOPPED_BY.format(signal=signum.name)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == -signum, done.stderr
    assert done.stdout == "cleaned up\n"


def test_an_access_failure_names_the_client_and_the_subject_and_no_other_line_does(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    who = client_errors.Who.at(("10.0.0.7", 51234), 'svc "report"\nx')
    client_errors.transport("UNAUTHENTICATED", "the bearer token is not valid", "http", who)
    client_errors.transport("4403", "Forbidden", "websocket", client_errors.Who.at(None, "s"))
    client_errors.transport("FORBIDDEN", "origin", "websocket", client_errors.Who.at(["::1", 80]))
    client_errors.transport("BAD_REQUEST", "not JSON", "http", who)
    assert [record.getMessage() for record in client_lines(caplog)] == [
        'client error UNAUTHENTICATED via=http client=10.0.0.7:51234 sub="svc \\"report\\" x": '
        "the bearer token is not valid",
        'client error 4403 via=websocket sub="s": Forbidden',
        "client error FORBIDDEN via=websocket client=::1:80: origin",
        "client error BAD_REQUEST via=http: not JSON",
    ]
