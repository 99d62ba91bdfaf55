"""HealthReport.loads on untrusted input: every refusal is a HealthReportError, never another
exception; valid reports round-trip; the limits hold (property-based where the space is large)."""

from __future__ import annotations

import contextlib
import json
from dataclasses import replace
from typing import Any

import pytest
from elasticjob_agent.protocol.health import (
    MAX_DEPTH,
    MAX_INT,
    MAX_REPORT_BYTES,
    AgentState,
    EtcdStatus,
    HealthReport,
    HealthReportError,
    WorkerStatus,
    json_depth,
)
from hypothesis import given, settings
from hypothesis import strategies as st

GOOD = HealthReport(
    run_id="ns-job-abc",
    node="job-worker-0-0",
    state=AgentState.RUNNING,
    etcd=EtcdStatus(reachable=True, last_contact=1.5e9, unreachable_since=None, endpoints=("e:1",)),
    round=3,
    world_size=8,
    restarts_total=2,
    restarts_by_reason={"failure": 1, "membership": 1},
    max_restarts=3,
    workers=(WorkerStatus(0, 123, None), WorkerStatus(1, None, -9)),
    updated_at=1.7e9,
)


def good() -> dict[str, Any]:
    return GOOD.to_json()


def test_a_valid_report_round_trips() -> None:
    assert HealthReport.loads(GOOD.dumps()) == GOOD


def test_the_round_start_fields_round_trip_and_old_reports_still_parse() -> None:
    started = replace(
        GOOD,
        round_started_at=1.7e9,
        first_step=41,
        first_step_at=1.7e9 + 5,
        previous_step=57,
        previous_step_at=1.7e9 - 20,
    )
    assert HealthReport.loads(started.dumps()) == started
    old = {
        k: v
        for k, v in good().items()
        if k not in ("roundStartedAt", "firstStep", "firstStepAt", "previousStep", "previousStepAt")
    }
    assert HealthReport.loads(json.dumps(old)) == GOOD
    for key, bad in (("firstStep", -1), ("firstStep", 1.5), ("firstStepAt", -1.0)):
        with pytest.raises(HealthReportError, match=key):
            HealthReport.loads(json.dumps({**good(), key: bad}))
    with pytest.raises(HealthReportError, match="previousStepAt"):
        HealthReport.loads(json.dumps({**good(), "previousStepAt": "x"}))


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (GOOD.dumps().replace('"worldSize": 8', '"worldSize": NaN'), "NaN"),
        (GOOD.dumps().replace('"updatedAt": 1700000000.0', '"updatedAt": Infinity'), "Infinity"),
        (GOOD.dumps().replace('"updatedAt": 1700000000.0', '"updatedAt": -Infinity'), "Infinity"),
        (GOOD.dumps().replace('"updatedAt": 1700000000.0', '"updatedAt": 1e999'), "out of range"),
        (GOOD.dumps().replace('"round": 3', '"round": ' + "9" * 5000), "digits"),
        (GOOD.dumps().replace('"round": 3', f'"round": {MAX_INT + 1}'), "round"),
        (GOOD.dumps().replace('"round": 3', '"round": -1'), "round"),
        (GOOD.dumps().replace('"round": 3', '"round": true'), "round"),
        (GOOD.dumps().replace('"round": 3', '"round": 3.5'), "round"),
        (GOOD.dumps().replace('"state": "Running"', '"state": "Dancing"'), "state"),
        (GOOD.dumps().replace('"reachable": true', '"reachable": 1'), "etcd.reachable"),
        (GOOD.dumps().replace('"failure": 1', '"failure": "1"'), "restarts.byReason.failure"),
        (GOOD.dumps().replace('"failure": 1', '"failure": 1e3'), "restarts.byReason.failure"),
        (GOOD.dumps().replace('"schemaVersion": 1', '"schemaVersion": 1.0'), "schemaVersion"),
        (GOOD.dumps().replace('"runId": "ns-job-abc"', '"runId": ["x"]'), "runId"),
        (GOOD.dumps().replace('"node": "job-worker-0-0"', '"node": "' + "n" * 300 + '"'), "node"),
        ('{"a":' * (MAX_DEPTH + 1) + "1" + "}" * (MAX_DEPTH + 1), "deeper"),
        ("[" * 100_000 + "]" * 100_000, "larger"),
        ("[" * 10_000 + "]" * 10_000, "deeper"),
        ("x" * (MAX_REPORT_BYTES + 1), "larger"),
        (b"\xff\xfe{}", "UTF-8"),
        ("", "not JSON"),
        ("[]", "JSON object"),
        ('"just a string"', "JSON object"),
        ("{}", "schemaVersion"),
    ],
)
def test_hostile_bodies_are_refused_with_a_reason(body: str | bytes, says: str) -> None:
    with pytest.raises(HealthReportError, match=says):
        HealthReport.loads(body)


def test_depth_ignores_brackets_inside_strings() -> None:
    assert json_depth('{"a": "[[[{{{\\"]]]"}') == 1
    report = good()
    report["exitReason"] = "[" * 200
    assert HealthReport.loads(json.dumps(report)).exit_reason == "[" * 200


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=30,
)
KEYS = [
    "schemaVersion", "runId", "node", "state", "round", "groupRank", "worldSize", "restarts",
    "maxRestarts", "etcd", "waitingSince", "workers", "exitReason", "updatedAt",
    "roundStartedAt", "firstStep", "firstStepAt", "previousStep", "previousStepAt",
]  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(key=st.sampled_from(KEYS), value=JSON)
def test_any_value_in_any_field_is_parsed_or_refused_cleanly(key: str, value: Any) -> None:
    report = good()
    report[key] = value
    try:
        text = json.dumps(report)  # NaN/Infinity come out as the bare words torch would send
    except (ValueError, OverflowError):
        return
    try:
        parsed = HealthReport.loads(text)
    except HealthReportError:
        return
    # Whatever was accepted is within the documented bounds.
    for number in (parsed.round, parsed.world_size, parsed.group_rank, parsed.max_restarts):
        assert number is None or 0 <= number <= MAX_INT
    assert parsed.updated_at >= 0 and parsed.updated_at != float("inf")


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=2048) | st.text(max_size=2048))
def test_arbitrary_bytes_never_escape_as_another_exception(body: bytes | str) -> None:
    with contextlib.suppress(HealthReportError):
        HealthReport.loads(body)


@settings(max_examples=200, deadline=None)
@given(
    round_=st.none() | st.integers(0, MAX_INT),
    reachable=st.booleans(),
    since=st.none() | st.floats(0, 4e9),
    reasons=st.dictionaries(
        st.sampled_from(["failure", "membership", "timer"]), st.integers(0, 10**6)
    ),
)
def test_every_report_an_agent_can_build_is_accepted(
    round_: int | None, reachable: bool, since: float | None, reasons: dict[str, int]
) -> None:
    report = HealthReport(
        run_id="r",
        node="n",
        state=AgentState.RENDEZVOUS,
        etcd=EtcdStatus(reachable=reachable, last_contact=None, unreachable_since=since),
        round=round_,
        restarts_total=sum(reasons.values()),
        restarts_by_reason=reasons,
        waiting_since=since,
    )
    assert HealthReport.loads(report.dumps()) == report
