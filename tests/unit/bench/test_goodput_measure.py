"""The goodput benchmark's arithmetic: progress lines -> what a fault cost, goodput, rows."""

from __future__ import annotations

import json

import pytest
from goodput_bench import fault_target, parse_args
from goodput_measure import ROW_KEYS, FaultCost, fault_cost, goodput, parse_progress, row, table


def progress(*lines: str) -> str:
    return "".join(f"{line}\n" for line in lines)


RESTARTED = parse_progress(
    progress(
        "100.0 start 0",
        *(f"{100.0 + 0.5 * n} step {n}" for n in range(1, 16)),  # steps 1..15 by t=107.5
        "120.0 start 10",  # the new group resumed from the checkpoint at step 10
        *(f"{120.0 + 0.5 * (n - 10)} step {n}" for n in range(11, 21)),
    )
)


def test_a_partial_or_malformed_line_is_skipped() -> None:
    text = "1.0 start 0\n2.0 step 1\nnonsense\n3.0 step -1\n4.0 step x\n5.0 ste"
    assert [(p.time, p.event, p.step) for p in parse_progress(text)] == [
        (1.0, "start", 0),
        (2.0, "step", 1),
    ]


def test_recovery_ends_at_the_first_step_of_the_group_that_started_after_the_fault() -> None:
    cost = fault_cost(RESTARTED, 107.6, until=200)
    # Step 15 was done before the fault; the new group restarted from 10: 5 steps recomputed.
    assert cost == FaultCost(recovery_s=12.9, steps_lost=5, groups=1)


def test_a_step_the_old_group_finished_just_after_the_fault_is_not_the_recovery() -> None:
    cost = fault_cost(RESTARTED, 107.2, until=200)  # step 15 (t=107.5) came after the fault
    # ... and it is done again: recomputed like the others.
    assert cost == FaultCost(recovery_s=13.3, steps_lost=5, groups=1)


def test_without_a_new_group_the_second_step_ends_the_recovery_and_nothing_is_lost() -> None:
    cost = fault_cost(RESTARTED, 101.2, until=107.5)
    assert cost == FaultCost(recovery_s=0.8, steps_lost=0, groups=0)


def test_no_step_after_the_fault_is_no_recovery() -> None:
    cost = fault_cost(RESTARTED, 108.0, until=119.0)
    assert cost == FaultCost(recovery_s=None, steps_lost=None, groups=0)


def test_one_step_in_flight_when_the_group_died_is_no_recovery() -> None:
    # Step 15 was logged just after the fault; nothing came after it before the deadline.
    cost = fault_cost(RESTARTED, 107.4, until=119.0)
    assert cost == FaultCost(recovery_s=None, steps_lost=None, groups=0)


def test_goodput_counts_a_recomputed_step_once() -> None:
    # 20 useful steps of 0.5 s from t=100 to t=125: 10 s of 25 s.
    assert goodput(RESTARTED, step_time=0.5) == 0.4
    # A run that ended (gave up) later: the same useful time over a longer wall.
    assert goodput(RESTARTED, step_time=0.5, end=150.0) == 0.2
    assert goodput([], step_time=0.5) is None


@pytest.mark.parametrize(
    ("done", "every", "warm", "target"),
    [(0, 10, 10, 15), (3, 10, 10, 15), (6, 10, 10, 25), (40, 10, 120, 165), (0, 4, 4, 6)],
)
def test_a_fault_lands_half_way_between_two_checkpoints(
    done: int, every: int, warm: int, target: int
) -> None:
    assert fault_target(done, every, warm) == target
    assert target % every == every // 2 and target >= done + warm


def test_rows_have_exactly_the_issue_keys_and_the_table_compares_with_the_peer() -> None:
    rows = [
        row("pytorchjob/fixed", 0, "node-loss", FaultCost(None, None, 0), 0, 0.5),
        row("pytorchjob/elastic", 0, "node-loss", FaultCost(40.0, 5, 1), 0, 0.8),
        row("elasticjob/elastic", 0, "node-loss", FaultCost(10.0, 5, 1), 1, 0.9),
        row("elasticjob/fixed", 1, "node-loss", None, None, None),
    ]
    assert all(tuple(r) == ROW_KEYS for r in rows)
    assert json.loads(json.dumps({"rows": rows}))["rows"][3]["recovery_s"] is None
    lines = table(rows, peer="pytorchjob", notes={3: "not measured"}).splitlines()
    assert "0.25" in lines[4]  # 10 s against the peer's 40 s, same shape and fault
    assert lines[5].endswith("not measured")


def test_the_command_line_takes_the_issue_flags() -> None:
    args = parse_args(["--faults", "node-loss,store-loss", "--repeat", "2", "--json", "out.json"])
    assert args.faults == ["node-loss", "store-loss"] and args.repeat == 2
    assert str(args.json) == "out.json"
    with pytest.raises(SystemExit):
        parse_args(["--faults", "meteor"])
