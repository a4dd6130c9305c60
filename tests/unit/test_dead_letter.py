"""The dead-letter file is appended idempotently by offset: a replayed batch adds nothing, a
line cut short by a crash is dropped before the next append."""

from __future__ import annotations

from pathlib import Path

from contracts.project import Topic
from spark_pipeline.checks import BadRow
from spark_pipeline.dead_letter import append, explain, last_offset

TOPIC = Topic("trains", "int", {"delay": "int"})


def line(offset: int) -> tuple[int, bytes]:
    return offset, b'{"offset": %d, "reason": "wrong_type"}\n' % offset


def test_a_replay_appends_only_the_offsets_past_the_last(tmp_path: Path) -> None:
    path = tmp_path / "dead-letter" / "trains-0.jsonl"
    assert last_offset(path) == -1
    append(path, [line(3), line(7)])
    append(path, [line(3), line(7)])  # the same batch again, after a crash
    append(path, [line(7), line(9)])
    assert [int(x.split(b" ")[1].rstrip(b",")) for x in path.read_bytes().splitlines()] == [3, 7, 9]


def test_a_line_cut_short_is_dropped_and_written_again(tmp_path: Path) -> None:
    path = tmp_path / "trains-0.jsonl"
    append(path, [line(1)])
    with open(path, "ab") as fh:
        fh.write(line(2)[1][:9])  # the crash
    assert last_offset(path) == 1
    append(path, [line(1), line(2)])
    assert path.read_bytes() == line(1)[1] + line(2)[1]


def test_the_last_offset_is_found_past_one_read_back(tmp_path: Path) -> None:
    path = tmp_path / "trains-0.jsonl"
    long = b'{"offset": 5, "value": "' + b"x" * 200_000 + b'"}\n'
    path.write_bytes(line(4)[1] + long)
    assert last_offset(path) == 5


def test_a_bad_record_is_explained_in_the_producers_words() -> None:
    row = BadRow(0, 0, "2147483648", '{"delay": 1}', "out_of_range")
    assert explain(TOPIC, row) == (
        "key: expected int (a JSON integer in -2147483648..2147483647), got 2147483648"
    )
    assert explain(TOPIC, BadRow(1, 0, "1", '{"delay": "late"}', "wrong_type")).startswith(
        'value.delay: expected int (a JSON integer in -2147483648..2147483647), got "late"'
    )
