"""Logging of stategate's processes: one line per event, with time, level and source."""

from __future__ import annotations

import logging

FORMAT = "%(asctime)s %(levelname)s {source} %(name)s: %(message)s"


def configure(source: str, level: str) -> None:
    """Log to stderr at `level` (a Settings.log_level), each line naming `source` (a node
    id, "pipeline", "store")."""
    logging.basicConfig(level=level.upper(), format=FORMAT.format(source=source), force=True)
    logging.getLogger("py4j").setLevel(logging.WARNING)
