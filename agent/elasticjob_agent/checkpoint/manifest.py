"""What a checkpoint shard is, how it is described on disk and on the wire, and which step every
rank can restore (pure: no I/O, no torch).

A *shard* is what one rank saved at one step: a few files (one for the plain API, DCP's
``__<rank>_<n>.distcp`` files plus ``.metadata`` for DCP's coordinator). It is named by
``ShardId(step, rank, world_size)``. Its *manifest* lists the files with their sizes and CRC-32s;
a copy whose bytes do not match its manifest is never loaded.

A step is *complete* when, for the world size it was saved with, every rank ``0..world_size-1``
has a verified shard somewhere (this node's memory, a peer's, or the persistence path).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from elasticjob_agent.protocol.checkpoint import parse_size
from elasticjob_agent.protocol.integers import IntegerError, bounded_int

__all__ = [
    "MANIFEST_NAME",
    "FileEntry",
    "HolderRecord",
    "ManifestError",
    "ShardId",
    "ShardManifest",
    "complete_steps",
    "holder_shards",
    "newest_common",
    "parse_size",
    "successor",
    "successors",
]

MANIFEST_NAME = "manifest.json"
"""Written last, atomically, in a shard's directory: a shard without it is not there."""
MAX_FILES = 4096
MAX_STEP = 2**53
MAX_WORLD = 1 << 20
MAX_MANIFEST_BYTES = 1 << 20

_FILE_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,200}$")


class ManifestError(ValueError):
    """A manifest, shard id or directory record that is malformed; the message names it."""


def _int(value: Any, name: str, low: int, high: int) -> int:
    try:
        return bounded_int(value, low, high)
    except IntegerError:
        raise ManifestError(
            f"{name} must be an integer in [{low}, {high}], got {value!r}"
        ) from None


def check_file_name(name: str) -> str:
    """A shard's file name: one path component of ``[A-Za-z0-9_.-]`` (never ``..``)."""
    if not isinstance(name, str) or not _FILE_NAME.match(name) or name in (".", ".."):
        raise ManifestError(f"invalid shard file name {name!r}")
    if name == MANIFEST_NAME:
        raise ManifestError(f"a shard file may not be named {MANIFEST_NAME}")
    return name


@dataclass(frozen=True, order=True)
class ShardId:
    """What one rank saved at one step, in a world of ``world_size`` ranks."""

    step: int
    rank: int
    world_size: int

    def __post_init__(self) -> None:
        _int(self.step, "step", 0, MAX_STEP)
        _int(self.world_size, "world_size", 1, MAX_WORLD)
        _int(self.rank, "rank", 0, self.world_size - 1)

    def as_list(self) -> list[int]:
        return [self.step, self.rank, self.world_size]

    @classmethod
    def from_list(cls, value: Any) -> ShardId:
        if not isinstance(value, list) or len(value) != 3:
            raise ManifestError(f"a shard id is [step, rank, world_size], got {value!r}")
        return cls(*(_int(v, "shard id field", 0, MAX_STEP) for v in value))

    def __str__(self) -> str:
        return f"step {self.step} rank {self.rank}/{self.world_size}"


@dataclass(frozen=True)
class FileEntry:
    """One file of a shard: its name, size in bytes and CRC-32."""

    name: str
    size: int
    crc32: int

    def __post_init__(self) -> None:
        check_file_name(self.name)
        _int(self.size, f"size of {self.name}", 0, 1 << 50)
        _int(self.crc32, f"crc32 of {self.name}", 0, 0xFFFFFFFF)


@dataclass(frozen=True)
class ShardManifest:
    """A shard's identity and files. ``origin``: the node whose rank saved it (a replica names
    the node it came from)."""

    shard: ShardId
    files: tuple[FileEntry, ...]
    origin: str

    def __post_init__(self) -> None:
        if not self.files or len(self.files) > MAX_FILES:
            raise ManifestError(f"a shard has 1..{MAX_FILES} files, got {len(self.files)}")
        names = [f.name for f in self.files]
        if len(set(names)) != len(names):
            raise ManifestError(f"{self.shard}: a file is listed twice")
        if not isinstance(self.origin, str) or not 0 < len(self.origin) <= 253:
            raise ManifestError(f"invalid origin {self.origin!r}")

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    def encode(self) -> bytes:
        return json.dumps(
            {
                "version": 1,
                "shard": self.shard.as_list(),
                "origin": self.origin,
                "files": [[f.name, f.size, f.crc32] for f in self.files],
            },
            separators=(",", ":"),
        ).encode()

    @classmethod
    def decode(cls, data: bytes) -> ShardManifest:
        """The inverse of ``encode``; ``ManifestError`` on anything else."""
        doc = _load(data, "manifest")
        if doc.get("version") != 1:
            raise ManifestError(f"unknown manifest version {doc.get('version')!r}")
        files = doc.get("files")
        if not isinstance(files, list):
            raise ManifestError("manifest files must be a list")
        entries = []
        for item in files:
            if not isinstance(item, list) or len(item) != 3:
                raise ManifestError(f"a manifest file entry is [name, size, crc32], got {item!r}")
            entries.append(FileEntry(item[0], item[1], item[2]))
        return cls(ShardId.from_list(doc.get("shard")), tuple(entries), doc.get("origin", ""))


def _load(data: bytes, what: str) -> dict[str, Any]:
    if len(data) > MAX_MANIFEST_BYTES:
        raise ManifestError(f"{what} is larger than {MAX_MANIFEST_BYTES} bytes")

    def no_constants(name: str) -> Any:
        raise ManifestError(f"{what}: {name} is not a number")

    try:
        doc = json.loads(data, parse_constant=no_constants)
    except (ValueError, UnicodeDecodeError) as exc:
        if isinstance(exc, ManifestError):
            raise
        raise ManifestError(f"{what} is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise ManifestError(f"{what} must be a JSON object")
    return doc


@dataclass(frozen=True)
class HolderRecord:
    """What one node's agent publishes in etcd: where to reach it and which shards it holds
    in memory (its own ranks' and the replicas it keeps for peers)."""

    node: str
    endpoint: str
    shards: tuple[ShardId, ...]

    def encode(self) -> bytes:
        return json.dumps(
            {
                "version": 1,
                "node": self.node,
                "endpoint": self.endpoint,
                "shards": [s.as_list() for s in self.shards],
            },
            separators=(",", ":"),
        ).encode()

    @classmethod
    def decode(cls, data: bytes) -> HolderRecord:
        doc = _load(data, "holder record")
        node, endpoint, shards = doc.get("node"), doc.get("endpoint"), doc.get("shards")
        if doc.get("version") != 1 or not isinstance(node, str) or not node:
            raise ManifestError("holder record: bad version or node")
        if not isinstance(endpoint, str) or len(endpoint) > 300:
            raise ManifestError(f"holder record of {node}: bad endpoint")
        if not isinstance(shards, list) or len(shards) > 100_000:
            raise ManifestError(f"holder record of {node}: shards must be a list")
        return cls(node, endpoint, tuple(ShardId.from_list(s) for s in shards))


def complete_steps(shards: Iterable[ShardId], world_size: int | None = None) -> list[int]:
    """Steps, newest first, for which every rank of the world size they were saved with is in
    ``shards``; with ``world_size``, only steps saved by a world of that size."""
    ranks: dict[tuple[int, int], set[int]] = {}
    for s in shards:
        if world_size is None or s.world_size == world_size:
            ranks.setdefault((s.step, s.world_size), set()).add(s.rank)
    steps = {step for (step, world), seen in ranks.items() if len(seen) == world}
    return sorted(steps, reverse=True)


def newest_common(candidates: Iterable[Iterable[int]], refused: Iterable[int] = ()) -> int | None:
    """The newest step every rank can restore: the largest step in every rank's candidate list
    (each rank's view of the complete steps), skipping ``refused`` steps (one a rank failed to
    load); ``None`` if there is none."""
    common: set[int] | None = None
    for steps in candidates:
        common = set(steps) if common is None else common & set(steps)
    if not common:
        return None
    usable = common - set(refused)
    return max(usable) if usable else None


def holder_shards(records: Mapping[str, HolderRecord]) -> dict[ShardId, list[HolderRecord]]:
    """Which holders have each shard, in node order (the order peers are tried)."""
    out: dict[ShardId, list[HolderRecord]] = {}
    for node in sorted(records):
        for shard in records[node].shards:
            out.setdefault(shard, []).append(records[node])
    return out


def successor(nodes: Iterable[str], me: str) -> str | None:
    """The first of ``successors``: the next node id after ``me`` in sorted order (wrapping);
    ``None`` when ``me`` is alone."""
    found = successors(nodes, me, 1)
    return found[0] if found else None


def successors(nodes: Iterable[str], me: str, count: int) -> list[str]:
    """The nodes that keep ``me``'s replicas: the ``count`` node ids after ``me`` in sorted
    order, wrapping (fewer when there are fewer other nodes; ``me`` need not be in ``nodes``).
    With ``count`` replicas the shards of any ``count`` nodes lost together stay on a survivor."""
    others = sorted(n for n in set(nodes) if n != me)
    ring = [n for n in others if n > me] + [n for n in others if n < me]
    return ring[: max(count, 0)]
