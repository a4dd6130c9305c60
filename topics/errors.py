"""The one error of the log's seam: raised by every Log, caught by the CLI as one line."""

from __future__ import annotations


class TopicsError(Exception):
    """The log, or a topic in it, is not what the project declares or cannot be reached:
    one line that says which and how."""
