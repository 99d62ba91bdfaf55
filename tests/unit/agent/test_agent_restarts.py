"""Pure restart facts (protocol.restarts) and the restart policy (supervision.restart_policy)."""

from __future__ import annotations

import json

import pytest
from elasticjob_agent.protocol.exit_codes import ExitCode
from elasticjob_agent.protocol.restarts import (
    BUDGET_SPENT_REASON,
    MAX_COUNT,
    MAX_VALUE_BYTES,
    SPENDS_BUDGET,
    RestartCounts,
    RestartReason,
    RestartStateError,
    budget_exhausted,
    decode_close_reason,
    decode_counter,
    decode_event_reason,
    decode_seed,
    encode_close_reason,
    encode_counter,
    encode_event,
    encode_seed,
)
from elasticjob_agent.supervision.restart_policy import (
    RestartPlan,
    exit_for_closed,
    judge_budget,
    plan_restart,
    suspects_round_loss,
)

R = RestartReason


def test_only_failures_timers_and_hangs_spend_the_budget() -> None:
    counts = RestartCounts()
    for reason in (R.MEMBERSHIP, R.PREEMPTION, R.FAILURE):
        counts = counts.plus(reason)
    counts = counts.plus(R.TIMER)
    assert counts.total == 4
    assert counts.spent == 2
    assert counts.full()["etcd-recovered"] == 0
    assert {r.value for r in R if r.spends_budget} == {"failure", "timer", "hang"}
    assert {"failure", "timer", "hang", "pod-failure"} == SPENDS_BUDGET


@pytest.mark.parametrize(
    ("by_reason", "max_restarts", "exhausted"),
    [
        ({"failure": 0}, 0, False),
        ({"failure": 1}, 0, True),
        ({"failure": 3, "membership": 10}, 3, False),
        ({"failure": 4}, 3, True),
        ({"failure": 2, "timer": 2}, 3, True),
        ({"failure": 2, "pod-failure": 1}, 3, False),
        ({"failure": 2, "pod-failure": 2}, 3, True),
        ({"preemption": 50, "etcd-recovered": 9, "pod-lost": 9}, 0, False),
    ],
)
def test_budget_rule_matches_torchrun(
    by_reason: dict[str, int], max_restarts: int, exhausted: bool
) -> None:
    assert budget_exhausted(by_reason, max_restarts) is exhausted


@pytest.mark.parametrize(
    ("observed", "round_lost", "plan"),
    [
        (R.FAILURE, False, RestartPlan(R.FAILURE, agent_counts=True)),
        (R.FAILURE, True, RestartPlan(R.ETCD_RECOVERED, agent_counts=False)),
        (R.MEMBERSHIP, False, RestartPlan(R.MEMBERSHIP, agent_counts=True)),
        (R.MEMBERSHIP, True, RestartPlan(R.ETCD_RECOVERED, agent_counts=False)),
        (R.TIMER, False, RestartPlan(R.TIMER, agent_counts=True)),
        # A timer or a preemption is ours whatever etcd holds.
        (R.TIMER, True, RestartPlan(R.TIMER, agent_counts=True)),
        (R.PREEMPTION, True, RestartPlan(R.PREEMPTION, agent_counts=True)),
        (R.ETCD_RECOVERED, False, RestartPlan(R.ETCD_RECOVERED, agent_counts=False)),
        (R.ETCD_RECOVERED, True, RestartPlan(R.ETCD_RECOVERED, agent_counts=False)),
    ],
)
def test_restart_plan(observed: RestartReason, round_lost: bool, plan: RestartPlan) -> None:
    assert plan_restart(observed, round_lost) == plan


def test_which_restarts_may_be_a_lost_round() -> None:
    assert {r for r in R if suspects_round_loss(r)} == {R.FAILURE, R.MEMBERSHIP}


@pytest.mark.parametrize(
    ("by_reason", "max_restarts", "exhausted", "detail"),
    [
        ({}, 0, False, ""),
        ({"failure": 1, "membership": 3}, 1, False, ""),
        ({"failure": 2}, 1, True, "2 restarts after failures > max_restarts=1"),
        ({"timer": 1}, 0, True, "1 restarts after failures > max_restarts=0"),
    ],
)
def test_budget_verdict(
    by_reason: dict[str, int], max_restarts: int, exhausted: bool, detail: str
) -> None:
    verdict = judge_budget(RestartCounts(by_reason), max_restarts)
    assert (verdict.exhausted, verdict.detail) == (exhausted, detail)


@pytest.mark.parametrize(
    ("reason", "code"),
    [
        (BUDGET_SPENT_REASON, ExitCode.MAX_RESTARTS_EXCEEDED),
        (None, ExitCode.RENDEZVOUS_CLOSED),
        ("SomethingElse", ExitCode.RENDEZVOUS_CLOSED),
    ],
)
def test_exit_code_of_a_closed_rendezvous(reason: str | None, code: ExitCode) -> None:
    assert exit_for_closed(reason) is code


# --- codecs: values read from etcd are untrusted ------------------------------------------------


def test_counter_round_trip() -> None:
    assert decode_counter("k", encode_counter(12)) == 12
    assert decode_counter("k", b" 7\n") == 7
    assert decode_counter("k", str(MAX_COUNT).encode()) == MAX_COUNT
    with pytest.raises(ValueError, match="outside"):
        encode_counter(-1)


@pytest.mark.parametrize(
    "raw",
    [
        b"-1",
        b"+1",
        b"",
        b"lots",
        b"1.5",
        b"1e9",
        "\u00b2".encode(),  # a superscript two: str.isdigit() says True, int() refuses
        "\u0663".encode(),  # an Arabic-Indic three
        str(MAX_COUNT + 1).encode(),
        b"9" * 5000,
        b"\xff\xfe",
    ],
)
def test_bad_counters_are_state_errors_naming_the_key(raw: bytes) -> None:
    with pytest.raises(RestartStateError, match="/job/restarts/failure"):
        decode_counter("/job/restarts/failure", raw)


def test_seed_round_trip() -> None:
    text = encode_seed({"failure": 2, "pod-failure": 1, "etcd-recovered": 1, "membership": 0})
    assert json.loads(text) == {"byReason": {"etcd-recovered": 1, "failure": 2}}
    assert decode_seed("s", text.encode()).by_reason == {"etcd-recovered": 1, "failure": 2}


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"nope", "not valid JSON"),
        (b"[]", "byReason"),
        (b'{"byReason": []}', "byReason"),
        (b'{"byReason": {"cosmic-ray": 1}}', "unknown reason 'cosmic-ray'"),
        (b'{"byReason": {"failure": -1}}', "integer in 0"),
        (b'{"byReason": {"failure": true}}', "integer in 0"),
        (b'{"byReason": {"failure": 1.0}}', "integer in 0"),
        (b'{"byReason": {"failure": NaN}}', "not valid JSON"),
        (b'{"byReason": {"failure": Infinity}}', "not valid JSON"),
        (b'{"byReason": {"failure": 10000000000000000000000}}', "integer in 0"),
        (b"[" * 100_000, "bytes, more than"),
        (b"[" * 3000 + b"]" * 3000, "bytes, more than"),
        (b"[" * 2000 + b"]" * 2000, "not valid JSON"),  # deep nesting, small body
    ],
)
def test_bad_seeds_are_state_errors_naming_the_key(raw: bytes, message: str) -> None:
    with pytest.raises(RestartStateError, match=f"restart-seed.*{message}"):
        decode_seed("/job/restart-seed", raw)


def test_event_round_trip() -> None:
    raw = encode_event(R.TIMER, "n1", 1.0)
    assert decode_event_reason("e", raw) is R.TIMER
    for bad in (b'{"reason": "x"}', b"[]", b"{", b'{"reason": null}', b"x" * (MAX_VALUE_BYTES + 1)):
        with pytest.raises(RestartStateError, match="restart event /e/1"):
            decode_event_reason("/e/1", bad)


def test_close_reason_round_trip() -> None:
    raw = encode_close_reason({"failure": 2}, "n", 1, 5.0)
    assert decode_close_reason("c", raw) == BUDGET_SPENT_REASON
    for bad in (
        b'{"reason": 1}',
        b'{"reason": "a b"}',
        b"{}",
        b"nope",
        b'{"reason": "' + b"A" * 65 + b'"}',
    ):
        with pytest.raises(RestartStateError, match="close reason /c"):
            decode_close_reason("/c", bad)
