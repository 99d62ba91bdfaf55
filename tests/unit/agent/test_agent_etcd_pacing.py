"""The request deadline schedule and the retry pause (etcd/pacing.py): pure."""

from __future__ import annotations

import random

from elasticjob_agent.etcd import pacing

BASE = 5.0


def silences(n: int, start: float = BASE) -> list[float]:
    """The deadlines of ``n`` consecutive requests that all went unanswered."""
    deadlines, deadline = [], start
    for _ in range(n):
        deadlines.append(deadline)
        deadline = pacing.after_silence(deadline, BASE)
    return deadlines


def test_each_unanswered_request_doubles_the_deadline_up_to_eight_times_the_base() -> None:
    assert silences(6) == [5.0, 10.0, 20.0, 40.0, 40.0, 40.0]


def test_an_answer_brings_the_deadline_back_but_never_below_twice_its_latency() -> None:
    assert pacing.after_answer(40.0, BASE, latency=0.01) == BASE  # etcd is fast again
    assert pacing.after_answer(40.0, BASE, latency=12.0) == 24.0  # still slow: stay patient
    assert pacing.after_answer(10.0, BASE, latency=9.0) == 10.0  # an answer never lengthens it
    assert pacing.after_answer(BASE, BASE, latency=4.9) == BASE


def test_the_caller_budget_cuts_the_deadline_but_never_below_the_base() -> None:
    assert pacing.for_request(40.0, BASE, remaining=None) == 40.0
    assert pacing.for_request(40.0, BASE, remaining=12.5) == 12.5
    assert pacing.for_request(40.0, BASE, remaining=1.0) == BASE
    assert pacing.for_request(BASE, BASE, remaining=-3.0) == BASE  # past its budget: as before
    assert pacing.for_request(10.0, BASE, remaining=300.0) == 10.0


def attempts_until_answered(latency: float) -> int:
    """Requests one node sends until one waits ``latency`` s, the time etcd needs to answer
    (with a fixed deadline under ``latency``, no request is ever answered)."""
    deadline, attempts = BASE, 1
    while deadline < latency:
        attempts += 1
        deadline = pacing.after_silence(deadline, BASE)
    return attempts


def test_a_slow_etcd_costs_logarithmically_many_requests_not_one_per_base_deadline() -> None:
    # The N = 4096 storm: joins waiting ~30 s in etcd's apply queue.
    assert attempts_until_answered(30.0) == 4  # 5, 10, 20 unanswered; 40 answered
    assert attempts_until_answered(40.0) == 4
    assert attempts_until_answered(4.0) == 1
    # Beyond the ceiling each retry waits 8 base deadlines, not one.
    assert silences(10)[-1] == pacing.CEILING * BASE


def test_pauses_double_to_one_second_and_are_drawn_from_their_upper_half() -> None:
    pauses, pause = [], pacing.FIRST_PAUSE
    for _ in range(7):
        pauses.append(pause)
        pause = pacing.next_pause(pause)
    assert pauses == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    rng = random.Random(7)
    draws = [pacing.jittered(1.0, rng) for _ in range(200)]
    assert all(0.5 <= d <= 1.0 for d in draws)
    assert len({round(d, 3) for d in draws}) > 100, "nodes that failed together must spread out"
