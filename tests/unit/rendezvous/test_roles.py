"""The role exchange: the run-length table, its strict decoding, and the flow of store
operations (driven here by an in-memory dict: our own boundary)."""

from __future__ import annotations

import random

import pytest
from elasticjob_agent.errors import RendezvousStateError
from elasticjob_agent.rendezvous.role_info import RoleInfo, assign_ranks
from elasticjob_agent.rendezvous.roles import (
    TABLE_KEY,
    MultiGet,
    Run,
    SetThenGet,
    assignment,
    decode_table,
    encode_table,
    exchange,
    exchange_roles,
    role_key,
    runs_of,
)


def _infos(rng: random.Random, n: int) -> list[RoleInfo]:
    roles = ["trainer", "reader", "x"]
    return [
        RoleInfo(rng.choice(roles[: rng.randint(1, 3)]), r, rng.randint(1, 4)) for r in range(n)
    ]


def test_the_table_gives_every_rank_what_assign_ranks_gives_it() -> None:
    rng = random.Random(7)
    for _ in range(300):
        infos = _infos(rng, rng.randint(1, 40))
        runs = decode_table(encode_table(runs_of(infos)), len(infos))
        expected = assign_ranks(infos)
        assert [assignment(runs, r) for r in range(len(infos))] == expected


def test_one_role_and_one_size_is_one_run_whatever_n() -> None:
    infos = [RoleInfo("default", r, 8) for r in range(4096)]
    runs = runs_of(infos)
    assert runs == (Run("default", 8, 4096),)
    assert assignment(runs, 4095).base_global_rank == 4095 * 8
    assert len(encode_table(runs)) < 64


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (b"not json", "not JSON"),
        (b'{"v": 2, "runs": [["a", 1, 2]]}', '"v": 1'),
        (b'{"v": 1, "runs": []}', "non-empty"),
        (b'{"v": 1, "runs": [["a", 0, 2]]}', "local_world_size >= 1"),
        (b'{"v": 1, "runs": [["a", 1, true]]}', "count >= 1"),
        (b'{"v": 1, "runs": [["", 1, 2]]}', "role"),
        (b'{"v": 1, "runs": [["a", 1, 3]]}', "covers 3 nodes, the round has 2"),
    ],
)
def test_a_bad_table_is_a_state_error_naming_the_key(raw: bytes, why: str) -> None:
    with pytest.raises(RendezvousStateError, match=why) as err:
        decode_table(raw, 2)
    assert TABLE_KEY in str(err.value)


class DictStore:
    """Blocking reads of missing keys are a test bug here: every flow is driven in order."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}
        self.calls = 0

    def set(self, key: str, value: bytes) -> None:
        self.calls += 1
        self.data[key] = value

    def get(self, key: str) -> bytes:
        self.calls += 1
        return self.data[key]

    def multi_get(self, keys: list[str]) -> list[bytes]:
        self.calls += 1
        return [self.data[k] for k in keys]


def test_the_exchange_costs_two_calls_per_node_and_agrees_with_assign_ranks() -> None:
    infos = [RoleInfo("trainer", r, 2 if r % 3 else 4) for r in range(9)]
    store = DictStore()
    # Ranks 1..N-1 first write their role (their flow then blocks on the table), then rank 0.
    flows = {r: exchange(infos[r], len(infos)) for r in range(1, len(infos))}
    for r, flow in flows.items():
        op = next(flow)
        assert op == SetThenGet(role_key(r), infos[r].encode(), TABLE_KEY)
        store.set(op.set_key, op.value)
    mine = exchange_roles(store, infos[0], len(infos))
    results = {0: mine}
    for r, flow in flows.items():
        with pytest.raises(StopIteration) as done:
            flow.send(store.get(TABLE_KEY))
        results[r] = done.value.value
    assert [results[r] for r in range(len(infos))] == assign_ranks(infos)
    assert store.calls == 2 * len(infos)


class SetThenGetDictStore(DictStore):
    def set_then_get(self, set_key: str, value: bytes, get_key: str) -> bytes:
        self.calls += 1
        self.data[set_key] = value
        return self.data[get_key]


def test_a_store_that_sets_then_gets_in_one_call_is_used_so() -> None:
    store = SetThenGetDictStore()
    store.data[TABLE_KEY] = encode_table(runs_of([RoleInfo("a", 0, 2), RoleInfo("a", 1, 2)]))
    assert (
        exchange_roles(store, RoleInfo("a", 1, 2), 2)
        == assign_ranks([RoleInfo("a", 0, 2), RoleInfo("a", 1, 2)])[1]
    )
    assert store.calls == 1
    assert store.data[role_key(1)] == RoleInfo("a", 1, 2).encode()


def test_a_plain_store_sets_then_gets_in_two_calls() -> None:
    store = DictStore()
    store.data[TABLE_KEY] = encode_table(runs_of([RoleInfo("a", 0, 2), RoleInfo("a", 1, 2)]))
    exchange_roles(store, RoleInfo("a", 1, 2), 2)
    assert store.calls == 2
    assert store.data[role_key(1)] == RoleInfo("a", 1, 2).encode()


def test_rank_0_gathers_ranks_1_to_n_minus_1_in_one_multi_get() -> None:
    flow = exchange(RoleInfo("a", 0, 1), 4)
    assert next(flow) == MultiGet((role_key(1), role_key(2), role_key(3)))


def test_a_role_written_for_another_rank_is_a_state_error_naming_the_key() -> None:
    flow = exchange(RoleInfo("a", 0, 1), 3)
    next(flow)
    with pytest.raises(RendezvousStateError, match="expected 2") as err:
        flow.send([RoleInfo("a", 1, 1).encode(), RoleInfo("a", 1, 1).encode()])
    assert role_key(2) in str(err.value)


def test_a_malformed_role_is_a_state_error_naming_the_key() -> None:
    flow = exchange(RoleInfo("a", 0, 1), 2)
    next(flow)
    with pytest.raises(RendezvousStateError) as err:
        flow.send([b"{]"])
    assert role_key(1) in str(err.value)


def test_a_single_node_needs_no_store() -> None:
    store = DictStore()
    assert exchange_roles(store, RoleInfo("a", 0, 3), 1) == assign_ranks([RoleInfo("a", 0, 3)])[0]
    assert store.calls == 0
