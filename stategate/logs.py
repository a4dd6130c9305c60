"""Logging of stategate's processes: one line per event, with time, level and source."""

from __future__ import annotations

import logging

FORMAT = "%(asctime)s %(levelname)s {source} %(name)s: %(message)s"
# Libraries that log every request at INFO: a node polls its peers every second and the
# pipeline notifies nodes every micro-batch, which would drown what matters.
CHATTY = ("py4j", "httpx", "httpcore")


def configure(source: str, level: str) -> None:
    """Log to stderr at `level` (a Settings.log_level), each line naming `source` (a node
    id, "pipeline", "store")."""
    logging.basicConfig(level=level.upper(), format=FORMAT.format(source=source), force=True)
    for name in CHATTY:
        logging.getLogger(name).setLevel(logging.WARNING)
