"""Bad records: those of the log that do not fit their topic's declaration (another producer
wrote them, or an older declaration allowed them), as spark_pipeline/checks.py finds them in
the task that builds a partition's layer. settings.bad_records says what happens, as Kafka
Streams' deserialization exception handler does:
- "fail": the task raises BadRecordError naming the topic, partition, offset and reason, and
  the pipeline stops before anything of the record's partition in the batch is published
  (a micro-batch built in the driver publishes each partition as it is done: those built
  before may be published, each whole);
- "skip": the record is left out of every store, counted by topic and reason, and written to
  <snapshot store>/dead-letter/<topic>-<partition>.jsonl with its position; with Kafka, to
  the topic's dead-letter topic (<topic>.dead-letter, same partition: topics/kafka.py).

A dead-letter file holds one JSON object per line, in offset order: topic, partition, offset,
timestamp, key, value (the JSON text as the log holds it), reason, message. Appending is
idempotent by offset: only the offsets past the file's last are appended, so a micro-batch
replayed after a crash writes no record twice; a line cut short by a crash is dropped first.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from pathlib import Path
from typing import NoReturn

import orjson

from contracts.durable import locked
from contracts.project import Project, Topic
from contracts.records import DECIMAL, BadRecord, read
from spark_pipeline.checks import BadRow
from topics import open_log
from topics.batches import Letter
from topics.kafka import KafkaLog

FOLDER = "dead-letter"
_TAIL_BYTES = 65536  # read back this much at a time to find a file's last line
_REFUSED = re.compile(r"BadRecordError: (bad record at [^\n]*)")


class BadRecordError(RuntimeError):
    """A bad record under settings.bad_records = "fail"; the message names its position."""


def handle(
    project: Project,
    store_root: Path,
    topic: Topic,
    partition: int,
    rows: list[BadRow],
    counts: Counter[str],
) -> None:
    """Fail on the first bad record, or write them all to the dead-letter file (or topic)
    and count them by reason into `counts`."""
    if project.settings.bad_records == "fail":
        refuse(topic, partition, rows[0])
    if project.kafka is not None:
        _to_kafka(project, topic, partition, rows)
    else:
        path = dead_letter_path(store_root, topic.name, partition)
        append(path, [(row.offset, _line(topic, partition, row)) for row in rows])
    counts.update(row.reason for row in rows)


def _to_kafka(project: Project, topic: Topic, partition: int, rows: list[BadRow]) -> None:
    log = open_log(project)
    assert isinstance(log, KafkaLog)
    letters = [Letter(*row, explain(topic, row)) for row in rows]
    try:
        log.dead_letters(topic.name, partition, letters)
    finally:
        log.close()


def refuse(topic: Topic, partition: int, row: BadRow) -> NoReturn:
    raise BadRecordError(
        f"bad record at {topic.name}-{partition} offset {row.offset}: {row.reason}: "
        f'{explain(topic, row)} (settings.bad_records = "fail"; "skip" leaves such records '
        "out and writes them to the dead-letter file)"
    )


def refusal(exc: BaseException) -> BadRecordError | None:
    """The BadRecordError a Spark task raised, from the driver's error that wraps it."""
    found = _REFUSED.search(str(exc))
    return BadRecordError(found.group(1)) if found else None


def dead_letter_path(store_root: Path, topic: str, partition: int) -> Path:
    return store_root / FOLDER / f"{topic}-{partition}.jsonl"


def explain(topic: Topic, row: BadRow) -> str:
    """What is wrong with the record, in the producer's words (contracts/records.py)."""
    try:
        read(topic, _key(topic, row.key), row.value, row.timestamp)
    except BadRecord as exc:
        return str(exc)
    return row.reason


def append(path: Path, lines: list[tuple[int, bytes]]) -> None:
    """Append the lines (offset, JSON line) whose offsets are past the file's last."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with locked(path.parent):
        last = last_offset(path)
        fresh = b"".join(line for offset, line in lines if offset > last)
        if fresh:
            with open(path, "ab") as fh:
                fh.write(fresh)
                fh.flush()
                os.fsync(fh.fileno())


def last_offset(path: Path) -> int:
    """The offset of the file's last whole line (-1 for none); a line cut short is cut off."""
    if not path.exists():
        return -1
    with open(path, "r+b") as fh:
        end = fh.seek(0, os.SEEK_END)
        start, tail = end, b""
        while start > 0 and tail[:-1].count(b"\n") == 0:
            start = max(0, start - _TAIL_BYTES)
            fh.seek(start)
            tail = fh.read(end - start)
        whole = tail.rfind(b"\n") + 1
        if whole < len(tail):  # a write cut short by a crash
            fh.truncate(start + whole)
            tail = tail[:whole]
    lines = tail.splitlines()
    if not lines:
        return -1
    offset: int = orjson.loads(lines[-1])["offset"]
    return offset


def _line(topic: Topic, partition: int, row: BadRow) -> bytes:
    entry = {
        "topic": topic.name,
        "partition": partition,
        "offset": row.offset,
        "timestamp": row.timestamp,
        "key": _key(topic, row.key),
        "value": row.value,
        "reason": row.reason,
        "message": explain(topic, row),
    }
    return orjson.dumps(entry) + b"\n"


def _key(topic: Topic, text: str | None) -> object:
    """A key as its column holds it: an integer column's as the integer."""
    if text is not None and topic.key_type != "string" and re.fullmatch(DECIMAL, text):
        return int(text)
    return text
