"""The goodput bench's cross-check: an ElasticJob's status.lastRecovery beside the bench's own
figures (agreement within 10 % of the seconds and one step)."""

from __future__ import annotations

from typing import Any

import pytest
from goodput_measure import FaultCost
from goodput_status import STATUS_KEYS, agrees, status_columns, status_note


@pytest.mark.parametrize(
    ("bench", "status", "verdict"),
    [
        ((10.0, 5), (10.9, 5), True),
        ((10.0, 5), (9.0, 6), True),  # 10 % of the seconds, one step
        ((10.0, 5), (11.2, 5), False),  # the seconds 12 % off
        ((10.0, 5), (10.0, 7), False),  # two steps off
        ((10.0, 40), (10.0, 44), True),  # 10 % of many steps is more than one
        ((10.0, 0), (10.0, 1), True),
        ((None, 5), (10.0, 5), None),
        ((10.0, 5), (10.0, None), None),
    ],
)
def test_status_and_bench_agree_within_ten_percent_or_one_step(
    bench: tuple[float | None, int | None], status: tuple[float | None, int | None], verdict: Any
) -> None:
    assert agrees(*bench, *status) is verdict


def test_the_rows_status_columns_and_note() -> None:
    cost = FaultCost(recovery_s=8.0, steps_lost=5, groups=1)
    columns = status_columns(cost, {"seconds": 8.4, "stepsLost": 5, "faultAt": 1.0})
    assert tuple(columns) == STATUS_KEYS
    assert columns == {"status_recovery_s": 8.4, "status_steps_lost": 5, "status_agrees": True}
    assert status_note(columns) == "status 8.4 s, 5 lost: agrees"
    off = status_columns(cost, {"seconds": 12.0, "stepsLost": 5})
    assert status_note(off) == "status 12.0 s, 5 lost: DISAGREES"
    none = status_columns(cost, None)
    assert none == dict.fromkeys(STATUS_KEYS)
    assert status_note(none) == "status: no lastRecovery"
    # What the status says is read, never trusted: a wrong type is no figure.
    odd = status_columns(cost, {"seconds": "8", "stepsLost": True})
    assert odd["status_agrees"] is None and odd["status_recovery_s"] is None
