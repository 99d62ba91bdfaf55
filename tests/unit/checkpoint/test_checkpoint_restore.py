"""The plain API's restore into any world size, on real shard files (torch), with the ranks as
threads of one process: an in-memory node (our own boundary) and a gather over a barrier."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from elasticjob_agent.checkpoint import tensors
from elasticjob_agent.checkpoint.manifest import ShardId
from elasticjob_agent.checkpoint.node import Source
from elasticjob_agent.checkpoint.resize import RestoreReport
from elasticjob_agent.checkpoint.restore import (
    STATE_FILE,
    CheckpointMismatchError,
    NothingRestoredError,
    UnmappableEntryError,
    restore,
)
from elasticjob_agent.checkpoint.store import CheckpointError


class Node:
    """Shards as directories of real files; records what the ranks report."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.shards: dict[ShardId, Path] = {}
        self.reports: list[RestoreReport | None] = []
        self.failures: list[str] = []
        self.lock = threading.Lock()

    def save(self, shard: ShardId, state: Any) -> None:
        directory = self.root / f"{shard.step}-{shard.rank}-{shard.world_size}"
        directory.mkdir(parents=True)
        tensors.write(tensors.plan(state), directory / STATE_FILE)
        self.shards[shard] = directory

    def candidates(self) -> list[ShardId]:
        return sorted(self.shards)

    def fetch(self, shard: ShardId) -> Source:
        if shard not in self.shards:
            raise CheckpointError(f"no good copy of {shard}")
        return Source("memory", self.shards[shard])

    def restored(self, step: int, report: RestoreReport | None = None) -> None:
        with self.lock:
            self.reports.append(report)

    def restore_failed(self, reason: str) -> None:
        with self.lock:
            self.failures.append(reason)


def run_world(world: int, body: Callable[[int, Callable[[Any], list[Any]]], Any]) -> list[Any]:
    """``body(rank, gather)`` on ``world`` threads; each rank's result or exception."""
    barrier = threading.Barrier(world, timeout=30)
    slots: list[Any] = [None] * world
    results: list[Any] = [None] * world

    def gather_for(rank: int) -> Callable[[Any], list[Any]]:
        def gather(value: Any) -> list[Any]:
            slots[rank] = value
            barrier.wait()
            out = list(slots)
            barrier.wait()
            return out

        return gather

    def run(rank: int) -> None:
        try:
            results[rank] = body(rank, gather_for(rank))
        except Exception as exc:
            results[rank] = exc

    threads = [threading.Thread(target=run, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return results


def ddp_state(step: int, rank: int) -> dict[str, Any]:
    """What a DDP rank saves: replicated model and optimizer, its own RNG under per_rank."""
    return {
        "model": {"w": torch.full((3, 2), float(step)), "b": torch.zeros(2)},
        "optim": {"state": {0: {"momentum": torch.ones(3) * step}}, "lr": 0.1},
        "step": step,
        "per_rank": {"rng": torch.tensor([rank * 100 + step]), "rank": rank},
    }


def _saved(node: Node, world: int, steps: tuple[int, ...], state: Callable[..., Any]) -> None:
    for step in steps:
        for rank in range(world):
            node.save(ShardId(step, rank, world), state(step, rank))


@pytest.mark.parametrize("new_world", [1, 2, 3, 4, 6])
def test_a_step_saved_by_4_ranks_restores_into_any_world(tmp_path: Path, new_world: int) -> None:
    node = Node(tmp_path)
    _saved(node, 4, (10, 20), ddp_state)
    results = run_world(new_world, lambda r, g: restore(node, r, new_world, g))
    for rank, (report, state) in enumerate(results):
        assert (report.step, report.saved_world_size, report.world_size) == (20, 4, new_world)
        assert report.source == "memory"
        assert torch.equal(state["model"]["w"], torch.full((3, 2), 20.0))
        assert state["optim"]["lr"] == 0.1 and state["step"] == 20
        # per-rank entries: new rank r gets old rank r mod 4's
        assert state["per_rank"]["rank"] == rank % 4
        assert int(state["per_rank"]["rng"]) == (rank % 4) * 100 + 20
    assert len(node.reports) == new_world and not node.failures


def test_the_same_world_reads_its_own_shards_as_before(tmp_path: Path) -> None:
    node = Node(tmp_path)
    # Rank-dependent values that are not marked: fine in the world that saved them.
    _saved(node, 2, (5,), lambda s, r: {"w": torch.full((4,), float(s * 10 + r))})
    results = run_world(2, lambda r, g: restore(node, r, 2, g))
    assert [float(state["w"][0]) for _, state in results] == [50.0, 51.0]


def test_nothing_saved_is_a_fresh_start(tmp_path: Path) -> None:
    node = Node(tmp_path)
    assert run_world(2, lambda r, g: restore(node, r, 2, g)) == [None, None]


def test_a_torn_step_falls_back_and_a_torn_only_step_says_why(tmp_path: Path) -> None:
    node = Node(tmp_path)
    _saved(node, 4, (10, 20), ddp_state)
    del node.shards[ShardId(20, 3, 4)]
    results = run_world(2, lambda r, g: restore(node, r, 2, g))
    assert [report.step for report, _ in results] == [10, 10]
    for shard in [s for s in node.shards if s.step == 10 and s.rank >= 2]:
        del node.shards[shard]
    results = run_world(2, lambda r, g: restore(node, r, 2, g))
    for error in results:
        assert isinstance(error, NothingRestoredError)
        assert "step 20 (saved by 4 ranks)" in error.reason and "ranks 3" in error.reason
    assert len(node.failures) == 2


def test_a_shard_that_cannot_be_read_is_refused_with_its_reason(tmp_path: Path) -> None:
    node = Node(tmp_path)
    _saved(node, 2, (7,), ddp_state)
    (node.shards[ShardId(7, 1, 2)] / STATE_FILE).write_bytes(b"not a checkpoint")
    results = run_world(1, lambda r, g: restore(node, r, 1, g))
    assert isinstance(results[0], NothingRestoredError)
    assert "step 7 (saved by 2 ranks): rank 0:" in results[0].reason
    assert "not an elasticjob checkpoint file" in results[0].reason


def test_a_rank_sharded_tensor_fails_a_resize_naming_the_entry(tmp_path: Path) -> None:
    node = Node(tmp_path)

    def sharded(step: int, rank: int) -> dict[str, Any]:
        # A tensor-parallel piece: its shape depends on the rank.
        return {"model": {"w": torch.zeros(2), "tp": torch.zeros(3 + rank)}, "step": step}

    _saved(node, 4, (3,), sharded)
    for world in (2, 6):

        def body(rank: int, gather: Callable[[Any], list[Any]], w: int = world) -> Any:
            return restore(node, rank, w, gather)

        for error in run_world(world, body):
            assert isinstance(error, UnmappableEntryError)
            assert error.entry == "model.tp"
            assert "DCP" in error.reason and "rank 0 (torch.float32 of shape [3])" in error.reason


def test_a_marked_sharded_entry_restores_only_into_the_same_world(tmp_path: Path) -> None:
    node = Node(tmp_path)
    _saved(node, 2, (3,), lambda s, r: {"step": s, "sharded": {"piece": torch.full((2,), r)}})
    same = run_world(2, lambda r, g: restore(node, r, 2, g))
    assert [int(state["sharded"]["piece"][0]) for _, state in same] == [0, 1]
    (error,) = run_world(1, lambda r, g: restore(node, r, 1, g))
    assert isinstance(error, UnmappableEntryError) and error.entry == "sharded.piece"


def test_differing_values_of_the_same_shape_are_restored_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A DDP buffer (BatchNorm statistics) differs between ranks; DDP broadcasts rank 0's."""
    node = Node(tmp_path)
    _saved(node, 2, (3,), lambda s, r: {"bn": torch.full((2,), float(r)), "step": s})
    results = run_world(3, lambda r, g: restore(node, r, 3, g))
    assert [float(state["bn"][0]) for _, state in results] == [0.0, 1.0, 0.0]
    assert "entry 'bn' differs between ranks 0 and 1" in caplog.text


def test_a_state_that_does_not_match_the_template_names_the_first_key(tmp_path: Path) -> None:
    node = Node(tmp_path)
    _saved(node, 2, (3,), ddp_state)
    like = {"model": {"w": torch.zeros(3, 2), "b": torch.zeros(2)}}
    ok = run_world(2, lambda r, g: restore(node, r, 2, g, like))
    assert [report.step for report, _ in ok] == [3, 3]
    wrong = {"model": {"w": torch.zeros(3, 3), "b": torch.zeros(2)}}
    for error in run_world(2, lambda r, g: restore(node, r, 2, g, wrong)):
        assert isinstance(error, CheckpointMismatchError)
        assert "key 'model.w' is torch.float32 of shape [3, 2]" in error.reason
    missing = {"model": {"w": torch.zeros(3, 2), "b": torch.zeros(2), "c": torch.zeros(1)}}
    (error,) = run_world(1, lambda r, g: restore(node, r, 1, g, missing))
    assert isinstance(error, CheckpointMismatchError)
    assert "key 'model.c' is missing from the checkpoint" in error.reason
