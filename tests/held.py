"""What a node holds on disk of its partitions' chains (not the global ones, which every node
holds), and which of those files it fetched again: a layer fetched again is another file
under the same name (another inode, a later modification time)."""

from __future__ import annotations

import contextlib
from pathlib import Path

from contracts import chains
from contracts.project import Project

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
        f"{path.parent.name}/{path.name}": after[path][2]
        for path in before
        if path in after and after[path] != before[path]
    }
