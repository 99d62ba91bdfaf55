"""plan_seed: the seed plus what agents counted before it landed, guarded, at most once."""

from __future__ import annotations

import json

import pytest
from elasticjob_agent.protocol.keys import JobKeys
from elasticjob_operator.core.seeding import SeedKeys, SeedStateError, Stored, plan_seed

KEYS = SeedKeys.of(JobKeys("/elasticjob", "run"))
FAILURE = KEYS.counters["failure"]
MEMBERSHIP = KEYS.counters["membership"]


def test_an_empty_etcd_gets_the_seed_and_counters_equal_to_it() -> None:
    txn = plan_seed(KEYS, {"failure": 3}, {})
    assert txn is not None
    assert txn.puts == {KEYS.seed: '{"byReason": {"failure": 3}}', FAILURE: "3"}
    assert txn.guards[KEYS.seed] == 0 and txn.guards[FAILURE] == 0


def test_counts_made_before_the_seed_landed_are_added_to_it() -> None:
    stored = {FAILURE: Stored("1", 7), MEMBERSHIP: Stored("2", 8)}
    txn = plan_seed(KEYS, {"failure": 3}, stored)
    assert txn is not None
    assert txn.puts[FAILURE] == "4"
    assert MEMBERSHIP not in txn.puts  # nothing to add; its revision still guards the write
    assert txn.guards[FAILURE] == 7 and txn.guards[MEMBERSHIP] == 8
    assert json.loads(txn.puts[KEYS.seed]) == {"byReason": {"failure": 3}}


def test_a_seeded_etcd_is_left_alone() -> None:
    assert plan_seed(KEYS, {"failure": 3}, {KEYS.seed: Stored("{}", 3)}) is None


@pytest.mark.parametrize("value", ["-1", "x", "1e3", "9" * 40])
def test_a_corrupt_counter_is_an_error_naming_the_key(value: str) -> None:
    with pytest.raises(SeedStateError, match=FAILURE):
        plan_seed(KEYS, {"failure": 1}, {FAILURE: Stored(value, 2)})
