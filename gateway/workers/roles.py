"""The part a process plays in its node."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class Role:
    """The whole node (`alone`), or the keeper or a follower of the channel `channel`
    (gateway/workers/channel.py: address), one of the node's `workers` processes."""

    kind: Literal["alone", "keeper", "follower"] = "alone"
    channel: str = ""
    workers: int = 1


ALONE = Role()
