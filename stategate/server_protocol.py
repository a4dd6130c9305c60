"""The node's HTTP protocol: uvicorn's httptools protocol with read deadlines
(stategate/deadlines.py) and known reads answered inline (stategate/inline.py)."""

from __future__ import annotations

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from contracts.settings import Settings
from stategate.deadlines import ReadDeadlines
from stategate.inline import AtOnce, InlineAnswers


def node_protocol(settings: Settings, answers: AtOnce) -> type[HttpToolsProtocol]:
    """The protocol class uvicorn runs (uvicorn.Config's `http`) for a node's app."""

    class NodeProtocol(ReadDeadlines, InlineAnswers):
        header_s = settings.header_timeout_s
        body_s = settings.body_timeout_s

    NodeProtocol.answers = answers
    return NodeProtocol
