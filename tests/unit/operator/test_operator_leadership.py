"""Leader election decisions on an injected clock, and counters that never go down."""

from __future__ import annotations

import pytest
from elasticjob_operator.core.leadership import (
    LeaseRecord,
    LeaseTimings,
    Move,
    SettingsError,
    decide,
    next_record,
    observe,
    released,
)
from elasticjob_operator.core.status import EtcdState, JobStatus, Phase, never_lower

OTHER = LeaseRecord(holder="b", duration_seconds=15, renew_time="t1", resource_version="7")


def test_no_lease_is_created() -> None:
    seen = observe(None, LeaseRecord(), 0.0)
    assert decide(seen, "a", 0.0) is Move.CREATE
    new = next_record(LeaseRecord(), Move.CREATE, "a", "t0", 15)
    assert new.holder == "a" and new.transitions == 0 and new.resource_version is None


def test_a_held_lease_is_renewed_by_its_holder_and_waited_on_by_others() -> None:
    mine = LeaseRecord(holder="a", duration_seconds=15, renew_time="t1", resource_version="7")
    assert decide(observe(None, mine, 0.0), "a", 0.0) is Move.RENEW
    assert decide(observe(None, OTHER, 0.0), "a", 14.9) is Move.WAIT


def test_expiry_counts_on_the_candidates_clock_from_the_last_change_it_saw() -> None:
    seen = observe(None, OTHER, 100.0)
    seen = observe(seen, OTHER, 110.0)  # unchanged: the clock keeps running from 100
    assert decide(seen, "a", 114.9) is Move.WAIT
    assert decide(seen, "a", 115.0) is Move.TAKE_OVER
    renewed = LeaseRecord(holder="b", duration_seconds=15, renew_time="t2", resource_version="8")
    seen = observe(seen, renewed, 116.0)  # b renewed: wait a full duration again
    assert decide(seen, "a", 130.0) is Move.WAIT
    taken = next_record(renewed, Move.TAKE_OVER, "a", "t3", 15)
    assert taken.holder == "a" and taken.transitions == 1 and taken.resource_version == "8"


def test_a_released_lease_is_taken_at_once() -> None:
    mine = LeaseRecord(holder="a", renew_time="t1", resource_version="9")
    back = released(mine, "a")
    assert back is not None and back.holder == ""
    assert decide(observe(None, back, 0.0), "b", 0.0) is Move.TAKE_OVER
    assert released(OTHER, "a") is None


@pytest.mark.parametrize(("retry", "deadline", "duration"), [(2, 10, 10), (0, 1, 2), (5, 4, 15)])
def test_timings_that_cannot_work_are_refused(
    retry: float, deadline: float, duration: float
) -> None:
    with pytest.raises(SettingsError, match="retry period < renew deadline < lease duration"):
        LeaseTimings(duration=duration, renew_deadline=deadline, retry_period=retry)


def test_counts_attempts_and_generations_never_go_down() -> None:
    ours = JobStatus(
        restarts={"failure": 1, "membership": 3},
        attempts={0: 2, 1: 0},
        etcd=EtcdState(1, 1, 1, None),
    )
    theirs = JobStatus(
        restarts={"failure": 2, "etcd-recovered": 1},
        attempts={0: 1, 1: 1, 2: 4},
        etcd=EtcdState(2, 1, 0, None),
    )
    merged = never_lower(ours, theirs)
    assert merged.restarts == {"failure": 2, "membership": 3, "etcd-recovered": 1}
    assert merged.attempts == {0: 2, 1: 1, 2: 4}
    assert merged.etcd.generation == 2 and merged.etcd.seeded_generation == 1


def test_a_finished_job_stays_finished() -> None:
    done = JobStatus(phase=Phase.FAILED, reason="MaxRestartsExceeded", completion_time=5.0)
    merged = never_lower(JobStatus(phase=Phase.RUNNING), done)
    assert merged.phase is Phase.FAILED and merged.reason == "MaxRestartsExceeded"
