"""What a process runs: its release, as nodes tell their peers and operators (README:
Cluster map). The package's version, and the commit when run from a git checkout, since
commits between versions differ in what they serve."""

from __future__ import annotations

import functools
import importlib.metadata
import subprocess
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parent.parent
GIT_TIMEOUT_S = 5.0


@functools.cache
def release() -> str:
    """`0.1.0`, or `0.1.0+g1a2b3c4` from a checkout (`+dirty` when files differ from it)."""
    try:
        version = importlib.metadata.version("stategate")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    if not (CHECKOUT / ".git").exists():
        return version
    try:
        described = subprocess.run(
            ["git", "-C", str(CHECKOUT), "describe", "--always", "--dirty=+dirty", "--abbrev=10"],
            capture_output=True, text=True, timeout=GIT_TIMEOUT_S, check=True,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return version
    return f"{version}+g{described}" if described else version
