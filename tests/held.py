"""What a node holds on disk of its partitions' chains (not the global ones, which every node
holds), and which of those files it fetched again: a layer fetched again is another file
under the same name (another inode, a later modification time)."""

from __future__ import annotations

import contextlib
from collections.abc import Collection
from pathlib import Path

from contracts import chains
from contracts.project import Project
from contracts.snapshot_file import parse_file_name

Held = dict[Path, tuple[int, int, int]]  # layer file -> (inode, mtime in ns, bytes)


def held(project: Project, node: str) -> Held:
    found: Held = {}
    for path in (project.cluster.node(node).data_dir / "snapshots").glob("p*/v[0-9]*"):
        if chains.is_global(project, int(path.parent.name[1:])):
            continue
        with contextlib.suppress(FileNotFoundError):  # deleted meanwhile
            stat = path.stat()
            found[path] = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
    return found


def refetched(before: Held, after: Held) -> dict[str, int]:
    """The files of `before` that `after` holds as other files: name -> bytes."""
    return {
        _name(path): after[path][2]
        for path in before
        if path in after and after[path] != before[path]
    }


def copied(before: Held, after: Held, partitions: Collection[int]) -> dict[str, int]:
    """The bases of `partitions` that `after` holds and `before` did not: name -> bytes."""
    return {
        _name(path): size
        for path, (*_, size) in after.items()
        if (parsed := parse_file_name(path.name)) is not None
        and parsed[1] == "base"
        and int(path.parent.name[1:]) in partitions
        and before.get(path) != after[path]
    }


def _name(path: Path) -> str:
    return f"{path.parent.name}/{path.name}"
