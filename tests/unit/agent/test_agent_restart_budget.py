"""Pure rules of the job-wide restart budget."""

from __future__ import annotations

import json

import pytest
from elasticjob_agent.protocol.keys import RestartReason
from elasticjob_agent.restart_budget import (
    RestartCounts,
    RestartStateError,
    budget_exhausted,
    decode_counter,
    decode_event_reason,
    decode_seed,
    encode_event,
)


def test_only_failures_and_timers_spend_the_budget() -> None:
    counts = RestartCounts()
    for reason in (RestartReason.MEMBERSHIP, RestartReason.PREEMPTION, RestartReason.FAILURE):
        counts = counts.plus(reason)
    counts = counts.plus(RestartReason.TIMER)
    assert counts.total == 4
    assert counts.spent == 2
    assert counts.full()["etcd-recovered"] == 0


@pytest.mark.parametrize(
    ("spent", "max_restarts", "exhausted"),
    [(0, 0, False), (1, 0, True), (3, 3, False), (4, 3, True)],
)
def test_budget_rule_matches_torchrun(spent: int, max_restarts: int, exhausted: bool) -> None:
    counts = RestartCounts({"failure": spent, "membership": 10})
    assert budget_exhausted(counts, max_restarts) is exhausted


def test_counter_values() -> None:
    assert decode_counter("k", b"12") == 12
    with pytest.raises(RestartStateError, match="k holds '-1'"):
        decode_counter("k", b"-1")


def test_seed() -> None:
    seed = decode_seed("s", json.dumps({"byReason": {"failure": 2, "preemption": 1}}).encode())
    assert seed.by_reason == {"failure": 2, "preemption": 1}
    for bad, message in [
        (b"nope", "not JSON"),
        (b"[]", "byReason"),
        (b'{"byReason": {"cosmic-ray": 1}}', "unknown reason 'cosmic-ray'"),
        (b'{"byReason": {"failure": -1}}', "non-negative"),
        (b'{"byReason": {"failure": true}}', "non-negative"),
    ]:
        with pytest.raises(RestartStateError, match=message):
            decode_seed("s", bad)


def test_event_round_trip() -> None:
    raw = encode_event(RestartReason.TIMER, "n1", 1.0)
    assert decode_event_reason("e", raw) is RestartReason.TIMER
    with pytest.raises(RestartStateError, match="corrupt"):
        decode_event_reason("e", b'{"reason": "x"}')
