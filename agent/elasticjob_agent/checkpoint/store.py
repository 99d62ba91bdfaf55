"""One directory of checkpoint shards, bounded in steps and bytes: the agent's memory (a tmpfs)
or the persistence path.

Layout under ``root``::

    shards/<step>/<rank>-<world_size>/<files...>, manifest.json
    staging-<writer>/<token>/<files...> a shard being written (by a rank, or received)

A shard exists once its ``manifest.json`` is in place (written last, then the directory is
renamed into ``shards/``), so a crash mid-write leaves only staging garbage, which the next
start removes. Every load re-checks the CRC-32 of every file against the manifest.

Bounds: at most ``keep`` steps (the newest, counting a step being written) and at most
``limit`` bytes (held shards plus reservations). A reservation that does not fit after dropping
the steps beyond ``keep`` is refused with ``CheckpointLimitError`` naming the limit; what is
held stays as it was.

One step more is kept while it fits in ``limit``: the newest step held *complete* here (every
rank's shard, this node's and its peers' replicas), when the ``keep`` newest are not. Without
it a node whose replication lags (its peers unreachable, or the holders' directory down in an
etcd outage) would drop the last step it could restore alone for newer steps that only it
holds a part of, and a node lost then would take every complete step with it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import shutil
import threading
import uuid
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from elasticjob_agent.checkpoint.manifest import (
    MANIFEST_NAME,
    FileEntry,
    ManifestError,
    ShardId,
    ShardManifest,
    check_file_name,
)
from elasticjob_agent.checkpoint.resize import complete_saves

logger = logging.getLogger(__name__)

CHUNK = 4 << 20
RECYCLED = "recycled.bin"
"""A file of a dropped shard left in a new reservation, for the writer to reuse its pages."""


class CheckpointError(Exception):
    """A checkpoint operation that failed; the message says what to fix."""


class CheckpointLimitError(CheckpointError):
    """A save that would take a node over its memory limit."""


class CorruptShardError(CheckpointError):
    """A shard whose bytes do not match its manifest."""


def file_crc32(path: Path, crc: int = 0) -> int:
    """CRC-32 of a file, read in chunks (zlib releases the GIL while it sums)."""
    with open(path, "rb", buffering=0) as f:
        while chunk := f.read(CHUNK):
            crc = zlib.crc32(chunk, crc)
    return crc


@dataclass(frozen=True)
class Reservation:
    """Room for one shard, and the directory its files go to."""

    token: str
    shard: ShardId
    size: int
    directory: Path


def _shard_dir_name(shard: ShardId) -> str:
    return f"{shard.rank}-{shard.world_size}"


class ShardStore:
    """Thread-safe: the agent's worker socket, its peer server and its persister share one."""

    def __init__(
        self, root: str | Path, *, keep: int, limit: int, origin: str, durable: bool = False
    ) -> None:
        self.root = Path(root)
        self.durable = durable
        """fsync the manifest and the directories (the persistence path; memory needs none)."""
        self.keep = keep
        self.limit = limit
        self.origin = origin
        self._lock = threading.Lock()
        self._held: dict[ShardId, ShardManifest] = {}
        self._reserved: dict[str, Reservation] = {}
        # Staging per writer: several nodes may persist to one shared path.
        self._staging = self.root / f"staging-{_safe(origin)}"
        (self.root / "shards").mkdir(parents=True, exist_ok=True)
        shutil.rmtree(self._staging, ignore_errors=True)
        self._staging.mkdir(parents=True, exist_ok=True)
        self._trash: queue.Queue[Path] = queue.Queue()
        threading.Thread(
            target=self._empty_trash, name="elasticjob-ckpt-trash", daemon=True
        ).start()
        self.rescan()

    # --- what is held -------------------------------------------------------------------

    def rescan(self) -> None:
        """Adopt the shards in the directory: those a previous process left (a restarted agent
        keeps its memory) and, on a shared persistence path, those other nodes wrote."""
        found: dict[ShardId, ShardManifest] = {}
        for step_dir in (self.root / "shards").iterdir():
            for shard_dir in step_dir.iterdir() if step_dir.is_dir() else ():
                try:
                    manifest = ShardManifest.decode((shard_dir / MANIFEST_NAME).read_bytes())
                except FileNotFoundError:
                    continue  # being dropped or installed right now
                except (OSError, ManifestError) as exc:
                    logger.warning("checkpoint: ignoring %s: %s", shard_dir, exc)
                    continue
                if shard_dir == self.shard_dir(manifest.shard):
                    found[manifest.shard] = manifest
        with self._lock:
            self._held = found

    def held(self) -> list[ShardId]:
        with self._lock:
            return sorted(self._held)

    def manifest(self, shard: ShardId) -> ShardManifest | None:
        with self._lock:
            return self._held.get(shard)

    def used(self) -> int:
        with self._lock:
            return self._used()

    def _used(self) -> int:
        return sum(m.size for m in self._held.values()) + sum(
            r.size for r in self._reserved.values()
        )

    def shard_dir(self, shard: ShardId) -> Path:
        return self.root / "shards" / str(shard.step) / _shard_dir_name(shard)

    # --- writing ------------------------------------------------------------------------

    def reserve(self, shard: ShardId, size: int) -> Reservation:
        """Room for ``shard`` (``size`` bytes): drops the steps beyond ``keep`` (counting this
        one), then refuses with ``CheckpointLimitError`` if the bytes still do not fit."""
        with self._lock:
            steps = {s.step for s in self._held} | {r.shard.step for r in self._reserved.values()}
            steps.add(shard.step)
            kept = set(sorted(steps, reverse=True)[: self.keep])
            dropped = self._beyond(kept, shard)
            complete = max((step for step, _ in complete_saves(self._held)), default=None)
            if complete is not None and complete not in kept:
                pinned = self._beyond(kept | {complete}, shard)
                if self._fits(size, pinned):
                    dropped = pinned
            freed = sum(self._held[s].size for s in dropped)
            if not self._fits(size, dropped):
                raise CheckpointLimitError(
                    f"checkpoint of {shard} needs {size} bytes but this node's checkpoint memory "
                    f"limit is {self.limit} bytes ({self._used() - freed} held in the "
                    f"{self.keep} steps kept): raise spec.checkpoint.memoryLimit "
                    "(ELASTICJOB_CHECKPOINT_MEMORY_LIMIT) or save less; the last good "
                    "checkpoint is kept"
                )
            token = f"{shard.step}-{shard.rank}-{uuid.uuid4().hex[:12]}"
            directory = self._staging / token
            directory.mkdir()
            self._recycle(dropped, shard, directory)
            for s in dropped:
                self._drop(s)
            reservation = Reservation(token, shard, size, directory)
            self._reserved[token] = reservation
            return reservation

    def _beyond(self, kept: set[int], shard: ShardId) -> list[ShardId]:
        """The held shards a reservation of ``shard`` drops when the steps ``kept`` stay."""
        return [s for s in self._held if s.step not in kept or s == shard]

    def _fits(self, size: int, dropped: list[ShardId]) -> bool:
        freed = sum(self._held[s].size for s in dropped)
        return size <= self.limit and self._used() - freed + size <= self.limit

    def _recycle(self, dropped: list[ShardId], shard: ShardId, directory: Path) -> None:
        """Hand the file of a dropped one-file shard (this rank's, if possible) to the new
        reservation as ``RECYCLED``: rewriting pages a tmpfs already holds is a plain memory
        copy, while fresh pages are allocated and zeroed one fault at a time."""
        single = [s for s in dropped if len(self._held[s].files) == 1]
        single.sort(key=lambda s: (s.rank != shard.rank, s.world_size != shard.world_size))
        for old in single:
            with contextlib.suppress(OSError):
                name = self._held[old].files[0].name
                os.rename(self.shard_dir(old) / name, directory / RECYCLED)
                return

    def release(self, reservation: Reservation) -> None:
        """Give up a reservation (a failed save or transfer)."""
        with self._lock:
            self._reserved.pop(reservation.token, None)
        shutil.rmtree(reservation.directory, ignore_errors=True)

    def commit(
        self,
        reservation: Reservation,
        origin: str | None = None,
        expected: ShardManifest | None = None,
        computed: dict[str, int] | None = None,
    ) -> ShardManifest:
        """Checksum the reservation's files, write the manifest and install the shard.

        With ``expected`` (a received replica), the files must match it exactly, else
        ``CorruptShardError`` and nothing is installed. ``computed``: CRC-32s by file name that
        the caller summed while writing the files (no second pass over them).
        """
        try:
            with contextlib.suppress(FileNotFoundError):
                (reservation.directory / RECYCLED).unlink()
            names = sorted(p.name for p in reservation.directory.iterdir())
            if expected is not None:
                entries = []
                for want in expected.files:
                    path = reservation.directory / want.name
                    crc = (computed or {}).get(want.name)
                    got = FileEntry(
                        want.name, path.stat().st_size, file_crc32(path) if crc is None else crc
                    )
                    if got != want:
                        raise CorruptShardError(
                            f"{reservation.shard}: {want.name} does not match its manifest"
                        )
                    entries.append(got)
                if len(names) != len(expected.files):
                    raise CorruptShardError(f"{reservation.shard}: unexpected files {names}")
            else:
                entries = [
                    FileEntry(
                        check_file_name(n),
                        (reservation.directory / n).stat().st_size,
                        file_crc32(reservation.directory / n),
                    )
                    for n in names
                ]
            manifest = ShardManifest(reservation.shard, tuple(entries), origin or self.origin)
            _write_atomic(
                reservation.directory / MANIFEST_NAME, manifest.encode(), sync=self.durable
            )
        except (OSError, ManifestError, CorruptShardError) as exc:
            self.release(reservation)
            if isinstance(exc, CorruptShardError):
                raise
            raise CheckpointError(f"cannot commit {reservation.shard}: {exc}") from exc
        self.install(reservation.directory, manifest, reservation=reservation)
        return manifest

    def install(
        self, directory: Path, manifest: ShardManifest, reservation: Reservation | None = None
    ) -> None:
        """Move a complete shard directory (files and manifest) into place."""
        target = self.shard_dir(manifest.shard)
        with self._lock:
            if reservation is not None:
                self._reserved.pop(reservation.token, None)
            if manifest.shard in self._held:
                self._drop(manifest.shard)
            target.parent.mkdir(parents=True, exist_ok=True)
            os.rename(directory, target)
            if self.durable:
                _sync_dir(target.parent)
            self._held[manifest.shard] = manifest

    def _drop(self, shard: ShardId) -> None:
        self._held.pop(shard, None)
        target = self.shard_dir(shard)
        # Rename first: a reader holding files open keeps them; the name is free at once.
        trash = self._staging / f"drop-{uuid.uuid4().hex[:12]}"
        with contextlib.suppress(OSError):
            os.rename(target, trash)
            # Freeing a tmpfs file's pages takes time: never while a rank waits in reserve().
            self._trash.put(trash)
        with contextlib.suppress(OSError):
            target.parent.rmdir()

    def _empty_trash(self) -> None:
        while True:
            shutil.rmtree(self._trash.get(), ignore_errors=True)

    def discard(self, shards: Iterable[ShardId]) -> None:
        with self._lock:
            for s in shards:
                self._drop(s)

    def discard_newer(self, step: int) -> None:
        """Drop shards newer than ``step``: after a restore to ``step`` they belong to a
        timeline the job abandoned."""
        with self._lock:
            for s in [s for s in self._held if s.step > step]:
                self._drop(s)

    # --- reading ------------------------------------------------------------------------

    def verified(self, shard: ShardId) -> Path:
        """The directory of ``shard`` after checking every file against its manifest.

        ``CheckpointError`` if it is not held; ``CorruptShardError`` (and the copy is dropped)
        if a file does not match.
        """
        manifest = self.manifest(shard)
        if manifest is None:
            raise CheckpointError(f"{shard} is not held in {self.root}")
        directory = self.shard_dir(shard)
        for entry in manifest.files:
            path = directory / entry.name
            try:
                ok = path.stat().st_size == entry.size and file_crc32(path) == entry.crc32
            except OSError:
                ok = False
            if not ok:
                logger.warning("checkpoint: %s in %s fails its checksum; dropped", shard, self.root)
                self.discard([shard])
                raise CorruptShardError(f"{shard}: {entry.name} fails its checksum")
        return directory


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:100]


def _write_atomic(path: Path, data: bytes, *, sync: bool) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        if sync:
            f.flush()
            os.fsync(f.fileno())
    os.rename(tmp, path)


def _sync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
