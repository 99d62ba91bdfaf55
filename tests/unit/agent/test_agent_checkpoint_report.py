"""What the checkpoints kept, in the agent's health report: the wire fields parsed strictly
(good, old, malformed, huge) and the round each restore is stamped with."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from elasticjob_agent.health.status import AgentStatus
from elasticjob_agent.protocol.checkpoint import (
    MAX_SOURCE,
    NO_CHECKPOINTS,
    CheckpointFacts,
    RestoreReport,
)
from elasticjob_agent.protocol.health import (
    MAX_REPORT_BYTES,
    MAX_RESTORE_FAILURE,
    AgentState,
    EtcdStatus,
    HealthReport,
    HealthReportError,
)

RESTORE = RestoreReport(40, 4, 2, "peer node-1", 1.25, round=3)
GOOD = HealthReport(
    run_id="ns-job-abc",
    node="job-worker-0-0",
    state=AgentState.RUNNING,
    etcd=EtcdStatus(reachable=True, last_contact=None, unreachable_since=None),
    round=3,
    last_saved_step=60,
    last_restore=RESTORE,
    restore_failure="step 60 refused: rank 1 read nothing",
    restore_failure_round=2,
)


def _with(**fields: Any) -> dict[str, Any]:
    return {**GOOD.to_json(), **fields}


def test_the_checkpoint_fields_round_trip() -> None:
    assert HealthReport.loads(GOOD.dumps()) == GOOD
    assert GOOD.to_json()["lastRestore"] == {
        "step": 40,
        "savedWorldSize": 4,
        "worldSize": 2,
        "source": "peer",
        "sourceNode": "node-1",
        "seconds": 1.25,
        "round": 3,
    }


def test_an_old_report_without_the_fields_still_parses() -> None:
    old = GOOD.to_json()
    for key in ("lastSavedStep", "lastRestore", "restoreFailure", "restoreFailureRound"):
        del old[key]
    parsed = HealthReport.from_json(old)
    assert (parsed.last_saved_step, parsed.last_restore, parsed.restore_failure) == (
        None,
        None,
        None,
    )
    assert parsed.restore_failure_round is None


def test_a_restore_without_a_round_parses_without_one() -> None:
    restore = RESTORE.as_status()
    del restore["round"]
    assert HealthReport.from_json(_with(lastRestore=restore)).last_restore == replace(
        RESTORE, round=None
    )


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"lastSavedStep": -1}, "lastSavedStep"),
        ({"lastSavedStep": True}, "lastSavedStep"),
        ({"lastSavedStep": "60"}, "lastSavedStep"),
        ({"lastRestore": []}, "lastRestore"),
        ({"lastRestore": {**RESTORE.as_status(), "step": -1}}, "lastRestore.*step"),
        ({"lastRestore": {**RESTORE.as_status(), "step": 2**60}}, "lastRestore.*step"),
        ({"lastRestore": {**RESTORE.as_status(), "worldSize": True}}, "worldSize"),
        ({"lastRestore": {**RESTORE.as_status(), "savedWorldSize": None}}, "savedWorldSize"),
        ({"lastRestore": {**RESTORE.as_status(), "source": ""}}, "source"),
        ({"lastRestore": {**RESTORE.as_status(), "source": "x" * (MAX_SOURCE + 1)}}, "source"),
        ({"lastRestore": {**RESTORE.as_status(), "source": 7}}, "source"),
        ({"lastRestore": {**RESTORE.as_status(), "seconds": -0.5}}, "seconds"),
        ({"lastRestore": {**RESTORE.as_status(), "seconds": float("nan")}}, "seconds"),
        ({"lastRestore": {**RESTORE.as_status(), "seconds": "1"}}, "seconds"),
        ({"lastRestore": {**RESTORE.as_status(), "round": 1.5}}, "round"),
        ({"restoreFailure": 12}, "restoreFailure"),
        ({"restoreFailure": "x" * (MAX_RESTORE_FAILURE + 1)}, "restoreFailure"),
        ({"restoreFailureRound": -3}, "restoreFailureRound"),
    ],
)
def test_malformed_fields_are_refused_naming_them(fields: dict[str, Any], says: str) -> None:
    with pytest.raises(HealthReportError, match=says):
        HealthReport.from_json(_with(**fields))


def test_a_huge_restore_failure_is_refused_before_it_is_parsed() -> None:
    body = json.dumps(_with(restoreFailure="x" * MAX_REPORT_BYTES))
    with pytest.raises(HealthReportError, match="larger"):
        HealthReport.loads(body)


class _Facts:
    """What a checkpoint node would hold, set by the test."""

    def __init__(self) -> None:
        self.now: CheckpointFacts = NO_CHECKPOINTS

    def __call__(self) -> CheckpointFacts:
        return self.now


def _status(facts: _Facts) -> AgentStatus:
    etcd = EtcdStatus(reachable=True, last_contact=None, unreachable_since=None)
    return AgentStatus("run", "node-0", 3, 60.0, etcd=lambda: etcd, checkpoints=facts)


def test_without_checkpoints_the_report_has_none_of_the_fields() -> None:
    report = _status(_Facts()).report()
    assert (report.last_saved_step, report.last_restore, report.restore_failure) == (
        None,
        None,
        None,
    )


def test_each_restore_is_stamped_with_the_round_it_was_first_seen_in() -> None:
    facts = _Facts()
    status = _status(facts)
    status.update(state=AgentState.RUNNING, round=2)
    first = RestoreReport(10, 4, 4, "memory", 0.5)
    facts.now = (12, first, None)
    report = status.report()
    assert report.last_saved_step == 12
    assert report.last_restore == replace(first, round=2)

    status.update(round=3)  # a later round in which nothing was restored yet
    assert status.report().last_restore == replace(first, round=2)

    again = RestoreReport(10, 4, 4, "memory", 0.5)  # an equal restore, a new one
    facts.now = (12, again, None)
    assert status.report().last_restore == replace(again, round=3)


def test_a_restore_failure_is_reported_bounded_with_its_round() -> None:
    facts = _Facts()
    status = _status(facts)
    status.update(state=AgentState.RUNNING, round=5)
    facts.now = (None, None, "x" * (MAX_RESTORE_FAILURE + 500))
    report = status.report()
    assert report.restore_failure == "x" * MAX_RESTORE_FAILURE
    assert report.restore_failure_round == 5
    assert HealthReport.loads(report.dumps()) == report
