"""The pure parts of checkpoints: shard ids, manifests, holder records, the newest complete
step, the ranks' agreement, the ring of replicas and the settings."""

from __future__ import annotations

import pytest
from elasticjob_agent.checkpoint.config import settings_from_env
from elasticjob_agent.checkpoint.manifest import (
    FileEntry,
    HolderRecord,
    ManifestError,
    ShardId,
    ShardManifest,
    complete_steps,
    newest_common,
    parse_size,
    successor,
    successors,
)
from hypothesis import given
from hypothesis import strategies as st


def _ids(*triples: tuple[int, int, int]) -> list[ShardId]:
    return [ShardId(*t) for t in triples]


@pytest.mark.parametrize(
    ("shards", "world", "want"),
    [
        ([], None, []),
        (_ids((3, 0, 2), (3, 1, 2), (2, 0, 2), (2, 1, 2)), None, [3, 2]),
        # step 3 is torn: rank 1 never saved it
        (_ids((3, 0, 2), (2, 0, 2), (2, 1, 2)), None, [2]),
        # a step saved by a world of 1 is complete for it, not for a world of 2
        (_ids((5, 0, 1), (4, 0, 2), (4, 1, 2)), None, [5, 4]),
        (_ids((5, 0, 1), (4, 0, 2), (4, 1, 2)), 2, [4]),
        # duplicates (a shard and its replica) count once
        (_ids((1, 0, 2), (1, 0, 2)), None, []),
    ],
)
def test_complete_steps(shards: list[ShardId], world: int | None, want: list[int]) -> None:
    assert complete_steps(shards, world) == want


@pytest.mark.parametrize(
    ("views", "refused", "want"),
    [
        ([[3, 2], [3, 2]], [], 3),
        # rank 1's node can reach only step 2 complete: every rank takes 2
        ([[3, 2], [2]], [], 2),
        ([[3, 2], [3, 2]], [3], 2),
        ([[3], [2]], [], None),
        ([[]], [], None),
        ([], [], None),
    ],
)
def test_newest_common(views: list[list[int]], refused: list[int], want: int | None) -> None:
    assert newest_common(views, refused) == want


@given(st.lists(st.lists(st.integers(0, 20), max_size=6), min_size=1, max_size=5))
def test_newest_common_is_in_every_view_and_the_largest_such(views: list[list[int]]) -> None:
    got = newest_common(views)
    common = set.intersection(*(set(v) for v in views))
    assert got == (max(common) if common else None)


def test_manifest_round_trips_and_rejects_what_it_must() -> None:
    m = ShardManifest(ShardId(7, 1, 4), (FileEntry("state.bin", 10, 123),), "node-a")
    assert ShardManifest.decode(m.encode()) == m
    for bad in (
        b"[]",
        b'{"version": 2}',
        b'{"version": 1, "shard": [7, 4, 4], "files": [["a", 1, 1]], "origin": "x"}',
        b'{"version": 1, "shard": [7, 1, 4], "files": [["../x", 1, 1]], "origin": "x"}',
        b'{"version": 1, "shard": [7, 1, 4], "files": [["a", 1, NaN]], "origin": "x"}',
        b'{"version": 1, "shard": [7, 1, 4], "files": [["a", 1, 1], ["a", 1, 1]], "origin": "x"}',
        b'{"version": 1, "shard": [7, 1, 4], "files": [], "origin": "x"}',
        b'{"version": 1, "shard": [7, 1, 4], "files": [["a", -1, 1]], "origin": "x"}',
        b'{"version": 1, "shard": [true, 1, 4], "files": [["a", 1, 1]], "origin": "x"}',
        b"not json",
    ):
        with pytest.raises(ManifestError):
            ShardManifest.decode(bad)


def test_holder_record_round_trips_and_rejects_garbage() -> None:
    r = HolderRecord("b", "10.0.0.2:29402", (ShardId(1, 0, 2), ShardId(1, 1, 2)))
    assert HolderRecord.decode(r.encode()) == r
    for bad in (b"{}", b'{"version": 1, "node": "", "endpoint": "", "shards": []}', b"1e999"):
        with pytest.raises(ManifestError):
            HolderRecord.decode(bad)


@pytest.mark.parametrize(
    ("nodes", "me", "want"),
    [
        (["a"], "a", None),
        (["a", "b"], "a", "b"),
        (["a", "b"], "b", "a"),
        (["a", "b", "c"], "b", "c"),
        (["a", "b", "c"], "c", "a"),
        # a node not yet in the list (its record not published) still finds its successor
        (["a", "c"], "b", "c"),
    ],
)
def test_successor_is_a_ring(nodes: list[str], me: str, want: str | None) -> None:
    assert successor(nodes, me) == want


@pytest.mark.parametrize(
    ("nodes", "me", "count", "want"),
    [
        (["a"], "a", 2, []),
        (["a", "b", "c"], "a", 1, ["b"]),
        (["a", "b", "c"], "a", 2, ["b", "c"]),
        (["a", "b", "c"], "b", 2, ["c", "a"]),
        (["a", "b", "c"], "c", 2, ["a", "b"]),
        # fewer other nodes than replicas: every other node, once
        (["a", "b", "c"], "b", 5, ["c", "a"]),
        (["a", "b", "c", "d"], "c", 2, ["d", "a"]),
        # a node not yet in the list still finds the ones after it
        (["a", "c", "d"], "b", 2, ["c", "d"]),
    ],
)
def test_successors_are_the_next_nodes_of_the_ring(
    nodes: list[str], me: str, count: int, want: list[str]
) -> None:
    assert successors(nodes, me, count) == want


@pytest.mark.parametrize("count", [1, 2, 3])
def test_any_count_consecutive_nodes_lost_leave_every_nodes_shards_on_a_survivor(
    count: int,
) -> None:
    nodes = [f"worker-{i}" for i in range(5)]
    for start in range(len(nodes)):
        lost = {nodes[(start + k) % len(nodes)] for k in range(count)}
        for me in lost:
            assert set(successors(nodes, me, count)) - lost, (me, lost)


@pytest.mark.parametrize(
    ("text", "want"), [("1024", 1024), ("8Gi", 8 << 30), ("512Mi", 512 << 20), ("2G", 2 * 10**9)]
)
def test_parse_size(text: str, want: int) -> None:
    assert parse_size(text, "x") == want


@pytest.mark.parametrize("text", ["", "-1", "1.5Gi", "8GB", "lots"])
def test_parse_size_names_what_to_fix(text: str) -> None:
    with pytest.raises(ValueError, match="memory_limit"):
        parse_size(text, "memory_limit")


def test_settings_from_env() -> None:
    assert settings_from_env({}) is None
    s = settings_from_env(
        {
            "ELASTICJOB_CHECKPOINT_MEMORY_LIMIT": "1Gi",
            "ELASTICJOB_CHECKPOINT_KEEP": "3",
            "ELASTICJOB_CHECKPOINT_PERSIST_DIR": "/data",
            "ELASTICJOB_CHECKPOINT_CACERT": "/tls/ca.crt",
            "ELASTICJOB_CHECKPOINT_CERT": "/tls/client.crt",
            "ELASTICJOB_CHECKPOINT_KEY": "/tls/client.key",
        }
    )
    assert s is not None
    assert (s.memory_limit, s.keep, s.persist_dir, s.port) == (1 << 30, 3, "/data", 29402)
    assert s.tls is not None and s.tls.cert == "/tls/client.crt"
    assert s.replicas == 1
    two = settings_from_env(
        {"ELASTICJOB_CHECKPOINT_MEMORY_LIMIT": "1Gi", "ELASTICJOB_CHECKPOINT_REPLICAS": "2"}
    )
    assert two is not None and two.replicas == 2


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"ELASTICJOB_CHECKPOINT_MEMORY_LIMIT": "lots"}, "MEMORY_LIMIT"),
        ({"ELASTICJOB_CHECKPOINT_MEMORY_LIMIT": "1Gi", "ELASTICJOB_CHECKPOINT_KEEP": "0"}, "KEEP"),
        ({"ELASTICJOB_CHECKPOINT_MEMORY_LIMIT": "1Gi", "ELASTICJOB_CHECKPOINT_KEEP": "x"}, "KEEP"),
        (
            {"ELASTICJOB_CHECKPOINT_MEMORY_LIMIT": "1Gi", "ELASTICJOB_CHECKPOINT_REPLICAS": "0"},
            "ELASTICJOB_CHECKPOINT_REPLICAS",
        ),
        (
            {"ELASTICJOB_CHECKPOINT_MEMORY_LIMIT": "1Gi", "ELASTICJOB_CHECKPOINT_REPLICAS": "8"},
            "ELASTICJOB_CHECKPOINT_REPLICAS",
        ),
        (
            {"ELASTICJOB_CHECKPOINT_MEMORY_LIMIT": "1Gi", "ELASTICJOB_CHECKPOINT_REPLICAS": "two"},
            "ELASTICJOB_CHECKPOINT_REPLICAS",
        ),
        (
            {"ELASTICJOB_CHECKPOINT_MEMORY_LIMIT": "1Gi", "ELASTICJOB_CHECKPOINT_CERT": "/c"},
            "go together",
        ),
        (
            {"ELASTICJOB_CHECKPOINT_MEMORY_LIMIT": "1Gi", "ELASTICJOB_CHECKPOINT_TIMEOUT": "inf"},
            "TIMEOUT",
        ),
    ],
)
def test_bad_settings_name_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        settings_from_env(env)
