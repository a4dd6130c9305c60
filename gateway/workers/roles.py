"""The part a process plays in its node."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class Role:
    """The whole node (`alone`), or the keeper or a follower of the channel `channel`
    (gateway/workers/channel.py: address)."""

    kind: Literal["alone", "keeper", "follower"] = "alone"
    channel: str = ""


ALONE = Role()
