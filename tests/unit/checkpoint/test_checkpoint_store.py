"""The shard store on a real directory: bounds (steps kept, bytes), checksums, atomic install,
adoption after a restart, and the plain API's file format (torch, no agent)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from elasticjob_agent.checkpoint import tensors
from elasticjob_agent.checkpoint.manifest import FileEntry, ShardId, ShardManifest
from elasticjob_agent.checkpoint.persist import copy_shard
from elasticjob_agent.checkpoint.store import (
    CheckpointLimitError,
    CorruptShardError,
    ShardStore,
)


def _save(store: ShardStore, shard: ShardId, payload: bytes) -> ShardManifest:
    r = store.reserve(shard, len(payload))
    (r.directory / "state.bin").write_bytes(payload)
    return store.commit(r)


def test_keeps_the_newest_steps_only(tmp_path: Path) -> None:
    store = ShardStore(tmp_path, keep=2, limit=1 << 20, origin="a")
    for step in (1, 2, 3):
        _save(store, ShardId(step, 0, 1), b"x" * 10)
    assert store.held() == [ShardId(2, 0, 1), ShardId(3, 0, 1)]
    assert not (tmp_path / "shards" / "1").exists()


def test_the_newest_complete_step_stays_while_newer_steps_are_partial(tmp_path: Path) -> None:
    # Node a of two: step 1 complete here (its own rank 0 and b's replica of rank 1); then b is
    # unreachable, so steps 2 and 3 hold only a's own rank.
    store = ShardStore(tmp_path, keep=2, limit=1 << 20, origin="a")
    _save(store, ShardId(1, 0, 2), b"x" * 10)
    _save(store, ShardId(1, 1, 2), b"x" * 10)
    _save(store, ShardId(2, 0, 2), b"x" * 10)
    _save(store, ShardId(3, 0, 2), b"x" * 10)
    assert store.held() == [ShardId(1, 0, 2), ShardId(1, 1, 2), ShardId(2, 0, 2), ShardId(3, 0, 2)]
    # b's replica of step 3 arrives: step 3 is complete here, and the next save lets step 1 go.
    _save(store, ShardId(3, 1, 2), b"x" * 10)
    _save(store, ShardId(4, 0, 2), b"x" * 10)
    assert store.held() == [ShardId(3, 0, 2), ShardId(3, 1, 2), ShardId(4, 0, 2)]


def test_the_complete_step_kept_beyond_keep_yields_to_the_byte_limit(tmp_path: Path) -> None:
    store = ShardStore(tmp_path, keep=2, limit=100, origin="a")
    _save(store, ShardId(1, 0, 2), b"x" * 20)
    _save(store, ShardId(1, 1, 2), b"x" * 20)
    _save(store, ShardId(2, 0, 2), b"x" * 20)
    # 60 held: step 3's 50 bytes fit only once step 1 goes.
    _save(store, ShardId(3, 0, 2), b"x" * 50)
    assert store.held() == [ShardId(2, 0, 2), ShardId(3, 0, 2)]


def test_over_the_limit_is_refused_naming_it_and_nothing_is_lost(tmp_path: Path) -> None:
    store = ShardStore(tmp_path, keep=2, limit=100, origin="a")
    _save(store, ShardId(1, 0, 1), b"x" * 60)
    with pytest.raises(CheckpointLimitError, match="memory limit is 100 bytes"):
        store.reserve(ShardId(2, 0, 1), 101)
    # 60 held + 50 > 100 while step 1 must stay (keep=2): refused, step 1 kept
    with pytest.raises(CheckpointLimitError):
        store.reserve(ShardId(2, 0, 1), 50)
    assert store.held() == [ShardId(1, 0, 1)]
    store.verified(ShardId(1, 0, 1))


def test_a_corrupt_copy_is_detected_and_dropped(tmp_path: Path) -> None:
    store = ShardStore(tmp_path, keep=2, limit=1 << 20, origin="a")
    _save(store, ShardId(1, 0, 1), b"abcdef" * 100)
    path = store.shard_dir(ShardId(1, 0, 1)) / "state.bin"
    data = bytearray(path.read_bytes())
    data[5] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptShardError):
        store.verified(ShardId(1, 0, 1))
    assert store.held() == []


def test_a_received_copy_must_match_the_senders_manifest(tmp_path: Path) -> None:
    store = ShardStore(tmp_path, keep=2, limit=1 << 20, origin="b")
    expected = ShardManifest(ShardId(1, 0, 2), (FileEntry("state.bin", 3, 0),), "a")
    r = store.reserve(ShardId(1, 0, 2), 3)
    (r.directory / "state.bin").write_bytes(b"abc")
    with pytest.raises(CorruptShardError):
        store.commit(r, expected=expected)
    assert store.held() == [] and store.used() == 0


def test_a_restarted_store_adopts_complete_shards_and_drops_half_written_ones(
    tmp_path: Path,
) -> None:
    store = ShardStore(tmp_path, keep=2, limit=1 << 20, origin="a")
    _save(store, ShardId(1, 0, 1), b"x" * 10)
    pending = store.reserve(ShardId(2, 0, 1), 10)
    (pending.directory / "state.bin").write_bytes(b"y" * 5)  # the writer died here
    again = ShardStore(tmp_path, keep=2, limit=1 << 20, origin="a")
    assert again.held() == [ShardId(1, 0, 1)]
    assert not pending.directory.exists()


def test_persisted_copy_round_trips(tmp_path: Path) -> None:
    memory = ShardStore(tmp_path / "mem", keep=2, limit=1 << 20, origin="a")
    disk = ShardStore(tmp_path / "disk", keep=2, limit=1 << 40, origin="a", durable=True)
    m = _save(memory, ShardId(4, 0, 1), b"z" * 1000)
    copy_shard(memory, disk, ShardId(4, 0, 1))
    assert disk.manifest(ShardId(4, 0, 1)) == m
    disk.verified(ShardId(4, 0, 1))


def test_discard_newer_after_a_restore(tmp_path: Path) -> None:
    store = ShardStore(tmp_path, keep=3, limit=1 << 20, origin="a")
    for step in (1, 2, 3):
        _save(store, ShardId(step, 0, 1), b"x")
    store.discard_newer(1)
    assert store.held() == [ShardId(1, 0, 1)]


def test_state_dict_file_round_trips_every_dtype_and_plain_values(tmp_path: Path) -> None:
    state: dict[str, Any] = {
        "f32": torch.randn(5, 3),
        "bf16": torch.randn(4, dtype=torch.bfloat16),
        "i64": torch.arange(6).reshape(2, 3),
        "bool": torch.tensor([True, False]),
        "scalar": torch.tensor(3.5),
        "empty": torch.empty(0),
        "noncontig": torch.arange(12.0).reshape(3, 4).t(),
        "opt": {"lr": 0.1, "betas": (0.9, 0.99), "state": [torch.ones(2)]},
        "step": 7,
    }
    layout = tensors.plan(state)
    tensors.write(layout, tmp_path / "s.bin")
    got = tensors.read(tmp_path / "s.bin")
    for key in ("f32", "bf16", "i64", "bool", "scalar", "empty", "noncontig"):
        assert got[key].dtype == state[key].dtype and torch.equal(got[key], state[key]), key
    assert got["opt"]["lr"] == 0.1 and got["opt"]["betas"] == (0.9, 0.99)
    assert torch.equal(got["opt"]["state"][0], torch.ones(2)) and got["step"] == 7
    assert layout.size == (tmp_path / "s.bin").stat().st_size


def test_sparse_tensors_are_refused_with_a_pointer_to_dcp() -> None:
    with pytest.raises(ValueError, match="DCP"):
        tensors.plan({"s": torch.eye(3).to_sparse()})
