"""Settings and stores read again while serving (README: Changing settings without a
restart, Changing stores): on SIGHUP a node reads its project file again. What it can apply
in place (the RELOADABLE settings, [auth], stores added on the topics it had, removed or
declared otherwise) it takes into the project its parts read (Project.take, through
GatewayNode.take), its connections kept; a file that does not load,
or that changes anything else, changes nothing and says why in one line."""

from __future__ import annotations

import asyncio
import logging
import signal
import ssl
from collections.abc import Callable
from dataclasses import fields
from types import FrameType

from contracts.clock import now_ms
from contracts.entries import ConfigError
from contracts.project import TAKEN, Project, stores_changed
from contracts.settings import Settings
from contracts.snapshot_file import same_rows
from stategate import certificates
from stategate.app import NodeApp
from stategate.workers import FollowerProcesses

log = logging.getLogger(__name__)

REFUSED, APPLIED = "refused", "applied"  # what a reading did, as a node's status says it
# Read per request by what serves (resolvers/execution/operations.py, stategate/origins.py)
# or by logging: a new value applies from the next request. Every other setting shapes the
# schema, the pools, the files or the timers, fixed at start.
RELOADABLE = (
    "log_level",
    "cors_origins",
    "max_query_depth",
    "max_aliases",
    "max_request_cost",
    "bulk_request_cost",
)


def changed(old: Project, new: Project) -> tuple[list[str], list[str]]:
    """(what a reload applies, what it cannot) of the entries that differ: settings by
    name, [auth], stores by name, and the project's other parts."""
    applied: list[str] = []
    refused: list[str] = []
    for entry in fields(Settings):
        if getattr(old.settings, entry.name) != getattr(new.settings, entry.name):
            (applied if entry.name in RELOADABLE else refused).append(entry.name)
    if old.access != new.access:
        applied.append("[auth]")
    added, removed, other = stores_changed(old, new)
    if added:
        applied.append(f"stores added: {', '.join(added)}")
    if removed:
        applied.append(f"stores removed: {', '.join(removed)}")
    indexed = [n for n in other if same_rows(old.stores[n], new.stores[n])]
    if indexed:
        applied.append(f"index changed: {', '.join(indexed)}")
    moved = [n for n in other if old.stores[n].is_global != new.stores[n].is_global]
    if moved:
        refused.append(f"stores made global or partitioned: {', '.join(moved)}")
    in_place = [n for n in other if n not in indexed and n not in moved]
    if in_place:
        applied.append(f"stores changed in place: {', '.join(in_place)}")
    if old.topics != new.topics:
        refused.append("[[topics]]")
    if new.global_stores and not old.global_stores:
        refused.append("the first global store (its chains are new)")
    if old.global_stores and not new.global_stores:
        refused.append("the last global store (its chains go)")
    refused += [
        f"[{part.name}]"
        for part in fields(Project)
        if part.name not in TAKEN and getattr(old, part.name) != getattr(new, part.name)
    ]
    return applied, refused


def reload(
    current: Project, read: Callable[[], Project], apply: Callable[[Project], None]
) -> tuple[Project, str]:
    """The project in force after a SIGHUP: `read`'s when it loads and differs only in what
    a reload applies (then `apply`d), else `current`, with one line saying why; and that
    line's gist, `applied: ...` or `refused: ...` (a node's status says it)."""
    try:
        new = read()
        applied, refused = changed(current, new)
        if refused:
            why = (
                f"{', '.join(refused)} differ from the running node's, which a restart "
                f"applies (a reload applies {', '.join(RELOADABLE)}, [auth], stores added or "
                "removed and indexes)"
            )
            log.error("SIGHUP: nothing changed: %s", why)
            return current, f"{REFUSED}: {why}"
        apply(new)
    except ConfigError as exc:
        log.error("SIGHUP: nothing changed: %s", exc)
        return current, f"{REFUSED}: {exc}"
    said = ", ".join(applied) or "nothing changed"
    log.info("SIGHUP: the project file read again: %s", said)
    return new, f"{APPLIED}: {said}"


class Hangup:
    """What a node's process does on SIGHUP: its project file read again (`reload`), its
    certificate read again with [tls], and the signal passed on to its followers, each of
    which does the same."""

    def __init__(
        self,
        project: Project,
        read: Callable[[], Project],
        app: NodeApp,
        node: str,
        context: ssl.SSLContext | None,
        followers: FollowerProcesses | None,
    ) -> None:
        self.project, self.read, self.app, self.node = project, read, app, node
        self.context, self.followers = context, followers

    def install(self) -> None:
        signal.signal(signal.SIGHUP, self.heard)

    def heard(self, signum: int, frame: FrameType | None) -> None:
        """Done on the event loop, between two of its callbacks, when it runs: a signal
        handler runs between any two bytecodes, a request's or a lock holder's."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.apply()
        else:
            loop.call_soon_threadsafe(self.apply)

    def apply(self) -> None:
        self.project, outcome = reload(self.project, self.read, self.app.reload)
        node = self.app.node
        node.reloaded_ms, node.reloaded = now_ms(), outcome
        tls = self.project.tls
        if tls is not None and self.context is not None:
            certificates.reread(tls, self.context, self.node)
        if self.followers is not None:
            self.followers.signal(signal.SIGHUP)
