"""What a process runs: its release, as nodes tell their peers and operators (README:
Cluster map). The package's version, and the commit when run from a git checkout, since
commits between versions differ in what they serve. The commit is read from the checkout's
files (no git process: every worker of every node reads it as it starts)."""

from __future__ import annotations

import functools
import importlib.metadata
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parent.parent
COMMIT_DIGITS = 10


@functools.cache
def release() -> str:
    """`0.1.0`, or `0.1.0+g1a2b3c4d5e` from a checkout."""
    try:
        version = importlib.metadata.version("stategate")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    try:
        commit = _commit(_git_dir(CHECKOUT / ".git"))
    except (OSError, ValueError):  # not a checkout, or one this cannot read
        return version
    return f"{version}+g{commit[:COMMIT_DIGITS]}"


def _git_dir(dot_git: Path) -> Path:
    """The repository's folder: .git itself, or where a worktree's .git file points."""
    if dot_git.is_dir():
        return dot_git
    pointer = dot_git.read_text().strip()
    if not pointer.startswith("gitdir: "):
        raise ValueError(f"{dot_git} is not a git checkout's")
    return (dot_git.parent / pointer.removeprefix("gitdir: ")).resolve()


def _commit(git: Path) -> str:
    """HEAD's commit: detached, a loose ref, or a packed one (a worktree's refs are its
    common folder's)."""
    head = (git / "HEAD").read_text().strip()
    if not head.startswith("ref: "):
        return head
    ref = head.removeprefix("ref: ")
    common = git / "commondir"
    folders = [git, (git / common.read_text().strip()).resolve()] if common.exists() else [git]
    for folder in folders:
        if (folder / ref).exists():
            return (folder / ref).read_text().strip()
        packed = folder / "packed-refs"
        if packed.exists():
            for line in packed.read_text().splitlines():
                if line.endswith(f" {ref}"):
                    return line.split(" ", 1)[0]
    raise ValueError(f"{ref} is not in {git}")
