"""Logging of stategate's processes: one event per line on stderr, with time, level and
source (a node id, "pipeline", "demo"), as text or as JSON (settings.log_format).

Everything a process logs goes through the root logger's one handler, uvicorn's own loggers
(uvicorn.error; uvicorn.access when enabled) included: they propagate to it, since the
servers are started with log_config=None. uvicorn's lines about each WebSocket connection
(accepted, open, closed) are an access log's, off as HTTP's is: they show at debug only.

JSON lines are objects with `ts` (RFC 3339, UTC, milliseconds), `level`, `source`, `logger`,
`message` and, when the event carries one, `exception` (the traceback as one string), for
collectors that parse them (Loki, Elasticsearch, CloudWatch...).
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import orjson

from contracts.settings import Settings

TEXT = "%(asctime)s %(levelname)s {source} %(name)s: %(message)s"
# Libraries that log every request at INFO: a node polls its peers every second and the
# pipeline notifies nodes every micro-batch, which would drown what matters.
CHATTY = ("py4j", "httpx", "httpcore")


def level(settings: Settings) -> None:
    """Log at settings.log_level from now on (a reload's)."""
    logging.getLogger().setLevel(settings.log_level.upper())


def configure(source: str, settings: Settings) -> None:
    """Log to stderr at settings.log_level in settings.log_format, each event naming
    `source`."""
    handler = logging.StreamHandler()
    if settings.log_format == "json":
        handler.setFormatter(JsonFormatter(source))
    else:
        handler.setFormatter(logging.Formatter(TEXT.format(source=source)))
    logging.basicConfig(level=settings.log_level.upper(), handlers=[handler], force=True)
    for name in CHATTY:
        logging.getLogger(name).setLevel(logging.WARNING)
    uvicorn = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, ConnectionLines) for f in uvicorn.filters):
        uvicorn.addFilter(ConnectionLines())


class ConnectionLines(logging.Filter):
    """uvicorn's INFO lines about each WebSocket connection, made DEBUG lines."""

    MESSAGES = frozenset(
        {
            '%s - "WebSocket %s" [accepted]',
            '%s - "WebSocket %s" 403',
            '%s - "WebSocket %s" %d',
            "connection open",
            "connection closed",
        }
    )

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.INFO or record.msg not in self.MESSAGES:
            return True
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return logging.root.isEnabledFor(logging.DEBUG)


class JsonFormatter(logging.Formatter):
    """One JSON object per event, on one line (a traceback is one string field)."""

    def __init__(self, source: str) -> None:
        super().__init__()
        self.source = source

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": rfc3339(record.created),
            "level": record.levelname,
            "source": self.source,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            entry["exception"] = record.exc_text
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        try:
            return orjson.dumps(entry).decode()
        except TypeError:  # a lone surrogate (from a client's text): escaped, still one line
            return json.dumps(entry)


def rfc3339(created: float) -> str:
    """2026-11-01T12:34:56.789Z: the instant in UTC, to the millisecond."""
    seconds = int(created)
    millis = int((created - seconds) * 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d}Z"
