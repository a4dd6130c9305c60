"""A node's app for granian (bench/servers.py): `granian --factory bench.granian_app:app`
with STATEGATE_CONFIG and STATEGATE_NODE set builds what `stategate node` serves (one worker,
no TLS), so the two servers run the same app."""

from __future__ import annotations

import os

from starlette.types import ASGIApp

from contracts import project as projects
from stategate import logs
from stategate.app import create_app


def app() -> ASGIApp:
    project = projects.load(os.environ["STATEGATE_CONFIG"])
    node = os.environ["STATEGATE_NODE"]
    logs.configure(node, project.settings)
    return create_app(project, node).asgi
