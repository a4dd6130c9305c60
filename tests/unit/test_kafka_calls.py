"""A Kafka admin call that gets no answer within CALL_S is the log unavailable (a following
pipeline waits and reads again), never a bare TimeoutError that ends the pipeline: found by
the broker-fault test when two brokers were down on a loaded machine."""

from __future__ import annotations

from concurrent.futures import Future

import pytest

from topics.kafka import _result
from topics.log import TopicsError


def test_a_call_with_no_answer_is_a_topics_error_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("topics.kafka.CALL_S", 0.01)
    pending: Future[object] = Future()  # what an admin call to brokers that are down leaves
    with pytest.raises(TopicsError, match="the offsets of t partition 0: no answer within"):
        _result(pending, "the offsets of t partition 0")
