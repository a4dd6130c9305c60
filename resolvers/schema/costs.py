"""What a root field's arguments ask for, in rows weighted by their kind's time
(resolvers/execution/cost.py adds them up against max_request_cost)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from contracts.settings import Settings
from resolvers.schema.annotations import Rows

# Rows past a limit are counted at the limit: the limit's own error is the one to give.

# What a row of a page weighs, so that a cost unit takes at most about request_timeout_s / 2
# over max_request_cost (50 µs) on the reference machine. `python -m bench.calibrate` on the
# small workload (2026-11-25, 2 cores at load 3 to 26; bench/RESULTS.md, "Cost calibration"):
# a page row took 17 to 67 µs (a page reads `first` rows of every partition and merges them),
# a key of a batch 3 to 5 µs, a window of one key 8 to 27 µs. One-key lookups (40 to 530 µs
# each) are bounded by max_aliases and max_document_tokens, not by the cost.
PAGE_ROW_WEIGHT = 2


def keys_rows(most: int, argument: str = "keys") -> Rows:
    """The keys a list `argument` names (a batch's keys, `_entities`' representations)."""

    def rows(arguments: Mapping[str, Any]) -> int:
        keys = arguments.get(argument)
        return min(most, len(keys)) if isinstance(keys, list) else 1

    return rows


def page_rows(settings: Settings) -> Rows:
    default, most = settings.default_page_size, settings.max_page_size

    def rows(arguments: Mapping[str, Any]) -> int:
        first = arguments.get("first", default)
        return PAGE_ROW_WEIGHT * (min(most, first) if isinstance(first, int) else default)

    return rows


def windows_rows(advance_ms: int, most: int) -> Rows:
    """The windows starting in [from, to]."""

    def rows(arguments: Mapping[str, Any]) -> int:
        try:
            start, end = (datetime.fromisoformat(arguments[k]) for k in ("from", "to"))
            span_ms = (end - start).total_seconds() * 1000
        except (KeyError, TypeError, ValueError):
            return 1  # not a valid range: refused before it runs
        return min(most, max(1, int(span_ms // advance_ms) + 1))

    return rows
