"""``EtcdRendezvousHandler``: torch's ``RendezvousHandler`` on etcd v3 (backend ``etcd-v3``)."""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable
from datetime import timedelta

from torch.distributed.elastic.rendezvous.api import (
    RendezvousHandler,
    RendezvousInfo,
    RendezvousStoreInfo,
)

from elasticjob_agent.etcd.messages import op_range, prefix_end
from elasticjob_agent.etcd.session import EtcdSession
from elasticjob_agent.ports import free_port
from elasticjob_agent.rendezvous import transactions
from elasticjob_agent.rendezvous.config import BACKEND_NAME, RendezvousConfig
from elasticjob_agent.rendezvous.executor import Executor, Outcome
from elasticjob_agent.rendezvous.state import Context
from elasticjob_agent.rendezvous.store import EtcdStore
from elasticjob_agent.rendezvous.supervised_handler import SupervisedHandler
from elasticjob_agent.rendezvous.wire import RendezvousKeys, decode_int

log = logging.getLogger(__name__)


class EtcdRendezvousHandler(RendezvousHandler, SupervisedHandler):
    """Dynamic rendezvous with torch's semantics (see docs/rendezvous.md).

    All methods are synchronous and thread-safe; the etcd work runs on a private event loop.
    Besides torch's interface: ``round`` (the last completed round), ``standby_since()`` (a
    spare waiting for a place), ``etcd_status()``,
    ``leave()`` (on SIGTERM), ``members_alive()`` (False once a member of the current round
    is gone: re-rendezvous), ``holds_membership()`` (our own key is still there: False means our
    lease lapsed) and ``round_state_lost()`` (etcd lost the round: re-rendezvous).
    """

    def __init__(
        self,
        config: RendezvousConfig,
        *,
        clock: Callable[[], float] = time.time,
        session: EtcdSession | None = None,
    ) -> None:
        self.config = config
        self._keys = RendezvousKeys.of(config.keys)
        # ``session``: the agent process's one session (shared with its restart counter).
        self._session = session or EtcdSession(
            config.endpoints,
            request_timeout=config.request_timeout,
            lease_ttl=config.lease_ttl,
        )
        self._executor = Executor(
            self._session.client,
            self._keys,
            config.node_id,
            self._session.lease,
            etcd_timeout=config.etcd_timeout,
            clock=clock,
            advertise=lambda: (config.local_addr or socket.getfqdn(), free_port("")),
        )
        self._clock = clock
        self._lock = threading.Lock()
        self._outcome: Outcome | None = None
        self._shut_down = False

    # --- torch's RendezvousHandler ---------------------------------------------------------

    def get_backend(self) -> str:
        return BACKEND_NAME

    @property
    def use_agent_store(self) -> bool:
        return False

    def get_run_id(self) -> str:
        return self.config.run_id

    @property
    def round(self) -> int | None:
        """The last round this node completed, ``None`` before the first."""
        outcome = self._outcome
        return outcome.round if outcome is not None else None

    def next_rendezvous(self) -> RendezvousInfo:
        """Block until a round completes with this node in it.

        Raises ``RendezvousClosedError``, ``RendezvousTimeoutError`` (join timeout, final),
        ``RendezvousConnectionError`` (etcd unreachable past ``etcd_timeout``) or
        ``RendezvousStateError`` (malformed state in etcd).
        """
        cfg = self.config
        start = self._clock()
        with self._lock:
            previous = self._outcome
            ctx = Context(
                min_nodes=cfg.min_nodes,
                max_nodes=cfg.max_nodes,
                last_call_timeout=cfg.last_call_timeout,
                join_deadline=start + cfg.join_timeout,
                recheck_interval=cfg.heartbeat,
                member_of=previous.round if previous is not None else None,
                join_timeout=cfg.join_timeout,
            )
            guess = previous.round if previous is not None else 0
            outcome = self._session.run(self._executor.next_rendezvous(ctx, guess))
            self._outcome = outcome
        master = (outcome.master_addr, outcome.master_port)
        log.info(
            "rendezvous complete: run_id=%s round=%d node=%s rank=%d world_size=%d "
            "master=%s:%d in %.3fs",
            cfg.run_id,
            outcome.round,
            cfg.node_id,
            outcome.rank,
            outcome.world_size,
            master[0],
            master[1],
            self._clock() - start,
        )
        store = EtcdStore(
            self._session,
            self._keys.store_prefix(outcome.round),
            timedelta(seconds=cfg.join_timeout),
            recheck_interval=cfg.heartbeat,
        )
        if outcome.rank == 0:
            # For tools that read the store like torch's RendezvousStoreInfo.build() does.
            store.set(RendezvousStoreInfo.MASTER_ADDR_KEY, master[0])
            store.set(RendezvousStoreInfo.MASTER_PORT_KEY, str(master[1]))
        bootstrap = RendezvousStoreInfo(master_addr=master[0], master_port=master[1])
        return RendezvousInfo(store, outcome.rank, outcome.world_size, bootstrap)

    def standby_since(self) -> float | None:
        """While ``next_rendezvous()`` blocks: since when (unix time) this node stands by as a
        spare (its round completed with ``max_nodes`` members without it; it joins the next
        round, with no join timeout meanwhile). ``None`` otherwise. Thread-safe."""
        return self._executor.standby_since

    def is_closed(self) -> bool:
        kv = self._session.run(
            self._executor.call(lambda: self._session.client.get(self._keys.closed))
        )
        return kv is not None

    def set_closed(self) -> None:
        """Close the rendezvous for every node (final)."""
        txn = transactions.close(self._keys, self.config.node_id)
        self._session.run(self._executor.call(lambda: self._executor.write(txn)))
        log.info("rendezvous closed: run_id=%s node=%s", self.config.run_id, self.config.node_id)

    def num_nodes_waiting(self) -> int:
        """Nodes that want in: the wait list (if our round has room) plus nodes that joined a
        newer round (a member re-rendezvoused). Running agents re-rendezvous when > 0."""
        outcome = self._outcome
        k = self._keys
        p = outcome.round if outcome is not None else 0
        nxt = k.joined_prefix(p + 1)

        async def count() -> int:
            response = await self._session.client.txn(
                [],
                [
                    op_range(k.waiting_prefix, prefix_end(k.waiting_prefix), count_only=True),
                    op_range(k.round),
                    op_range(nxt, prefix_end(nxt), count_only=True),
                ],
            )
            waiting, pointer, newer = (r.response_range for r in response.responses)
            current = decode_int(k.round, pointer.kvs[0].value, "round") if pointer.kvs else 0
            n = 0
            if outcome is None or outcome.world_size < self.config.max_nodes:
                n += int(waiting.count)
            if current > p:
                n += max(1, int(newer.count))
            return n

        return self._session.run(self._executor.call(count))

    def members_alive(self) -> bool:
        """True while every member of our last completed round still holds its joined key."""
        outcome = self._outcome
        if outcome is None:
            return True
        prefix = self._keys.joined_prefix(outcome.round)

        async def alive() -> bool:
            response = await self._session.client.range(
                prefix, outcome.members_end, count_only=True
            )
            return int(response.count) >= outcome.world_size

        return self._session.run(self._executor.call(alive))

    def holds_membership(self) -> bool:
        """True while this node's own joined key of its last completed round exists. False
        while this agent is alive means its lease lapsed (etcd too slow to see a keep-alive in
        time), not that a member died."""
        outcome = self._outcome
        if outcome is None:
            return True
        key = self._keys.joined(outcome.round, self.config.node_id)

        async def held() -> bool:
            response = await self._session.client.range(key, count_only=True)
            return int(response.count) > 0

        return self._session.run(self._executor.call(held))

    def round_state_lost(self) -> bool:
        """True when etcd no longer knows our last completed round: it lost its data (the
        operator recreated it, or it was restored empty), so the group must re-form, and a
        member's key missing there says nothing about that member."""
        outcome = self._outcome
        if outcome is None:
            return False
        key = self._keys.complete(outcome.round)

        async def lost() -> bool:
            response = await self._session.client.range(key, count_only=True)
            return int(response.count) == 0

        return self._session.run(self._executor.call(lost))

    def leave(self) -> None:
        """Leave at once (SIGTERM): revoke our lease, so our joined and wait-list keys vanish and
        the others re-form without waiting for the lease to expire."""
        try:
            self._session.run(self._session.lease.revoke(), timeout=self.config.close_timeout)
        except Exception as exc:  # best effort on the way out
            log.warning("could not leave the rendezvous cleanly: %s", exc)

    @property
    def session(self) -> EtcdSession:
        """The etcd session this handler runs on."""
        return self._session

    def etcd_status(self) -> tuple[bool, float | None, float | None]:
        """(reachable, last_contact, unreachable_since), unix times."""
        r = self._session.reachability()
        return r.reachable, r.last_contact, r.unreachable_since

    def shutdown(self) -> bool:
        """Leave the rendezvous and release the connection. Returns True if it left cleanly."""
        if self._shut_down:
            return True
        self._shut_down = True
        ok = True
        try:
            self._session.run(self._session.lease.revoke(), timeout=self.config.close_timeout)
        except Exception as exc:
            log.warning("shutdown: could not revoke the lease: %s", exc)
            ok = False
        self._session.close()
        return ok
