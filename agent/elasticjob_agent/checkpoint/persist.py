"""Asynchronous persistence: complete shards copied from memory to a path, off the training
loop, and copied back when memory has lost them.

The persistence store is a ``ShardStore`` over the path (``durable``: files, manifest and
directories are fsynced before a shard counts as there), bounded by the same ``keep``. A queue
of at most ``keep`` shards per rank waits; when the disk is slower than the saves, the oldest
waiting shard is skipped (a newer one supersedes it).
"""

from __future__ import annotations

import logging
import os
import queue
import shutil
import threading

from elasticjob_agent.checkpoint.manifest import ShardId
from elasticjob_agent.checkpoint.store import CheckpointError, ShardStore

logger = logging.getLogger(__name__)


def copy_shard(source: ShardStore, target: ShardStore, shard: ShardId) -> None:
    """Copy ``shard`` from ``source`` to ``target``, checked against the source's manifest on
    arrival (``CorruptShardError`` and nothing installed on a mismatch)."""
    manifest = source.manifest(shard)
    if manifest is None:
        raise CheckpointError(f"{shard} is not held in {source.root}")
    reservation = target.reserve(shard, manifest.size)
    try:
        for entry in manifest.files:
            dst = reservation.directory / entry.name
            shutil.copyfile(source.shard_dir(shard) / entry.name, dst)
            if target.durable:
                with open(dst, "rb+") as f:
                    os.fsync(f.fileno())
    except BaseException:
        target.release(reservation)
        raise
    target.commit(reservation, origin=manifest.origin, expected=manifest)


class Persister:
    """A daemon thread that copies shards from ``memory`` to ``disk`` in the order given."""

    def __init__(self, memory: ShardStore, disk: ShardStore) -> None:
        self.memory = memory
        self.disk = disk
        self._queue: queue.Queue[ShardId | None] = queue.Queue(maxsize=64)
        self._idle = threading.Event()
        self._idle.set()
        self._thread = threading.Thread(
            target=self._run, name="elasticjob-ckpt-persist", daemon=True
        )
        self._thread.start()

    def submit(self, shard: ShardId) -> None:
        self._idle.clear()
        try:
            self._queue.put_nowait(shard)
        except queue.Full:
            logger.warning("checkpoint: persistence is behind; %s not persisted", shard)

    def wait_idle(self, timeout: float) -> bool:
        """True once every submitted shard was handled (tests and a clean shutdown)."""
        return self._idle.wait(timeout)

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=30)

    def _run(self) -> None:
        while True:
            shard = self._queue.get()
            if shard is None:
                return
            try:
                if shard.step >= max((s.step for s in self.memory.held()), default=-1) - (
                    self.disk.keep - 1
                ):
                    copy_shard(self.memory, self.disk, shard)
                    logger.info("checkpoint: persisted %s to %s", shard, self.disk.root)
            except (CheckpointError, OSError) as exc:
                logger.warning("checkpoint: persisting %s failed: %s", shard, exc)
            finally:
                if self._queue.empty():
                    self._idle.set()
