"""A job saved by 4 ranks restores into 2 and into 6: two node services (their own memory, the
peer channel over mutual TLS, a real etcd), ranks as real processes training a tiny DDP model
with gloo on an ``ElasticSampler``. The resumed job continues the epoch exactly; an entry that
cannot be mapped and a model that does not match fail the restore, naming the entry."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.checkpoint_harness import RESIZE_WORKER, Node, run_ranks

pytestmark = pytest.mark.timeout(600)

LENGTH = 48  # the worker's dataset; 3 steps of 2 samples on 4 ranks consume 24 of it


def _ranks(tmp_path: Path, sockets: list[str], mode: str, *args: str) -> list[dict[str, Any]]:
    return run_ranks(tmp_path, sockets, mode, *args, worker=RESIZE_WORKER)


def _save_at_4(tmp_path: Path, a: Node, b: Node, *args: str) -> list[dict[str, Any]]:
    saved = _ranks(tmp_path, [a.socket, a.socket, b.socket, b.socket], "save", *args)
    assert all(r["flushed"] and r["step"] == 3 for r in saved)
    return saved


@pytest.mark.parametrize("new_world", [2, 6])
def test_a_job_saved_by_4_ranks_resumes_exactly_in_another_world_size(
    tmp_path: Path, nodes: Callable[..., Node], new_world: int
) -> None:
    a, b = nodes("a"), nodes("b")
    saved = _save_at_4(tmp_path, a, b)
    half = new_world // 2
    loaded = _ranks(tmp_path, [a.socket] * half + [b.socket] * half, "load")
    for rank, r in enumerate(loaded):
        assert r["restored"]["step"] == 3
        assert (r["restored"]["savedWorldSize"], r["restored"]["worldSize"]) == (4, new_world)
        assert r["restored"]["source"] in ("memory", "peer")
        assert r["digest"] == pytest.approx(saved[0]["digest_end"])  # the saved model
        assert r["per_rank"] == rank % 4 and r["rng"] == [rank % 4, 3]
    before = [i for r in saved for batch in r["consumed"] for i in batch]
    after = [i for r in loaded for batch in r["consumed"] for i in batch]
    # Every sample of the epoch exactly once: 24 before the resize, the other 24 after it.
    assert len(before) == 24 and sorted(before + after) == list(range(LENGTH))
    log = (a.work / "service.log").read_text()
    assert f"restored step 3 (saved by 4 ranks) into {new_world} ranks" in log


def test_a_rank_sharded_entry_fails_the_resize_naming_it(
    tmp_path: Path, nodes: Callable[..., Node]
) -> None:
    a, b = nodes("a"), nodes("b")
    _save_at_4(tmp_path, a, b, "--sharded-entry")
    loaded = _ranks(tmp_path, [a.socket, b.socket], "load")
    for r in loaded:
        assert (r["error"], r["entry"]) == ("UnmappableEntryError", "model.tp")
        assert "DCP" in r["reason"] and "consumed" not in r
    assert "restored nothing" in (a.work / "service.log").read_text()


def test_a_checkpoint_that_does_not_match_the_model_names_the_first_key(
    tmp_path: Path, nodes: Callable[..., Node]
) -> None:
    a, b = nodes("a"), nodes("b")
    _save_at_4(tmp_path, a, b)
    loaded = _ranks(tmp_path, [a.socket, b.socket], "load", "--like-width", "3")
    for r in loaded:
        assert r["error"] == "CheckpointMismatchError"
        assert "key 'model.weight' is torch.float32 of shape [2, 4]" in r["reason"]
