"""`stategate node` refuses to listen beyond loopback in clear, or with the demo's cluster
secret or a short one: the process exits at once with one line saying why and what to do (a
real subprocess; nothing is bound)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from contracts import project as projects
from stategate import certificates
from stategate.launcher import node_command
from tests.projects import TLS, write_project
from tests.unit.test_exposure import DEMO, OWN


@pytest.mark.parametrize(
    ("secret", "tls", "why"),
    [(OWN, False, "in clear"), (DEMO, True, "demo's"), ("short", True, "that short")],
)
def test_a_server_beyond_loopback_refuses_clear_text_or_a_weak_secret(
    tmp_path: Path, secret: str, tls: bool, why: str
) -> None:
    path = write_project(tmp_path, [8101, 8102, 8103])
    text = path.read_text().replace("127.0.0.1:8101", "0.0.0.0:8101")
    text = text.replace('secret = "test-secret"', f'secret = "{secret}"')
    if tls:
        certificates.create(tmp_path / "certs", ["node1"], [])
        text += TLS
    path.write_text(text)
    project = projects.load(path)
    command = node_command(project, "node1")
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and why in lines[0], lines
    assert ("[tls]" if not tls else "cluster.secret_env") in lines[0], lines
