"""The failure policy's rules, matching and codecs (protocol.failure_policy), pure."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from elasticjob_agent.protocol.exit_codes import ExitCode
from elasticjob_agent.protocol.failure import WorkerFailure, termination_message
from elasticjob_agent.protocol.failure_policy import (
    MAX_PATTERN,
    MAX_RULES,
    Action,
    Decision,
    FailureFacts,
    FailurePolicy,
    FailurePolicyError,
    PolicyDecision,
    decision_from_termination_message,
    decision_record,
    encode_close_reason,
    exit_code_of,
    facts_of,
    loads_policy,
    parse_policy,
    root_cause_text,
)
from elasticjob_agent.protocol.restarts import MAX_VALUE_BYTES, decode_close_reason
from elasticjob_agent.supervision.restart_policy import exit_for_closed


def policy(*rules: dict[str, Any]) -> FailurePolicy:
    return parse_policy({"rules": list(rules)})


def failed(code: int | None = 1, **kw: Any) -> WorkerFailure:
    return WorkerFailure(local_rank=0, time=1.0, rank=0, pod="j-worker-0-0", exit_code=code, **kw)


# --- matching --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("operator", "values", "code", "matches"),
    [
        ("In", [3], 3, True),
        ("In", [3], 4, False),
        ("In", [3, 4], 4, True),
        ("NotIn", [1], 3, True),
        ("NotIn", [1, 3], 3, False),
        ("In", [3], None, False),
        ("NotIn", [3], None, False),  # no exit code (a hang) matches neither
    ],
)
def test_exit_codes_in_and_not_in(
    operator: str, values: list[int], code: int | None, matches: bool
) -> None:
    p = policy({"action": "FailJob", "onExitCodes": {"operator": operator, "values": values}})
    decision = p.decide(FailureFacts("failure", code))
    assert decision == (Decision(Action.FAIL_JOB, 0) if matches else Decision(Action.COUNT, None))


def test_the_first_matching_rule_wins_and_no_match_counts() -> None:
    p = policy(
        {"action": "Ignore", "onExitCodes": {"operator": "In", "values": [4]}},
        {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [3, 4]}},
        {"action": "Count", "onReasons": ["failure"]},
    )
    assert p.decide(FailureFacts("failure", 4)) == Decision(Action.IGNORE, 0)
    assert p.decide(FailureFacts("failure", 3)) == Decision(Action.FAIL_JOB, 1)
    assert p.decide(FailureFacts("failure", 1)) == Decision(Action.COUNT, 2)
    assert p.decide(FailureFacts("hang")) == Decision(Action.COUNT, None)
    assert FailurePolicy().decide(FailureFacts("failure", 3)) == Decision(Action.COUNT, None)


def test_every_condition_of_a_rule_must_hold() -> None:
    p = policy(
        {
            "action": "FailJob",
            "onExitCodes": {"operator": "In", "values": [1]},
            "onRootCause": {"pattern": "ImportError"},
            "onReasons": ["failure"],
        }
    )
    text = "rank 0 exited with code 1: ImportError: no module named foo"
    assert p.decide(FailureFacts("failure", 1, text)).action is Action.FAIL_JOB
    assert p.decide(FailureFacts("timer", 1, text)).action is Action.COUNT
    assert p.decide(FailureFacts("failure", 2, text)).action is Action.COUNT
    assert p.decide(FailureFacts("failure", 1, "ValueError")).action is Action.COUNT


def test_root_cause_pattern_searches_the_summary_and_the_stderr_tail() -> None:
    p = policy({"action": "FailJob", "onRootCause": {"pattern": r"CUDA error: .*illegal"}})
    with_tail = failed(1, output_tail="...\nRuntimeError: CUDA error: an illegal memory access\n")
    assert p.decide(facts_of("failure", with_tail)).action is Action.FAIL_JOB
    typed = failed(1, exception_type="ImportError", message="No module named 'apex'")
    p2 = policy({"action": "FailJob", "onRootCause": {"pattern": r"^rank 0 .*ImportError"}})
    assert p2.decide(facts_of("failure", typed)).action is Action.FAIL_JOB
    assert "ImportError: No module named 'apex'" in root_cause_text(typed)


def test_reasons_and_oom_killed() -> None:
    p = policy(
        {"action": "FailJob", "onReasons": ["OOMKilled"]},
        {"action": "Ignore", "onReasons": ["hang", "timer"]},
    )
    killed = failed(None, signal="SIGKILL")
    assert p.decide(facts_of("failure", killed, oom_killed=True)) == Decision(Action.FAIL_JOB, 0)
    assert p.decide(facts_of("failure", killed)) == Decision(Action.COUNT, None)
    assert p.decide(facts_of("hang", None)) == Decision(Action.IGNORE, 1)
    assert p.decide(FailureFacts("pod-failure", 1)) == Decision(Action.COUNT, None)


def test_a_signal_is_exit_code_128_plus_n_as_kubernetes_shows_it() -> None:
    assert exit_code_of(failed(None, signal="SIGKILL")) == 137
    assert exit_code_of(failed(None, signal="SIGSEGV")) == 139
    assert exit_code_of(failed(3)) == 3
    assert exit_code_of(failed(None, signal="SIGNOPE")) is None
    assert exit_code_of(failed(None)) is None


def test_catastrophic_patterns_run_in_linear_time() -> None:
    """``(a+)+$`` takes exponential time on Python's backtracking engine; RE2 does not."""
    p = policy({"action": "FailJob", "onRootCause": {"pattern": "(a+)+$"}})
    text = "a" * 5000 + "!"
    started = time.monotonic()
    assert p.decide(FailureFacts("failure", 1, text)).action is Action.COUNT
    assert time.monotonic() - started < 5.0  # Python's re: beyond the age of the universe


# --- rejections ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rules", "field", "says"),
    [
        ([{"action": "Retry", "onReasons": ["failure"]}], "rules[0].action", "FailJob, Ignore"),
        ([{"onReasons": ["failure"]}], "rules[0].action", "one of"),
        ([{"action": "FailJob"}], "rules[0] has no condition", "onExitCodes"),
        ([{"action": "Ignore", "onReasons": ["membership"]}], "rules[0].onReasons[0]", "never"),
        ([{"action": "Ignore", "onReasons": []}], "rules[0].onReasons", "1 to"),
        ([{"action": "Ignore", "onReasons": ["hang", "hang"]}], "rules[0].onReasons", "repeat"),
        (
            [{"action": "Ignore", "onExitCodes": {"operator": "Is", "values": [1]}}],
            "rules[0].onExitCodes.operator",
            "In or NotIn",
        ),
        (
            [{"action": "Ignore", "onExitCodes": {"operator": "In", "values": [0]}}],
            "rules[0].onExitCodes.values",
            "0 is success",
        ),
        (
            [{"action": "Ignore", "onExitCodes": {"operator": "In", "values": [256]}}],
            "rules[0].onExitCodes.values[0]",
            "0..255",
        ),
        (
            [{"action": "Ignore", "onExitCodes": {"operator": "In", "values": []}}],
            "rules[0].onExitCodes.values",
            "1 to",
        ),
        (
            [{"action": "FailJob", "onRootCause": {"pattern": "foo("}}],
            "rules[0].onRootCause.pattern",
            "not a valid RE2",
        ),
        (
            [{"action": "FailJob", "onRootCause": {"pattern": r"(a)\1"}}],
            "rules[0].onRootCause.pattern",
            "backreferences",
        ),
        (
            [{"action": "FailJob", "onRootCause": {"pattern": "x" * (MAX_PATTERN + 1)}}],
            "rules[0].onRootCause.pattern",
            f"at most {MAX_PATTERN}",
        ),
        (
            [{"action": "FailJob", "onRootCause": {"pattern": ""}}],
            "rules[0].onRootCause.pattern",
            "non-empty",
        ),
        ([{"action": "FailJob", "onExitcodes": {}}], "rules[0]: unknown field", "onExitcodes"),
    ],
)
def test_bad_rules_are_rejected_naming_the_field(
    rules: list[dict[str, Any]], field: str, says: str
) -> None:
    with pytest.raises(FailurePolicyError) as info:
        parse_policy({"rules": rules})
    assert f"spec.failurePolicy.{field}" in str(info.value)
    assert says in str(info.value)
    assert "b'" not in str(info.value)  # RE2's message as text, not bytes


def test_policy_shape_limits() -> None:
    rule = {"action": "Ignore", "onReasons": ["failure"]}
    assert len(parse_policy({"rules": [rule] * MAX_RULES}).rules) == MAX_RULES
    with pytest.raises(FailurePolicyError, match="at most 20"):
        parse_policy({"rules": [rule] * (MAX_RULES + 1)})
    with pytest.raises(FailurePolicyError, match="must be an object"):
        parse_policy([rule])
    with pytest.raises(FailurePolicyError, match="unknown field 'rule'"):
        parse_policy({"rule": [rule]})
    assert parse_policy(None) == FailurePolicy()
    with pytest.raises(FailurePolicyError, match="not valid JSON"):
        loads_policy("{rules: []}", "--failure-policy f.json")
    with pytest.raises(FailurePolicyError, match="not valid JSON"):
        loads_policy('{"rules": [{"action": "Ignore", "onExitCodes": NaN}]}', "x")


def test_a_policy_round_trips_through_its_json() -> None:
    p = policy(
        {"action": "Ignore", "onExitCodes": {"operator": "NotIn", "values": [4, 1]}},
        {"action": "FailJob", "onRootCause": {"pattern": "x"}, "onReasons": ["timer"]},
    )
    assert loads_policy(p.dumps(), "again") == p


# --- the decision record ---------------------------------------------------------------------


def test_decision_record_round_trips_and_is_strict() -> None:
    facts = facts_of("failure", failed(3))
    record = decision_record(Decision(Action.FAIL_JOB, 2), facts, 7, 100.5, "rank 0 exited 3")
    assert record is not None
    assert PolicyDecision.from_json(json.loads(json.dumps(record.to_json()))) == record
    assert "rules[2] (FailJob)" in record.summary() and "rank 0 exited 3" in record.summary()
    assert decision_record(Decision(Action.COUNT, None), facts, 7, 1.0, None) is None
    bad: object
    for bad in (
        {**record.to_json(), "rule": -1},
        {**record.to_json(), "rule": True},
        {**record.to_json(), "action": "Explode"},
        {**record.to_json(), "reason": "membership"},
        {**record.to_json(), "rootCause": "x" * 2000},
        {**record.to_json(), "time": float("nan")},
        [],
    ):
        with pytest.raises(FailurePolicyError):
            PolicyDecision.from_json(bad)


def test_the_decision_travels_in_the_termination_message() -> None:
    failure = failed(3, exception_type="SystemExit")
    record = PolicyDecision(Action.FAIL_JOB, 0, "failure", 1, failure.summary(), 5.0)
    text = termination_message(failure, decision=record.to_json()).decode()
    assert decision_from_termination_message(text) == record
    assert decision_from_termination_message(failure.summary()) is None
    broken = text.replace('"FailJob"', '"Boom"')
    assert decision_from_termination_message(broken) is None


def test_the_close_reason_of_a_fail_job_stays_small_and_maps_to_its_exit_code() -> None:
    record = PolicyDecision(Action.FAIL_JOB, 0, "failure", 1, "\u00e9" * 1024, 5.0)
    raw = encode_close_reason(record, "node-a")
    assert len(raw) <= MAX_VALUE_BYTES
    reason = decode_close_reason("k", raw)
    assert reason == "FailurePolicy"
    assert exit_for_closed(reason) is ExitCode.FAILURE_POLICY
