"""The part a process plays in its node."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

from gateway.workers.lifeline import Lifeline


class Followers(Protocol):
    """The follower processes a keeper started (stategate/workers.py)."""

    count: int  # how many it keeps running

    def running(self) -> list[int]:
        """Their pids, of those not ended yet."""
        ...

    def stop(self) -> None:
        """Start none again, and cut their lifeline: each stops as on SIGTERM."""
        ...

    def kill(self, pid: int) -> None:
        """SIGKILL one of them (it is started again, unless they are stopping)."""
        ...


@dataclass(frozen=True)
class Role:
    """One of a node's `workers` processes: the whole node (`alone`), or the keeper of the
    channel `channel` (gateway/workers/channel.py: address), which holds the followers it
    started, or a follower of it, which holds its lifeline to the keeper."""

    channel: str = ""
    workers: int = 1
    followers: Followers | None = None
    lifeline: Lifeline | None = None

    @property
    def kind(self) -> Literal["alone", "keeper", "follower"]:
        if self.followers is not None:
            return "keeper"
        return "alone" if self.lifeline is None else "follower"


ALONE = Role()


@dataclass(frozen=True)
class Workers:
    """How many of a node's worker processes serve (listen on its port), of how many."""

    serving: int
    of: int


ONE_WORKER = Workers(1, 1)
