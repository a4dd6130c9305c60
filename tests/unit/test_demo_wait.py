"""The demo waits for the pipeline it started, not for what an earlier run left in the same
log file (stategate/demo: _wait_published)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from stategate import demo

OLD = b"2026-11-28 10:00:00 INFO pipeline spark_pipeline.loop: following old:9092 every 1 s\n"
NEW = b"2026-11-29 10:00:00 INFO pipeline spark_pipeline.loop: following new:9092 every 1 s\n"
APPEND_AFTER_S = 1.0


def test_an_earlier_runs_following_line_does_not_end_the_wait(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "pipeline.log"
    log.write_bytes(OLD)
    pipeline = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    appender = threading.Timer(APPEND_AFTER_S, lambda: log.open("ab").write(NEW))
    try:
        began = time.monotonic()
        appender.start()
        demo._wait_published(pipeline, log, len(OLD), verbose=False)
        assert time.monotonic() - began >= APPEND_AFTER_S
    finally:
        appender.cancel()
        pipeline.kill()
        pipeline.wait()
    echoed = capsys.readouterr().out
    assert "following new:9092" in echoed and "old:9092" not in echoed
