"""The pure rule that maps a step saved by W ranks onto W' ranks: which shards each new rank
reads (hypothesis), which save the ranks agree on, how replicas are compared, why nothing was
restored, and the restore report's wire shape."""

from __future__ import annotations

from typing import Any

import pytest
from elasticjob_agent.checkpoint.manifest import ShardId
from elasticjob_agent.checkpoint.resize import (
    RestoreReport,
    choose_save,
    complete_saves,
    first_difference,
    first_mismatch,
    flatten,
    nothing_restored_reason,
    read_plan,
    replicated_entries,
    sharded_entries,
)
from hypothesis import given
from hypothesis import strategies as st


@given(saved=st.integers(1, 64), world=st.integers(1, 64))
def test_every_old_shard_is_read_and_per_rank_state_comes_from_r_mod_w(
    saved: int, world: int
) -> None:
    plans = [read_plan(r, saved, world) for r in range(world)]
    for plan in plans:
        assert plan.source == plan.rank % saved and plan.reads[0] == plan.source
        assert plan.resized == (saved != world)
    reads = [old for plan in plans for old in plan.reads]
    assert set(reads) == set(range(saved))
    if world <= saved:
        assert sorted(reads) == list(range(saved))  # each old shard once: no wasted reads
    else:
        assert all(len(plan.reads) == 1 for plan in plans)
    if world == saved:
        assert [plan.reads for plan in plans] == [(r,) for r in range(world)]


@pytest.mark.parametrize(
    ("rank", "saved", "world", "source", "reads"),
    [
        (0, 4, 2, 0, (0, 2)),
        (1, 4, 2, 1, (1, 3)),
        (5, 4, 6, 1, (1,)),
        (2, 3, 3, 2, (2,)),
    ],
)
def test_read_plan_table(
    rank: int, saved: int, world: int, source: int, reads: tuple[int, ...]
) -> None:
    plan = read_plan(rank, saved, world)
    assert (plan.source, plan.reads) == (source, reads)


def test_read_plan_refuses_a_rank_outside_the_world() -> None:
    with pytest.raises(ValueError, match="rank 2 of 2"):
        read_plan(2, 4, 2)


def _ids(*triples: tuple[int, int, int]) -> list[ShardId]:
    return [ShardId(*t) for t in triples]


def test_complete_saves_are_per_world_size() -> None:
    shards = _ids((5, 0, 1), (4, 0, 2), (4, 1, 2), (3, 0, 2), (6, 0, 4), (6, 1, 4))
    assert complete_saves(shards) == {(5, 1), (4, 2)}


@pytest.mark.parametrize(
    ("views", "refused", "world", "want"),
    [
        ([[(30, 4), (20, 4)], [(30, 4), (20, 4)]], [], 2, (30, 4)),
        ([[(30, 4), (20, 4)], [(20, 4)]], [], 2, (20, 4)),
        ([[(30, 4), (20, 4)], [(30, 4), (20, 4)]], [(30, 4)], 2, (20, 4)),
        # one step saved by two world sizes: the current one wins, else the larger
        ([[(30, 4), (30, 2)]], [], 2, (30, 2)),
        ([[(30, 4), (30, 2)]], [], 3, (30, 4)),
        ([[(30, 4)], []], [], 2, None),
        ([], [], 2, None),
    ],
)
def test_choose_save(
    views: list[list[tuple[int, int]]],
    refused: list[tuple[int, int]],
    world: int,
    want: tuple[int, int] | None,
) -> None:
    assert choose_save(views, refused, world) == want


def test_nothing_restored_names_the_lost_ranks_of_the_newest_step() -> None:
    shards = _ids((30, 0, 4), (30, 1, 4), (20, 0, 4))
    reason = nothing_restored_reason(shards, [[], []], {})
    assert "step 30 (saved by 4 ranks)" in reason and "ranks 2, 3" in reason


def test_nothing_restored_lists_each_refused_step() -> None:
    reason = nothing_restored_reason(
        _ids((30, 0, 1)), [[(30, 1)]], {(30, 1): "rank 0: corrupt", (20, 1): "rank 1: gone"}
    )
    assert reason == (
        "step 30 (saved by 1 ranks): rank 0: corrupt; step 20 (saved by 1 ranks): rank 1: gone"
    )


def test_nothing_restored_names_the_ranks_that_cannot_see_a_complete_step() -> None:
    reason = nothing_restored_reason(_ids((30, 0, 1)), [[(30, 1)], []], {})
    assert "ranks [1]" in reason


def test_flatten_names_nested_entries_in_order() -> None:
    state: dict[str, Any] = {"model": {"w": 1, "b": 2}, "optim": {"state": {0: {"m": 3}}}, "x": []}
    assert flatten(state, lambda v: v) == {
        "model.w": 1,
        "model.b": 2,
        "optim.state.0.m": 3,
        "x": [],
    }
    assert flatten({"t": (4, 5)}, lambda v: v) == {"t.0": 4, "t.1": 5}


def test_per_rank_and_sharded_entries_are_not_replicated() -> None:
    entries = {"model.w": 1, "per_rank.rng": 2, "sharded.w": 3, "per_rankish": 4}
    assert replicated_entries(entries) == {"model.w": 1, "per_rankish": 4}
    assert sharded_entries(entries) == ["sharded.w"]


def test_first_difference_names_the_entry_and_the_ranks() -> None:
    same = {"a": ("f32", 1), "b": ("f32", 2)}
    assert first_difference({0: same, 1: dict(same)}) is None
    diff = first_difference({0: same, 1: {"a": ("f32", 1), "b": ("f32", 9)}})
    assert diff is not None and (diff.entry, diff.a, diff.b) == ("b", 0, 1)
    extra = first_difference({0: same, 2: {**same, "c": ("f32", 3)}})
    assert extra is not None and (extra.entry, extra.digest_a) == ("c", None)
    # only the part compared counts
    assert (
        first_difference({0: same, 1: {"a": ("f32", 7), "b": ("f32", 8)}}, lambda d: d[0]) is None
    )


def test_first_mismatch_names_the_first_key() -> None:
    want = {"model.w": ("torch.float32", (4,)), "model.b": ("torch.float32", (1,))}
    assert first_mismatch(want, {**want, "step": None}) is None
    assert first_mismatch(want, {"model.w": ("torch.float32", (4,))}) == (
        "key 'model.b' is missing from the checkpoint"
    )
    assert first_mismatch(want, {**want, "model.w": ("torch.float32", (5,))}) == (
        "key 'model.w' is torch.float32 of shape [5] in the checkpoint but torch.float32 of "
        "shape [4] in the model"
    )
    assert first_mismatch(want, {**want, "model.extra": ("torch.float32", (1,))}) == (
        "key 'model.extra' is in the checkpoint but not in the model"
    )
    # A fresh optimizer's empty state matches the saved one's.
    fresh = {"optim.state": None, "optim.lr": None}
    saved = {"optim.state.0.m": ("torch.float32", (4,)), "optim.lr": None}
    assert first_mismatch(fresh, saved) is None
    assert first_mismatch(fresh, {"optim.lr": None}) == (
        "key 'optim.state' is missing from the checkpoint"
    )


def test_the_restore_report_round_trips_and_is_parsed_strictly() -> None:
    report = RestoreReport(30, 4, 2, "peer b", 1.23456)
    status = report.as_status()
    assert status == {
        "step": 30,
        "savedWorldSize": 4,
        "worldSize": 2,
        "source": "peer",
        "sourceNode": "b",
        "seconds": 1.235,
    }
    assert RestoreReport.from_status(status) == RestoreReport(30, 4, 2, "peer b", 1.235)
    bads: list[Any] = [
        {**status, "step": -1},
        {**status, "worldSize": True},
        {**status, "source": ""},
        {**status, "sourceNode": 7},
        {**status, "sourceNode": "n" * 300},
        {**status, "seconds": float("nan")},
        [],
    ]
    for bad in bads:
        with pytest.raises(ValueError, match="restore report"):
            RestoreReport.from_status(bad)
