"""A start's patience (stategate/launcher.py): a deadline that progress moves, up to a
ceiling; and what counts as a server's progress."""

from __future__ import annotations

import os
import time
from pathlib import Path

from stategate.launcher import Patience, StartProgress, cpu_s


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_no_progress_for_quiet_s_passes_the_deadline() -> None:
    clock = Clock()
    patience = Patience(quiet_s=60, ceiling_s=600, clock=clock)
    clock.now = 59.9
    assert patience.passed() is None
    clock.now = 60
    assert patience.passed() == "and showed no progress for 60 s"


def test_progress_moves_the_deadline_up_to_the_ceiling() -> None:
    clock = Clock()
    patience = Patience(quiet_s=60, ceiling_s=600, clock=clock)
    for _ in range(11):  # 550 s, each step within quiet_s of the last progress
        clock.now += 50
        assert patience.passed() is None, clock.now
        patience.progressed()
    clock.now = 600
    assert patience.passed() == "in 600 s"


def test_a_log_growing_or_cpu_used_is_progress(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("starting\n")
    progress = StartProgress(os.getpid(), log, busy_s=0.05)
    assert not progress.made()
    with log.open("a") as out:
        out.write("loading\n")
    assert progress.made()
    assert not progress.made()  # no more since
    began = cpu_s(os.getpid())
    while cpu_s(os.getpid()) < began + 0.1:  # work, without a word
        time.sleep(0)
    assert progress.made()


def test_a_process_gone_used_no_cpu() -> None:
    assert cpu_s(2**22 + 1) == 0.0  # past pid_max's limit: no such process
