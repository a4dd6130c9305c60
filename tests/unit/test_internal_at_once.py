"""Which of a peer's calls the HTTP server's protocol answers at once (gateway/http.py,
internal_at_once): those InternalQuery would read on the loop as it starts. Up to a SLICE
of keys always (the interactive lane); small bulk work (at most SMALL_BULK_KEYS) only while
no interactive request is in flight, when the bulk lane runs it here and now too; larger
calls never (the bulk thread reads them in slices). The node here reads every key it is
asked as a row of its own; tests/test_plans.py checks the real node's answers are the app's."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from types import SimpleNamespace

import pytest
from starlette.datastructures import Headers

from contracts.cluster_secret import SECRET_HEADER
from contracts.project import Project, load
from gateway.http import internal_at_once
from gateway.model.queries import Answer, Get, SubQuery
from gateway.runtime.lanes import SLICE, SMALL_BULK_KEYS, Lanes
from gateway.wire.protocol import PROTOCOL, PROTOCOL_HEADER, decode_answers, encode_request
from tests.projects import write_project


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Project:
    return load(write_project(Path(tmp_path_factory.mktemp("at-once")), [7201, 7202, 7203]))


class Memory:
    """Reads every sub-query at once: each key a row."""

    def here(self, q: SubQuery) -> Answer:
        assert isinstance(q.query, Get)
        return Answer(q.id, "node1", rows=[[key] for key in q.query.keys])


@pytest.fixture
def node(project: Project) -> Iterator[SimpleNamespace]:
    lanes = Lanes()
    yield SimpleNamespace(project=project, lanes=lanes, execute_local=Memory(), internal_requests=0)
    lanes.close()


@pytest.mark.parametrize(
    ("keys", "in_flight", "at_once"),
    [
        (SLICE, 1, True),
        (SLICE + 1, 0, True),
        (SMALL_BULK_KEYS, 0, True),
        (SLICE + 1, 1, False),
        (SMALL_BULK_KEYS + 1, 0, False),
    ],
)
def test_a_call_is_answered_at_once_when_its_lane_would_read_it_now(
    node: SimpleNamespace, keys: int, in_flight: int, at_once: bool
) -> None:
    store = next(iter(node.project.stores))
    asked = tuple(f"k{n}" for n in range(keys))
    body = encode_request([SubQuery(0, 0, store, Get(asked))])
    headers = Headers({SECRET_HEADER: node.project.cluster.secret, PROTOCOL_HEADER: str(PROTOCOL)})
    with ExitStack() as requests:
        for _ in range(in_flight):  # interactive requests under way
            requests.enter_context(node.lanes.request())
        answer = internal_at_once(node, headers, body)  # type: ignore[arg-type]
    if not at_once:
        assert answer is None and node.internal_requests == 0
        return
    assert answer is not None and node.internal_requests == 1
    (read,) = decode_answers(answer)
    assert read.rows == [[key] for key in asked]
