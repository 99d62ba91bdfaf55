"""One node's checkpoints: its memory store, its peers and its persistence path.

``CheckpointNode`` is what a rank's save and load talk to. In the agent it serves the node's
workers through ``checkpoint.service`` and its peers through ``checkpoint.peer``; under plain
``torchrun`` (no agent) each rank runs one in-process, with no peers.

- Save: ``reserve`` (the limit is checked here, before the rank copies anything), the rank
  writes its files into the reservation's directory (the only time training blocks), then
  ``commit``, which returns at once. A background thread checksums the shard, installs it,
  publishes it in etcd, pushes it to the agents of the next ``replicas`` nodes (in node
  order, each push on its own) and queues it for persistence. A shard saved while the holders
  cannot be read (an etcd outage) is replicated every ``REPLICATION_RETRY_S`` until they can,
  while the node still holds it.
- Load: ``candidates`` lists the shards this node can reach (its memory, every peer's record in
  etcd, the persistence path); the ranks agree on a step (``checkpoint.api``); ``fetch`` then
  makes a verified copy of one shard local, trying this node's memory, then each peer that
  holds it, then the persistence path. A copy that fails its checksum is dropped and the next
  source tried; every peer transfer has a deadline.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from elasticjob_agent.checkpoint import peer
from elasticjob_agent.checkpoint.config import CheckpointSettings
from elasticjob_agent.checkpoint.manifest import HolderRecord, ShardId, successors
from elasticjob_agent.checkpoint.persist import Persister, copy_shard
from elasticjob_agent.checkpoint.resize import RestoreReport
from elasticjob_agent.checkpoint.store import (
    CheckpointError,
    CorruptShardError,
    Reservation,
    ShardStore,
)

logger = logging.getLogger(__name__)

DISK_LIMIT = 1 << 60
"""The persistence path is bounded by ``keep`` steps, not bytes."""
REPLICATION_RETRY_S = 5.0
"""How often shards whose replication could not start are tried again."""


class Directory(Protocol):
    """Where the job's holder records live (etcd in the agent; absent without one)."""

    def publish(self, record: HolderRecord) -> None: ...

    def records(self) -> dict[str, HolderRecord]: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class Source:
    """Where ``fetch`` found a shard: ``memory``, ``peer <node>`` or ``disk``."""

    kind: str
    directory: Path


class CheckpointNode:
    def __init__(
        self,
        settings: CheckpointSettings,
        node: str,
        *,
        directory: Directory | None = None,
        endpoint: str | None = None,
        bind_host: str = "0.0.0.0",
        shared_directory: bool = False,
    ) -> None:
        self.settings = settings
        self.node = node
        # Without an agent, each local rank is a writer of its own on the node's directory and
        # re-reads it to see the others' shards.
        self._shared = shared_directory
        self.memory = ShardStore(
            settings.directory, keep=settings.keep, limit=settings.memory_limit, origin=node
        )
        self.disk: ShardStore | None = None
        self._persister: Persister | None = None
        if settings.persist_dir:
            self.disk = ShardStore(
                settings.persist_dir,
                keep=settings.keep,
                limit=DISK_LIMIT,
                origin=node,
                durable=True,
            )
            self._persister = Persister(self.memory, self.disk)
        self._directory = directory
        self._server: peer.PeerServer | None = None
        self.endpoint: str | None = None
        if settings.tls is not None and directory is not None:
            self._server = peer.PeerServer(
                self.memory,
                settings.tls,
                bind_host,
                settings.port,
                timeout=settings.transfer_timeout,
            )
            self._server.on_replica.append(lambda _m: self.publish())
            host = endpoint or settings.addr or "127.0.0.1"
            self.endpoint = peer.join_endpoint(host, self._server.port)
        self._reservations: dict[str, Reservation] = {}
        self._lock = threading.Lock()
        self._jobs: queue.Queue[Callable[[], None] | None] = queue.Queue()
        self._pending = 0
        self._idle = threading.Condition(self._lock)
        self.replication_errors = 0
        # Own shards whose holders could not be read: tried again by the worker thread alone.
        self._unreplicated: set[ShardId] = set()
        self.last_restore: RestoreReport | None = None
        """The last restore a rank of this node reported (``restored``)."""
        self.restore_failure: str | None = None
        """Why the last restore on this node restored nothing although a checkpoint exists
        (``restore_failed``); cleared by the next successful one."""
        self._thread = threading.Thread(target=self._work, name="elasticjob-ckpt", daemon=True)
        self._thread.start()
        self.publish()

    # --- save ---------------------------------------------------------------------------

    def reserve(self, shard: ShardId, size: int) -> Reservation:
        """Room for a rank's shard; ``CheckpointLimitError`` names the limit."""
        if self._shared:
            self.memory.rescan()
        reservation = self.memory.reserve(shard, size)
        with self._lock:
            self._reservations[reservation.token] = reservation
        return reservation

    def abort(self, token: str) -> None:
        with self._lock:
            reservation = self._reservations.pop(token, None)
        if reservation is not None:
            self.memory.release(reservation)

    def commit(self, token: str) -> None:
        """The rank's files are written: finish the shard in the background."""
        with self._lock:
            reservation = self._reservations.pop(token, None)
            if reservation is None:
                raise CheckpointError(f"no reservation {token!r} (already committed or aborted?)")
            self._pending += 1
        self._jobs.put(lambda: self._finish(reservation))

    def _finish(self, reservation: Reservation) -> None:
        manifest = self.memory.commit(reservation)
        logger.info("checkpoint: %s saved (%d bytes)", manifest.shard, manifest.size)
        self.publish()
        if self._persister is not None:
            self._persister.submit(manifest.shard)
        self._replicate(manifest.shard)

    def _replicate(self, shard: ShardId) -> None:
        if self._directory is None or self.settings.tls is None:
            return
        try:
            records = self._directory.records()
        except Exception as exc:
            logger.warning(
                "checkpoint: cannot read the holders to replicate %s (tried again every %.0f s): "
                "%s",
                shard,
                REPLICATION_RETRY_S,
                exc,
            )
            self.replication_errors += 1
            self._unreplicated.add(shard)
            return
        endpoints = [n for n, r in records.items() if r.endpoint]
        targets = successors(endpoints, self.node, self.settings.replicas)
        if not targets:
            if shard not in self._unreplicated:
                logger.info("checkpoint: no peer to replicate %s to (memory and disk only)", shard)
            # else: after an outage the peers' records come back one by one as their leases
            # are renewed; tried again while this node holds the shard.
            return
        self._unreplicated.discard(shard)
        for target in targets:
            # each target on its own: one unreachable peer leaves the others their copy
            try:
                peer.push(
                    records[target].endpoint,
                    self.settings.tls,
                    self.memory,
                    shard,
                    timeout=self.settings.transfer_timeout,
                )
                logger.info("checkpoint: %s replicated to %s", shard, target)
            except CheckpointError as exc:
                self.replication_errors += 1
                logger.warning("checkpoint: replicating %s to %s failed: %s", shard, target, exc)

    def _work(self) -> None:
        while True:
            try:
                job = self._jobs.get(timeout=REPLICATION_RETRY_S if self._unreplicated else None)
            except queue.Empty:
                self._retry_replication()
                continue
            if job is None:
                return
            try:
                job()
            except Exception as exc:
                logger.warning("checkpoint: %s", exc)
            finally:
                with self._idle:
                    self._pending -= 1
                    self._idle.notify_all()

    def _retry_replication(self) -> None:
        """Replicate the shards still held whose holders could not be read, newest first;
        stop at the first that still cannot (the outage goes on)."""
        self._unreplicated &= set(self.memory.held())
        for shard in sorted(self._unreplicated, key=lambda s: (-s.step, s.rank)):
            self._replicate(shard)
            if shard in self._unreplicated:
                return

    def flush(self, timeout: float) -> bool:
        """Wait until every committed shard is installed, replicated and persisted; False if
        that did not happen within ``timeout`` seconds."""
        with self._idle:
            if not self._idle.wait_for(lambda: self._pending == 0, timeout):
                return False
        return self._persister is None or self._persister.wait_idle(timeout)

    def publish(self) -> None:
        if self._directory is not None:
            self._directory.publish(
                HolderRecord(self.node, self.endpoint or "", tuple(self.memory.held()))
            )

    # --- load ---------------------------------------------------------------------------

    def candidates(self) -> list[ShardId]:
        """Every shard this node can reach (duplicates removed)."""
        if self._shared:
            self.memory.rescan()
        found = set(self.memory.held())
        if self._directory is not None:
            try:
                for record in self._directory.records().values():
                    if record.endpoint or record.node == self.node:
                        found.update(record.shards)
            except Exception as exc:
                logger.warning("checkpoint: cannot read the peers' shards: %s", exc)
        if self.disk is not None:
            self.disk.rescan()
            found.update(self.disk.held())
        return sorted(found)

    def fetch(self, shard: ShardId) -> Source:
        """A verified local copy of ``shard``: memory, then each peer holding it, then disk.

        ``CheckpointError`` naming every source tried when none has a good copy.
        """
        tried: list[str] = []
        tls = self.settings.tls
        if self._shared:
            self.memory.rescan()
        try:
            return Source("memory", self.memory.verified(shard))
        except CheckpointError as exc:
            tried.append(f"memory: {exc}")
        for node, endpoint in self._peers_holding(shard):
            if tls is None:
                break
            try:
                peer.fetch(
                    endpoint,
                    tls,
                    self.memory,
                    shard,
                    timeout=self.settings.transfer_timeout,
                )
                self.publish()
                return Source(f"peer {node}", self.memory.shard_dir(shard))
            except CheckpointError as exc:
                logger.warning("checkpoint: %s from %s: %s", shard, node, exc)
                tried.append(f"peer {node}: {exc}")
        if self.disk is not None:
            try:
                self.disk.rescan()
                self.disk.verified(shard)
                copy_shard(self.disk, self.memory, shard)
                return Source("disk", self.memory.shard_dir(shard))
            except (CheckpointError, OSError) as exc:
                tried.append(f"disk: {exc}")
        raise CheckpointError(f"no good copy of {shard}: " + "; ".join(tried))

    def _peers_holding(self, shard: ShardId) -> list[tuple[str, str]]:
        if self._directory is None or self.settings.tls is None:
            return []
        try:
            records = self._directory.records()
        except Exception as exc:
            logger.warning("checkpoint: cannot read the peers' shards: %s", exc)
            return []
        return [
            (node, r.endpoint)
            for node, r in sorted(records.items())
            if node != self.node and r.endpoint and shard in r.shards
        ]

    def restored(self, step: int, report: RestoreReport | None = None) -> None:
        """The job resumed from ``step``: newer shards belong to an abandoned timeline.
        ``report``: what the rank restored (kept as ``last_restore``)."""
        if report is not None:
            self.last_restore = report
            self.restore_failure = None
            logger.info(
                "checkpoint: a rank restored step %d (saved by %d ranks) into %d ranks from %s "
                "in %.2fs",
                report.step,
                report.saved_world_size,
                report.world_size,
                report.source,
                report.seconds,
            )
        self.memory.discard_newer(step)
        if self.disk is not None:
            self.disk.discard_newer(step)
        self.publish()

    def restore_failed(self, reason: str) -> None:
        """A rank found a checkpoint but restored nothing, for ``reason`` (kept as
        ``restore_failure``)."""
        logger.warning("checkpoint: a rank restored nothing: %s", reason)
        self.restore_failure = reason

    def close(self) -> None:
        self._jobs.put(None)
        self._thread.join(timeout=30)
        if self._persister is not None:
            self._persister.close()
        if self._server is not None:
            self._server.close()
        if self._directory is not None:
            self._directory.close()


__all__ = ["CheckpointNode", "CorruptShardError", "Directory", "Source"]
