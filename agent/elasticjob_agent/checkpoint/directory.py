"""Where the job's shards are: each agent publishes a ``HolderRecord`` in the job's etcd.

Key: ``<prefix>/<run_id>/ckpt/holders/<node>``, on a lease of the agent's own (TTL
``LEASE_TTL``): a node that is lost takes its record with it within a TTL, so nobody tries a
dead peer for long. The record is rewritten whenever the node's shards change and every
``REFRESH`` seconds (which also restores it after a lapsed lease). Records are read with one
range request and parsed strictly; a bad record is skipped with a warning.
"""

from __future__ import annotations

import logging
import threading

from elasticjob_agent.checkpoint.manifest import HolderRecord, ManifestError
from elasticjob_agent.etcd.retry import retry_until
from elasticjob_agent.etcd.session import EtcdSession, LeaseKeeper
from elasticjob_agent.etcd.txn import prefix_end
from elasticjob_agent.protocol.keys import JobKeys

logger = logging.getLogger(__name__)

LEASE_TTL = 10
REFRESH = 5.0
REQUEST_TIMEOUT = 10.0


def holders_prefix(keys: JobKeys) -> str:
    return f"{keys.root}/ckpt/holders/"


class HolderDirectory:
    """This node's record in etcd, and everybody's."""

    def __init__(self, session: EtcdSession, keys: JobKeys, node: str) -> None:
        self._session = session
        self._prefix = holders_prefix(keys).encode()
        self._key = self._prefix + node.encode()
        self._lease = LeaseKeeper(session.client, LEASE_TTL)
        self._record: HolderRecord | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._refresh, name="elasticjob-ckpt-dir", daemon=True
        )
        self._thread.start()

    def publish(self, record: HolderRecord) -> None:
        """Write ``record`` now (errors are logged: the refresh retries)."""
        with self._lock:
            self._record = record
        self._write()

    def _write(self) -> None:
        with self._lock:
            record = self._record
        if record is None:
            return
        try:
            self._session.run(self._put(record.encode()), timeout=REQUEST_TIMEOUT)
        except Exception as exc:  # etcd down: the next refresh tries again
            logger.warning("checkpoint: cannot publish this node's shards in etcd: %s", exc)

    async def _put(self, value: bytes) -> None:
        async def put() -> None:
            lease = await self._lease.current()
            await self._session.client.put(self._key, value, lease=lease)

        # A lost lease (etcd recreated empty, or lapsed in an outage) is replaced at once, not
        # when the keep-alive notices, so that a restore in the round that re-forms first
        # already sees this node's shards; an unreachable etcd is left to the next refresh.
        await retry_until(put, patience=0, on_lease_lost=self._lease.lost, what="publish")

    def _refresh(self) -> None:
        while not self._stop.wait(REFRESH):
            self._write()

    def records(self) -> dict[str, HolderRecord]:
        """Every node's record (this node's included), by node."""
        response = self._session.run(
            self._session.client.range(self._prefix, prefix_end(self._prefix)),
            timeout=REQUEST_TIMEOUT,
        )
        out: dict[str, HolderRecord] = {}
        for kv in response.kvs:
            try:
                record = HolderRecord.decode(bytes(kv.value))
            except ManifestError as exc:
                logger.warning("checkpoint: skipping the record at %s: %s", kv.key, exc)
                continue
            out[record.node] = record
        return out

    def close(self) -> None:
        """Stop refreshing and delete this node's record (a clean exit)."""
        self._stop.set()

        async def _leave() -> None:
            await self._lease.stop()
            await self._lease.revoke()

        try:
            self._session.run(_leave(), timeout=REQUEST_TIMEOUT)
        except Exception as exc:
            logger.info("checkpoint: leaving the directory: %s", exc)
