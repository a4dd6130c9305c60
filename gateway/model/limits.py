"""The request limits of the settings, held the same way by a GraphQL request and by an
internal one: `max_keys_per_field` keys per batch field (and MAX_SUBQUERY_KEYS per internal
sub-query, the protocol's own), `max_page_size` rows per page and windows per window query.
Each check raises the coded GatewayError the README names.

A scan's sub-query asks for its page plus SCAN_LOOKAHEAD rows: the extra row tells whether
another page follows.
"""

from __future__ import annotations

from contracts.errors import GatewayError
from contracts.project import Project, Store
from contracts.settings import MAX_SUBQUERY_KEYS, Settings
from gateway.model.queries import (
    Get,
    Prefix,
    Range,
    Select,
    SubQuery,
    Versions,
    Windows,
    WindowsOfKey,
)

SCAN_LOOKAHEAD = 1
MAX_FILTER_DEPTH = 16  # nested and/or/not levels of one filter (the internal protocol's is 64)


def check_keys(count: int, settings: Settings) -> None:
    _check_keys(count, settings.max_keys_per_field, "max_keys_per_field")


def _check_keys(count: int, limit: int, name: str) -> None:
    if count > limit:
        raise GatewayError("TOO_MANY_KEYS", f"{count} keys asked, the limit is {limit} ({name})")


def check_page_size(first: int, settings: Settings) -> None:
    maximum = settings.max_page_size
    if not 1 <= first <= maximum:
        raise GatewayError(
            "PAGE_SIZE_OUT_OF_RANGE", f"first must be between 1 and {maximum}, not {first}"
        )


def check_window_span(store: Store, from_ms: int, to_ms: int, settings: Settings) -> None:
    maximum = settings.max_page_size
    count = (to_ms - from_ms) // store.window_advance_ms + 1
    if count > maximum:
        raise GatewayError(
            "WINDOW_RANGE_TOO_LARGE",
            f"[from, to] spans {count} windows, the limit is {maximum} "
            "(max_page_size); use the paginated All query",
        )


def check_subquery(q: SubQuery, project: Project) -> None:
    """An internal sub-query within the limits its GraphQL request was held to."""
    settings = project.settings
    match q.query:
        case Get(keys):
            _check_keys(len(keys), MAX_SUBQUERY_KEYS, "the internal protocol's MAX_SUBQUERY_KEYS")
        case (
            Range(limit=limit)
            | Prefix(limit=limit)
            | Windows(limit=limit)
            | Select(limit=limit)
            | Versions(limit=limit)
        ):
            most = settings.max_page_size + SCAN_LOOKAHEAD
            if not 1 + SCAN_LOOKAHEAD <= limit <= most:
                raise GatewayError(
                    "PAGE_SIZE_OUT_OF_RANGE",
                    f"a sub-query's limit must be between {1 + SCAN_LOOKAHEAD} and {most} "
                    f"(max_page_size and the row telling whether a page follows), not {limit}",
                )
        case WindowsOfKey(_, from_ms, to_ms):
            store = project.stores.get(q.store)
            if store is not None and store.kind == "window":
                check_window_span(store, from_ms, to_ms, settings)
