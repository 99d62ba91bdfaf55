"""Randomized schedules against a real etcd with real handlers (one thread per node).

Each schedule draws min/max nodes, then a random sequence of events: nodes joining at random
moments (early and late), nodes crashing at any point (keep-alive stops without a revoke) or
leaving (SIGTERM path), members re-rendezvousing, etcd restarts (kill + start, data kept) and a
close. After every event the invariants are checked on everything returned so far: one group per
round, ranks unique and in ``0..world_size-1``, ``min <= world_size <= max``, nothing returned
after the close; and no call hangs past its timeouts, but a spare's (a node whose round is full
without it stands by until a round calls it in), which the close then ends at once. The
model-based test in tests/unit covers hundreds of thousands of steps; this one shows the real
executor keeps the same promises.
"""

from __future__ import annotations

import os
import random
import threading
import time
from dataclasses import dataclass, field

import pytest
from elasticjob_agent.rendezvous import (
    RendezvousClosedError,
    RendezvousConnectionError,
    RendezvousTimeoutError,
)
from elasticjob_agent.rendezvous.handler import EtcdRendezvousHandler

from tests.support.etcd_server import EtcdServer
from tests.support.rendezvous_handlers import make_handler, new_run_id

SCHEDULES = int(os.environ.get("REAL_SCHEDULES", "6"))
EVENTS = 14
JOIN_TIMEOUT = 8.0


@dataclass
class Outcome:
    node: str
    round: int
    rank: int
    world_size: int
    at: float


@dataclass
class Run:
    seed: int
    min_nodes: int
    max_nodes: int
    outcomes: list[Outcome] = field(default_factory=list)
    errors: list[BaseException] = field(default_factory=list)
    closed_at: float | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    threads: list[tuple[threading.Thread, EtcdRendezvousHandler]] = field(default_factory=list)

    def check(self) -> int:
        where = f"seed={self.seed}"
        with self.lock:
            outcomes = list(self.outcomes)
            errors = list(self.errors)
        for e in errors:
            allowed = (RendezvousClosedError, RendezvousTimeoutError, RendezvousConnectionError)
            assert isinstance(e, allowed), f"{where}: unexpected {e!r}"
        groups: dict[int, dict[int, str]] = {}
        worlds: dict[int, int] = {}
        for o in outcomes:
            assert self.min_nodes <= o.world_size <= self.max_nodes, f"{where}: {o}"
            assert 0 <= o.rank < o.world_size, f"{where}: {o}"
            assert worlds.setdefault(o.round, o.world_size) == o.world_size, f"{where}: {o}"
            holder = groups.setdefault(o.round, {}).setdefault(o.rank, o.node)
            assert holder == o.node, f"{where}: rank {o.rank} of round {o.round} twice"
            if self.closed_at is not None:
                # Allow for the close to race with a completion that was already committed.
                assert o.at < self.closed_at + 1.0, f"{where}: returned after close: {o}"
        return len(outcomes)


def _rendezvous(run: Run, handler: EtcdRendezvousHandler) -> None:
    try:
        info = handler.next_rendezvous()
        outcome = Outcome(
            handler.config.node_id, handler.round or 0, info.rank, info.world_size, time.time()
        )
        with run.lock:
            run.outcomes.append(outcome)
    except BaseException as exc:
        with run.lock:
            run.errors.append(exc)


@pytest.mark.timeout(600)
def test_random_schedules_on_real_etcd(etcd_server: EtcdServer) -> None:
    total_events = 0
    total_outcomes = 0
    spares = 0
    for seed in range(SCHEDULES):
        rng = random.Random(seed)
        lo = rng.randint(1, 3)
        run = Run(seed, lo, lo + rng.randint(0, 2))
        run_id = new_run_id()
        handlers: list[EtcdRendezvousHandler] = []

        def start(h: EtcdRendezvousHandler, run: Run = run) -> None:
            t = threading.Thread(target=_rendezvous, args=(run, h), daemon=True)
            run.threads.append((t, h))
            t.start()

        try:
            for _ in range(EVENTS):
                total_events += 1
                roll = rng.random()
                idle = [h for h in handlers if h.round is not None and not h._shut_down]
                if roll < 0.4 or not handlers:
                    h = make_handler(
                        etcd_server.endpoint,
                        run_id,
                        f"n{len(handlers):02d}",
                        min_nodes=run.min_nodes,
                        max_nodes=run.max_nodes,
                        last_call_timeout=0.3,
                        join_timeout=JOIN_TIMEOUT,
                        heartbeat=1,
                        etcd_timeout=3,
                    )
                    handlers.append(h)
                    start(h)
                elif roll < 0.55 and idle:
                    start(rng.choice(idle))  # re-rendezvous
                elif roll < 0.7:
                    victim = rng.choice(handlers)
                    if rng.random() < 0.5:
                        victim.leave()
                    else:
                        victim._session.lease._id = None  # crash: the lease just expires
                elif roll < 0.8:
                    etcd_server.kill()
                    time.sleep(rng.choice([0.2, 0.8]))
                    etcd_server.start()
                elif roll < 0.84 and run.closed_at is None:
                    run.closed_at = time.time()
                    handlers[0].set_closed()
                time.sleep(rng.choice([0.05, 0.2, 0.6]))
                run.check()
            standing = []
            for t, h in run.threads:
                t.join(JOIN_TIMEOUT + 10)
                if t.is_alive():
                    # Only a spare waits past its join timeout: its round is full without it.
                    assert h.standby_since() is not None, f"seed={seed}: a rendezvous call hung"
                    standing.append(t)
            if standing:
                spares += len(standing)
                if run.closed_at is None:
                    run.closed_at = time.time()
                    handlers[0].set_closed()
                for t in standing:  # the close wakes spares at once
                    t.join(10)
                    assert not t.is_alive(), f"seed={seed}: a spare ignored the close"
            total_outcomes += run.check()
        finally:
            for h in handlers:
                h.shutdown()
    print(
        f"\nchecked {SCHEDULES} real schedules, {total_events} events, "
        f"{total_outcomes} completed rendezvous calls, {spares} spares standing by at the end"
    )
    assert total_outcomes > 0
