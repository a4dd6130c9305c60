"""Liveness and readiness over HTTP: /health answers as soon as a node runs; /ready only once
it serves a snapshot of every partition it hosts (real nodes)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from contracts.project import load
from stategate.launcher import free_ports
from tests.nodes import Nodes
from tests.projects import write_project


def test_a_node_without_snapshots_is_alive_but_not_ready(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    root: Path = tmp_path_factory.mktemp("unready")
    project = load(write_project(root, free_ports(3)))
    nodes = Nodes(project, root)
    nodes.start("node1")
    try:
        url = nodes.url("node1")
        assert httpx.get(f"{url}/health").json()["status"] == "ok"
        answer = httpx.get(f"{url}/ready")
        assert answer.status_code == 503
        error = answer.json()["error"]
        assert error["code"] == "NOT_READY"
        hosted = project.cluster.hosted_by("node1")
        assert str(hosted) in error["message"]
    finally:
        nodes.stop_all()


@pytest.mark.parametrize("node", ["node1", "node2", "node3"])
def test_a_serving_node_is_ready_with_the_versions_it_serves(served: Any, node: str) -> None:
    answer = httpx.get(f"{served.nodes.url(node)}/ready")
    assert answer.status_code == 200
    body = answer.json()
    status = served.nodes.status(node)["partitions"]
    hosted = served.project.cluster.hosted_by(node)
    assert body["ready"] is True
    assert body["versions"] == {str(p): status[str(p)]["version"] for p in hosted}
