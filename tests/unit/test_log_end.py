"""The log end maxLag counts behind, as the `log_end` setting chooses it."""

from __future__ import annotations

from pathlib import Path

import pytest

from contracts import eventlog
from contracts.project import load
from contracts.settings import Settings, SettingsError
from gateway.cluster.log_end import LogFileEnd, PublishedEnd
from tests.projects import write_project


def test_published_is_the_manifests_end_raised_to_any_replica_past_it() -> None:
    replicas = {0: [{"t": 5}, {"t": 9}], 1: [{"t": 3}], 2: []}
    manifest = {("t", 0): 7, ("t", 1): 4}
    end = PublishedEnd(lambda topic, p: manifest.get((topic, p)), lambda p: replicas[p])
    assert (end("t", 0), end("t", 1), end("t", 2)) == (9, 4, None)
    assert end("other", 0) is None


def test_log_reads_the_logs_own_end_at_most_once_per_interval(tmp_path: Path) -> None:
    project = load(write_project(tmp_path, [7001], replicas=1))
    topic = project.topics["bookings"]
    end = LogFileEnd(project.log_dir, max_age_s=3600)
    assert end("bookings", 0) == 0
    eventlog.append(project.log_dir, topic, 0, [eventlog.Record("k", None, 1)])
    assert end("bookings", 0) == 0  # read within the interval: as it was
    assert LogFileEnd(project.log_dir, max_age_s=0)("bookings", 0) == 1


def test_the_setting_takes_published_or_log_only() -> None:
    assert Settings().log_end == "published"
    assert Settings.parse({"log_end": "log"}).log_end == "log"
    with pytest.raises(SettingsError, match="log_end must be one of published, log"):
        Settings.parse({"log_end": "folder"})
