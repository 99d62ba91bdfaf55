"""The agent's path from the start signal to every node's worker environment, ours against
torch's, in the same run.

``--path agent`` (the default) measures, per simulated node, what an agent does before it can
start its workers: the rendezvous, the master address, the role exchange and the worker
environment (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``... of local rank 0), with
``nproc_per_node = 8``. ``--path rendezvous`` stops at ``next_rendezvous()``.

Candidates (every node has its own client connection; nodes are spread round-robin over a fixed
pool of worker processes, so no single process's GIL decides the result):

- ``ours``: ``elasticjob_agent``'s executor (what ``EtcdRendezvousHandler.next_rendezvous()``
  runs; the master address comes with the membership), then rank 0 publishes ``MASTER_ADDR`` /
  ``MASTER_PORT`` like the handler, then ``rendezvous.roles`` (rank 0 gathers, one table) and
  ``worker_env``; one ``EtcdClient`` (one TCP connection) per node, nodes as asyncio tasks;
- ``torch-c10d``: torch's ``DynamicRendezvousHandler`` on its ``C10dRendezvousBackend`` (one
  TCPStore client per node, the TCPStore server in the parent; its ``next_rendezvous()`` also
  builds the master address through the store), then torch's own rank assignment
  (``SimpleElasticAgent._assign_worker_ranks``: rank 0 ``multi_get``s, ``multi_set``s), one
  thread per node;
- ``torch-etcd-v3``: the same torch path on our ``EtcdV3RendezvousBackend``;
- ``ours-tls``: ``ours`` against a second etcd that requires client certificates (mutual TLS,
  ``--client-cert-auth``), with a CA, server and client certificate made in the run by the
  operator's own generator (``elasticjob_operator.core.pki``: what a managed etcd gets), each node
  presenting the client certificate on its own connection: the cost of TLS against ``ours``.

Scenarios: ``min-eq-max`` (``min = max = N``: completes at max) and ``last-call`` (``min = N``,
``max = 2N``, ``last_call = 1 s``). Reported per case: time from the start signal to the last
node having its environment, for ours also from the last join, requests per node (etcd requests
for etcd backends; for torch-c10d the handler's state reads and writes plus the rank
assignment's store calls), failed compare-and-swaps, and CPU seconds per node (clients plus
server: etcd, or the parent holding the TCPStore server). A case that does not finish within
``CASE_TIMEOUT`` plus a margin is reported as hung and ends the run with exit code 3.

etcd runs with its data directory on tmpfs (/dev/shm; etcd 3.4 has no ``--unsafe-no-fsync``),
the same for every etcd candidate. Each line also gives what etcd itself counted in the case
(its ``/metrics``, per node: gRPC messages received per method, i.e. ``rpc-Watch`` = watch
creations + cancellations and ``rpc-LeaseKeepAlive`` = lease refreshes; watch events sent;
lease renewals and expiries; slow applies) and the 1-minute load average at its end.

``--loop RUNS`` is the hang check: RUNS consecutive runs of ours at ``--ours-sizes``, each with
fresh worker processes; a run whose workers do not answer within ``--case-timeout`` plus a
margin is reported as hung with the state it stuck in (each worker prints its nodes counted by
their last rendezvous action or step of the path, and its tasks' await chains; the parent prints
what etcd holds for the run), and the loop goes on; exit code 3 if any hung. ``--profile DIR``
writes a cProfile per worker process and case.

    .venv/bin/python bench/rendezvous_bench.py --sizes 64 --ours-sizes 256,1024,4096 \
        --scenarios min-eq-max --candidates ours,torch-c10d
    .venv/bin/python bench/rendezvous_bench.py --ours-sizes 1024 --loop 20 --case-timeout 60
    .venv/bin/python bench/rendezvous_bench.py --sizes 64 --ours-sizes "" \
        --scenarios min-eq-max --candidates ours,ours-tls --repeat 5
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import faulthandler
import gc
import itertools
import multiprocessing as mp
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, TypeVar

from elasticjob_agent.etcd.client import EtcdClient
from elasticjob_agent.etcd.retry import retry_until
from elasticjob_agent.etcd.session import LeaseKeeper
from elasticjob_agent.ports import free_port
from elasticjob_agent.protocol.endpoints import TlsFiles, parse_endpoints
from elasticjob_agent.protocol.keys import JobKeys
from elasticjob_agent.rendezvous.backend import create_backend
from elasticjob_agent.rendezvous.config import request_timeout_for
from elasticjob_agent.rendezvous.deadline import drain
from elasticjob_agent.rendezvous.executor import Executor, Outcome
from elasticjob_agent.rendezvous.kv import AsyncEtcdStore
from elasticjob_agent.rendezvous.role_info import RankAssignment, RoleInfo
from elasticjob_agent.rendezvous.roles import exchange_roles_async
from elasticjob_agent.rendezvous.state import Action, Context, Snapshot
from elasticjob_agent.rendezvous.wire import RendezvousKeys
from elasticjob_agent.supervision.worker_env import AgentKnobs, GroupContext, worker_env
from elasticjob_operator.core import names, pki
from torch.distributed import TCPStore  # type: ignore[attr-defined]
from torch.distributed.elastic.agent.server.api import SimpleElasticAgent, WorkerSpec
from torch.distributed.elastic.rendezvous import RendezvousParameters
from torch.distributed.elastic.rendezvous.api import RendezvousStoreInfo
from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import C10dRendezvousBackend
from torch.distributed.elastic.rendezvous.dynamic_rendezvous import (
    RendezvousBackend,
    create_handler,
)

CASE_TIMEOUT = 240.0
ETCD_TIMEOUT = 60.0
"""How long a node retries an unreachable etcd, past its join deadline if a request is in flight
(``Executor.call``'s backstop)."""
# How long the parent waits for a worker's answer past the case's own timeout before it calls
# the case hung (every node's wait is bounded by CASE_TIMEOUT, so this never fires unless one
# is not).
HANG_MARGIN = 60.0
SCENARIOS = ("min-eq-max", "last-call")
PATHS = ("agent", "rendezvous")
NPROC = 8
#: Candidates that run our executor (``ours-tls`` against the mutual-TLS etcd).
OURS = ("ours", "ours-tls")
CANDIDATES = ("ours", "ours-tls", "torch-c10d", "torch-etcd-v3")


@dataclass(frozen=True)
class Case:
    candidate: str
    scenario: str
    n: int
    endpoint: str
    tcp_port: int
    run_id: str
    path: str = "agent"
    lease_ttl: int = 10
    profile_dir: str | None = None
    """Write each worker process's cProfile (start signal to its last node) here."""
    timeout: float = CASE_TIMEOUT
    """Every node's join deadline and store timeout (s); the case is hung past it plus a
    margin."""
    tls_dir: str | None = None
    """``ours-tls``: the directory of ``ca.crt``, ``client.crt``, ``client.key``."""
    metrics: str = ""
    """etcd's plain-HTTP ``/metrics`` address (``host:port``)."""
    request_timeout: float | None = None
    """ours: the deadline of one etcd request; ``None``: the agent's (``request_timeout_for``)."""
    etcd_profile: float = 0.0
    """With ``profile_dir``: seconds of etcd's CPU profile from the start signal (0: none)."""
    freeze_setup: bool = False
    """ours: exempt the set-up's objects (N / workers clients per process) from Python's
    cyclic GC before the start signal, as in an agent, whose process holds one client."""
    no_gc: bool = False
    """ours: also turn the cyclic GC off from the start signal to the end of the window (an
    attribution run: what the packed layout's GC costs per node)."""

    def endpoints(self) -> Any:
        if self.tls_dir is None:
            return self.endpoint
        tls = TlsFiles(
            cacert=f"{self.tls_dir}/ca.crt",
            cert=f"{self.tls_dir}/client.crt",
            key=f"{self.tls_dir}/client.key",
        )
        return parse_endpoints(self.endpoint, tls=tls)

    def etcdctl(self) -> list[str]:
        """``etcdctl`` with this case's endpoint and client certificate."""
        tls = (
            [f"--cacert={self.tls_dir}/ca.crt", f"--cert={self.tls_dir}/client.crt",
             f"--key={self.tls_dir}/client.key"]
            if self.tls_dir
            else []
        )  # fmt: skip
        return ["etcdctl", f"--endpoints={self.endpoint}", *tls]

    @property
    def min_nodes(self) -> int:
        return self.n

    @property
    def max_nodes(self) -> int:
        return self.n if self.scenario == "min-eq-max" else 2 * self.n

    @property
    def last_call(self) -> float:
        return 1.0


@dataclass
class NodeResult:
    done_at: float
    joined_at: float | None
    requests: int
    failed_cas: int
    error: str | None = None
    rendezvous_at: float | None = None
    """When ``next_rendezvous()`` returned (ours), before the rest of the agent's path."""
    stage: str = "-"
    """Where the node was when it finished or gave up (ours): the last rendezvous action it
    decided, or the step of the agent's path after it."""
    unanswered: int = 0
    """ours: requests that got no answer in time (``EtcdClient.unanswered``): each one was
    re-sent with a longer deadline."""


# --- worker side -------------------------------------------------------------------------


T = TypeVar("T")


class RetryingStore:
    """The round's store as the agent calls it: ``EtcdStore`` runs every call through
    ``retry_until`` until the store's timeout, so a request that missed its deadline is sent
    again (with the client's longer deadline) instead of failing the role exchange."""

    def __init__(self, store: AsyncEtcdStore) -> None:
        self._store = store

    async def _retry(self, op: Callable[[], Awaitable[T]]) -> T:
        deadline = time.monotonic() + self._store.timeout
        return await retry_until(op, deadline=deadline, what="bench store")

    async def set(self, key: str, value: bytes) -> None:
        await self._retry(lambda: self._store.set(key, value))

    async def multi_get(self, keys: list[str]) -> list[bytes]:
        return await self._retry(lambda: self._store.multi_get(keys))

    async def set_then_get(self, set_key: str, value: bytes, get_key: str) -> bytes:
        return await self._retry(lambda: self._store.set_then_get(set_key, value, get_key))


def _environment(run_id: str, outcome: Outcome, assignment: RankAssignment) -> dict[str, str]:
    """Local rank 0's worker environment, as the agent builds it."""
    ctx = GroupContext(
        run_id=run_id,
        role="default",
        group_rank=outcome.rank,
        group_world_size=outcome.world_size,
        local_world_size=NPROC,
        master_addr=outcome.master_addr,
        master_port=outcome.master_port,
        restart_count=0,
        max_restarts=0,
        assignment=assignment,
    )
    return worker_env(ctx, 0, {}, AgentKnobs())


def _track(ex: Executor, stages: list[str], i: int) -> None:
    """Record in ``stages[i]`` every rendezvous action node ``i`` decides (and its round and
    the joined count it saw), so a case that never ends says where each node stuck."""
    inner = ex.step

    async def step(snap: Snapshot, action: Action, ctx: Context) -> Snapshot:
        stages[i] = f"{action.kind.value} (round {action.round}, saw {snap.joined} joined)"
        return await inner(snap, action, ctx)

    setattr(ex, "step", step)  # noqa: B010 - an instance attribute shadows the method


def _stage_counts(stages: list[str]) -> str:
    counts: dict[str, int] = {}
    for stage in stages:
        counts[stage] = counts.get(stage, 0) + 1
    return "; ".join(f"{n} x {s}" for s, n in sorted(counts.items(), key=lambda kv: -kv[1]))


async def _dump_after(seconds: float, stages: list[str]) -> None:
    """After ``seconds``: print where the nodes are and the await chain of every task
    (counted) to stderr."""
    await asyncio.sleep(seconds)
    print(f"[pid {os.getpid()}] nodes by stage: {_stage_counts(stages)}", file=sys.stderr)
    chains: dict[str, int] = {}
    for task in asyncio.all_tasks():
        parts = []
        coro: Any = task.get_coro()
        while coro is not None:
            frame = getattr(coro, "cr_frame", None)
            if frame is None:
                parts.append(type(coro).__name__)
                break
            parts.append(f"{frame.f_code.co_name}:{frame.f_lineno}")
            coro = getattr(coro, "cr_await", None)
        chain = " > ".join(parts)
        chains[chain] = chains.get(chain, 0) + 1
    for chain, count in sorted(chains.items(), key=lambda kv: -kv[1]):
        print(f"[pid {os.getpid()}] {count:5d} {chain}", file=sys.stderr, flush=True)


def _ours(case: Case, nodes: list[str], ready: Connection, start: Any) -> list[NodeResult]:
    keys = RendezvousKeys.of(JobKeys("/bench", case.run_id))

    async def main() -> list[NodeResult]:
        # As the agent's session: a request's deadline is RendezvousConfig.request_timeout.
        timeout = case.request_timeout or request_timeout_for(ETCD_TIMEOUT)
        clients = [EtcdClient(case.endpoints(), request_timeout=timeout) for _ in nodes]
        leases = [LeaseKeeper(c, case.lease_ttl) for c in clients]
        # Connected (watch stream open) and holding a lease before the start signal, like an
        # agent that is up. Retried like the agent's requests (a set-up request that missed its
        # deadline under load failed the whole worker's share at N = 4096), and at most 64 at
        # a time per process: 1024 connections opened at once overload etcd before the start.
        gate = asyncio.Semaphore(64)

        async def up(client: EtcdClient, lease: LeaseKeeper) -> None:
            async with gate:
                await retry_until(client.prepare, patience=ETCD_TIMEOUT, what="bench set-up")
                await retry_until(
                    lease.current, patience=ETCD_TIMEOUT, on_lease_lost=lease.lost, what="lease"
                )

        await asyncio.gather(*(up(c, lease) for c, lease in zip(clients, leases, strict=True)))
        executors = [
            Executor(c, keys, node, lease, etcd_timeout=ETCD_TIMEOUT)
            for c, node, lease in zip(clients, nodes, leases, strict=True)
        ]
        before = [c.requests for c in clients]
        silent_before = [c.unanswered for c in clients]
        if case.freeze_setup:
            gc.collect()
            gc.freeze()
        if case.no_gc:
            # Each worker holds N / workers nodes' objects, so every collection scans the
            # other nodes' objects too: a cost that grows with N here and not in an agent.
            gc.disable()
        ready.send("ready")
        await asyncio.get_running_loop().run_in_executor(None, _wait_start, start)

        stages = ["start"] * len(executors)
        for i, ex in enumerate(executors):
            _track(ex, stages, i)

        async def one(i: int, ex: Executor) -> tuple[float, float | None, float]:
            now = time.time()
            ctx = Context(
                min_nodes=case.min_nodes,
                max_nodes=case.max_nodes,
                last_call_timeout=case.last_call,
                join_deadline=now + case.timeout,
                recheck_interval=5.0,
            )
            stages[i] = "blind join"
            outcome = await ex.next_rendezvous(ctx, 0)
            returned = time.time()
            if outcome.master_addr != "127.0.0.1":
                raise RuntimeError(f"unexpected master {outcome.master_addr}")
            if case.path == "agent":
                store = RetryingStore(
                    AsyncEtcdStore(
                        ex.client,
                        keys.store_prefix(outcome.round),
                        timeout=case.timeout,
                        recheck_interval=5.0,
                    )
                )
                if outcome.rank == 0:  # what EtcdRendezvousHandler does for tools
                    stages[i] = "rank 0 master keys"
                    await store.set(RendezvousStoreInfo.MASTER_ADDR_KEY, b"127.0.0.1")
                    await store.set(
                        RendezvousStoreInfo.MASTER_PORT_KEY, str(outcome.master_port).encode()
                    )
                stages[i] = f"role exchange (rank {'0: gathers' if outcome.rank == 0 else '> 0'})"
                mine = RoleInfo("default", outcome.rank, NPROC)
                assignment = await exchange_roles_async(store, mine, outcome.world_size)
                env = _environment(case.run_id, outcome, assignment)
                if env["RANK"] != str(outcome.rank * NPROC):
                    raise RuntimeError(f"wrong RANK {env['RANK']} for node rank {outcome.rank}")
            stages[i] = "done"
            return time.time(), ex.joined_at, returned

        watchdog = asyncio.ensure_future(
            _dump_after(case.timeout + ETCD_TIMEOUT + HANG_MARGIN / 4, stages)
        )
        profiler = cProfile.Profile() if case.profile_dir else None
        if profiler is not None:
            profiler.enable()
        done = await asyncio.gather(
            *(one(i, ex) for i, ex in enumerate(executors)), return_exceptions=True
        )
        if profiler is not None:
            profiler.disable()
            assert case.profile_dir is not None
            profiler.dump_stats(Path(case.profile_dir) / f"{case.run_id}-{os.getpid()}.prof")
        watchdog.cancel()
        results = []
        for d, c, b, s, stage in zip(done, clients, before, silent_before, stages, strict=True):
            silent = c.unanswered - s
            if isinstance(d, BaseException):
                results.append(
                    NodeResult(
                        time.time(),
                        None,
                        c.requests - b,
                        0,
                        repr(d),
                        stage=stage,
                        unanswered=silent,
                    )
                )
            else:
                results.append(
                    NodeResult(
                        d[0], d[1], c.requests - b, c.failed_txns, None, d[2], unanswered=silent
                    )
                )
        # Measured up to here: the clean-up below (watch cancellations, lease revocations,
        # closing the clients) happens outside the case's window, once every worker is done.
        ready.send((results, _cpu() - _START_CPU[0]))
        gc.enable()
        if ready.recv() != "cleanup":
            raise RuntimeError("expected cleanup")
        try:
            async with asyncio.timeout(60):
                await drain(5.0)
                for lease in leases:
                    await lease.stop()
                # Revoked like an agent that shuts down: leases left to expire (TTL s later)
                # would expire in etcd, a revoke proposal each, during the next case.
                await asyncio.gather(*(lease.revoke() for lease in leases), return_exceptions=True)
                await asyncio.gather(*(c.close() for c in clients))
        except TimeoutError:
            print(f"[pid {os.getpid()}] closing the clients took > 60 s", file=sys.stderr)
        except Exception as exc:  # the results are sent: report, never send twice
            print(f"[pid {os.getpid()}] closing the clients failed: {exc!r}", file=sys.stderr)
        return results

    return asyncio.run(main())


class CountingStore:
    """Forwards the store calls torch's rank assignment makes, and counts them."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls = 0

    def set(self, key: str, value: Any) -> None:
        self.calls += 1
        self.inner.set(key, value)

    def get(self, key: str) -> Any:
        self.calls += 1
        return self.inner.get(key)

    def multi_get(self, keys: list[str]) -> Any:
        self.calls += 1
        return self.inner.multi_get(keys)

    def multi_set(self, keys: list[str], values: list[Any]) -> None:
        self.calls += 1
        self.inner.multi_set(keys, values)


class CountingBackend:
    """Wraps a torch ``RendezvousBackend`` and counts state reads, writes and failed CAS."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.reads = 0
        self.writes = 0
        self.failed = 0

    @property
    def name(self) -> str:
        return str(self.inner.name)

    def get_state(self) -> Any:
        self.reads += 1
        return self.inner.get_state()

    def set_state(self, state: bytes, token: Any = None) -> Any:
        self.writes += 1
        result = self.inner.set_state(state, token)
        if result is not None and not result[2]:
            self.failed += 1
        return result


def _torch(case: Case, nodes: list[str], ready: Connection, start: Any) -> list[NodeResult]:
    params = RendezvousParameters(
        backend="c10d" if case.candidate == "torch-c10d" else "etcd-v3",
        endpoint=case.endpoint,
        run_id=case.run_id,
        min_nodes=case.min_nodes,
        max_nodes=case.max_nodes,
        join_timeout=str(int(case.timeout)),
        last_call_timeout=str(int(case.last_call)),
        local_addr="127.0.0.1",
        key_prefix="/bench",
    )
    handlers: list[Any] = []
    counters: list[CountingBackend] = []
    sessions: list[Any] = []
    for _ in nodes:
        if case.candidate == "torch-c10d":
            store = TCPStore(
                "127.0.0.1", case.tcp_port, is_master=False, timeout=timedelta(seconds=300)
            )
            backend: Any = C10dRendezvousBackend(store, case.run_id)
        else:
            backend, store = create_backend(params)
            sessions.append(backend.session)
        counting = CountingBackend(backend)
        RendezvousBackend.register(CountingBackend)
        counters.append(counting)
        handlers.append(create_handler(store, counting, params))  # type: ignore[arg-type]
    etcd_before = [s.client.requests for s in sessions]
    results: list[NodeResult | None] = [None] * len(nodes)

    store_calls = [0] * len(nodes)

    def run(i: int) -> None:
        if i == 0:
            _wait_start(start)
        start.wait()
        try:
            info = handlers[i].next_rendezvous()
            if case.path == "agent":
                store = CountingStore(info.store)
                spec = WorkerSpec(
                    role="default", local_world_size=NPROC, rdzv_handler=handlers[i], entrypoint="x"
                )
                # torch's own assignment (rank 0 gathers and publishes); it uses no agent state.
                agent: Any = None
                workers = SimpleElasticAgent._assign_worker_ranks(
                    agent, store, info.rank, info.world_size, spec
                )
                store_calls[i] = store.calls
                master = info.bootstrap_store_info
                if master is None or workers[0].global_rank != info.rank * NPROC:
                    raise RuntimeError("torch's path gave no master or wrong ranks")
            results[i] = NodeResult(time.time(), None, 0, 0)
        except Exception as exc:
            results[i] = NodeResult(time.time(), None, 0, 0, repr(exc))

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(len(nodes))]
    for t in threads:
        t.start()
    ready.send("ready")
    for t in threads:
        t.join(case.timeout + HANG_MARGIN / 2)
    out: list[NodeResult] = []
    for i, maybe in enumerate(results):
        r = maybe or NodeResult(time.time(), None, 0, 0, "hung")
        c = counters[i]
        if sessions:
            r.requests = sessions[i].client.requests - etcd_before[i]
        else:
            r.requests = c.reads + c.writes + store_calls[i]
        r.failed_cas = c.failed
        out.append(r)
    # torch's shutdown() closes the rendezvous: only once every worker is done.
    ready.send((out, _cpu() - _START_CPU[0]))
    if ready.recv() != "cleanup":
        raise RuntimeError("expected cleanup")
    for h in handlers:
        with contextlib.suppress(Exception):
            h.shutdown()
    for session in sessions:
        session.close()
    return out


_START_CPU = [0.0]


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _wait_start(start: Any) -> None:
    """Wait for the start signal; CPU use is counted from here."""
    start.wait()
    _START_CPU[0] = _cpu()


def worker(conn: Connection, start: Any) -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (20000, 20000))
    while True:
        msg = conn.recv()
        if msg is None:
            return
        case, nodes = msg
        fn = _ours if case.candidate in OURS else _torch
        # A hung case says where: every thread's stack, and (ours) every task's await chain.
        faulthandler.dump_traceback_later(case.timeout + ETCD_TIMEOUT + HANG_MARGIN / 2)
        try:
            fn(case, nodes, conn, start)  # sends its results, cleans up when told
        except Exception as exc:  # report, keep the pool alive
            conn.send("ready")
            conn.send(([NodeResult(time.time(), None, 0, 0, repr(exc)) for _ in nodes], 0.0))
            conn.recv()
        faulthandler.cancel_dump_traceback_later()
        conn.send("clean")


# --- parent side -------------------------------------------------------------------------


class Etcd:
    """A single-member etcd on loopback, its ``/metrics`` on plain HTTP; ``tls``: clients must
    present a certificate of a CA made here (``tls_dir`` holds ``ca.crt``, ``client.crt`` and
    ``client.key``)."""

    def __init__(self, tls: bool = False, binary: str | None = None) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="ej-bench-etcd-", dir="/dev/shm"))
        self.port, peer, self.metrics_port = free_port(), free_port(), free_port()
        scheme = "https" if tls else "http"
        client, peer_url = f"{scheme}://127.0.0.1:{self.port}", f"http://127.0.0.1:{peer}"
        self.tls_dir: str | None = None
        tls_args: list[str] = []
        ctl_args: list[str] = []
        if tls:
            made = pki.generate("bench", "bench", "bench-etcd", datetime.now(UTC))
            files = self.dir / "tls"
            files.mkdir()
            for name, text in made.secret_data().items():
                (files / name).write_text(text)
                (files / name).chmod(0o600)
            self.tls_dir = str(files)
            tls_args = [
                "--client-cert-auth",
                f"--trusted-ca-file={files / names.TLS_CA}",
                f"--cert-file={files / names.TLS_CERT}",
                f"--key-file={files / names.TLS_KEY}",
            ]
            ctl_args = [
                f"--cacert={files / names.TLS_CA}",
                f"--cert={files / names.TLS_CLIENT_CERT}",
                f"--key={files / names.TLS_CLIENT_KEY}",
            ]
        binary = binary or shutil.which("etcd")
        if binary is None:
            raise SystemExit("etcd not found: run scripts/setup.sh")
        self.version = subprocess.run(
            [binary, "--version"], capture_output=True, text=True, check=True
        ).stdout.splitlines()[0]
        self.proc = subprocess.Popen(
            [
                binary,
                f"--data-dir={self.dir / 'data'}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=default={peer_url}",
                "--log-level=error",
                f"--listen-metrics-urls=http://127.0.0.1:{self.metrics_port}",
                # Go's /debug/pprof on the client URL: `--etcd-profile` reads etcd's CPU profile.
                "--enable-pprof",
                *tls_args,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            ok = subprocess.run(
                ["etcdctl", f"--endpoints={client}", *ctl_args, "endpoint", "health"],
                capture_output=True,
                env=dict(os.environ, ETCDCTL_API="3"),
                check=False,
            )
            if ok.returncode == 0:
                return
            time.sleep(0.1)
        raise SystemExit("etcd did not start")

    @property
    def endpoint(self) -> str:
        return f"{'https://' if self.tls_dir else ''}127.0.0.1:{self.port}"

    @property
    def metrics(self) -> str:
        return f"127.0.0.1:{self.metrics_port}"

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


@dataclass
class Row:
    case: Case
    total: float
    after_last_join: float | None
    requests_per_node: float
    failed_cas: int
    unanswered: int
    """ours: requests of all nodes that got no answer in time (re-sent, with a longer deadline)."""
    errors: int
    first_error: str | None
    rendezvous: float | None
    """Start signal to the last node's return from ``next_rendezvous()`` (ours)."""
    client_cpu: float
    """CPU seconds of the worker processes from the start signal to their last node."""
    server_cpu: float
    """CPU seconds of etcd (or of the parent holding the TCPStore server) in the same window."""
    etcd: dict[str, float]
    """What etcd counted in the same window (``etcd_counters``; empty for TCPStore)."""
    stuck: str | None
    """Where the failed nodes stopped (``NodeResult.stage``, counted)."""
    load: float
    """The machine's 1-minute load average at the end of the case."""

    @property
    def cpu_per_node(self) -> float:
        return (self.client_cpu + self.server_cpu) / self.case.n


def etcd_cpu(pid: int) -> float:
    """CPU seconds etcd ``pid`` has used so far (utime + stime from /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# etcd's own counters (its /metrics), read before and after each case: what the server did.
_ETCD_COUNTERS = {
    "etcd_debugging_mvcc_events_total": "watch events sent",
    "etcd_debugging_lease_renewed_total": "lease renewals",
    "etcd_debugging_server_lease_expired_total": "leases expired",
    "etcd_server_proposals_applied_total": "proposals applied",
    "etcd_server_slow_apply_total": "slow applies",
}


def etcd_counters(metrics: str) -> dict[str, float]:
    """etcd's counters of interest (from its ``/metrics`` at ``metrics``), and its gRPC
    messages received per method (``rpc Txn``, ``rpc Watch``: creations and cancellations,
    ``rpc LeaseKeepAlive``: refreshes...)."""
    with urllib.request.urlopen(f"http://{metrics}/metrics", timeout=10) as response:
        text = response.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("#") or " " not in line:
            continue
        name_labels, value = line.rsplit(" ", 1)
        name = name_labels.split("{", 1)[0]
        if name in _ETCD_COUNTERS:
            out[_ETCD_COUNTERS[name]] = float(value)
        elif name == "grpc_server_msg_received_total":
            method = name_labels.split('grpc_method="', 1)[1].split('"', 1)[0]
            key = f"rpc {method}"
            out[key] = out.get(key, 0.0) + float(value)
    return out


def etcd_state(case: Case) -> str:
    """What etcd holds for the run, node ids folded: ``key pattern: count [value if one]``."""
    listing = subprocess.run(
        [*case.etcdctl(), "get", "--prefix", f"/bench/{case.run_id}/"],
        capture_output=True,
        env=dict(os.environ, ETCDCTL_API="3"),
        check=False,
        timeout=60,
        text=True,
    ).stdout.splitlines()
    groups: dict[str, list[str]] = {}
    for key, value in zip(listing[::2], listing[1::2], strict=False):
        pattern = "/".join(
            "<node>" if part.startswith("node-") else part for part in key.split("/")
        )
        groups.setdefault(pattern, []).append(value)
    return "\n".join(
        f"  {pattern}: {len(values)}" + (f" = {values[0][:120]}" if len(values) == 1 else "")
        for pattern, values in sorted(groups.items())
    )


class Hung(Exception):
    """A worker did not answer within the case's deadline."""


def _recv(conn: Connection, deadline: float) -> Any:
    if not conn.poll(max(0.0, deadline - time.monotonic())):
        raise Hung("a worker process did not answer before the case's deadline")
    return conn.recv()


def _profile_etcd(case: Case) -> threading.Thread | None:
    """With ``--profile DIR --etcd-profile S``: etcd's CPU profile of the S seconds from the
    start signal, into ``DIR/<run id>-etcd.pprof`` (``go tool pprof -top`` reads it)."""
    if not (case.profile_dir and case.etcd_profile and case.tls_dir is None):
        return None
    url = f"http://{case.endpoint}/debug/pprof/profile?seconds={case.etcd_profile:g}"
    target = Path(case.profile_dir) / f"{case.run_id}-etcd.pprof"

    def fetch() -> None:
        try:
            with urllib.request.urlopen(url, timeout=case.etcd_profile + 30) as response:
                target.write_bytes(response.read())
        except OSError as exc:
            print(f"etcd profile not written: {exc}", file=sys.stderr)

    thread = threading.Thread(target=fetch, name="etcd-pprof", daemon=True)
    thread.start()
    return thread


def run_case(case: Case, pool: list[tuple[Any, Connection]], start: Any, etcd_pid: int) -> Row:
    master = None
    if case.candidate == "torch-c10d":
        master = TCPStore(
            "127.0.0.1",
            case.tcp_port,
            is_master=True,
            wait_for_workers=False,
            timeout=timedelta(seconds=300),
        )
    nodes = [f"node-{i:05d}" for i in range(case.n)]
    shares = [nodes[w :: len(pool)] for w in range(len(pool))]
    active = [(conn, share) for (_, conn), share in zip(pool, shares, strict=True) if share]
    start.clear()
    setup_deadline = time.monotonic() + CASE_TIMEOUT
    for conn, share in active:
        conn.send((case, share))
    for conn, _ in active:
        if _recv(conn, setup_deadline) != "ready":
            raise RuntimeError("worker not ready")
    time.sleep(0.2)
    on_etcd = case.candidate != "torch-c10d"
    counters_before = etcd_counters(case.metrics) if on_etcd else {}
    server_before = etcd_cpu(etcd_pid) if on_etcd else _cpu()
    profiling = _profile_etcd(case) if on_etcd else None
    t0 = time.time()
    start.set()
    deadline = time.monotonic() + case.timeout + ETCD_TIMEOUT + HANG_MARGIN
    results: list[NodeResult] = []
    cpu = 0.0
    try:
        for conn, _ in active:
            part, part_cpu = _recv(conn, deadline)
            results.extend(part)
            cpu += part_cpu
    except Hung as exc:
        state = etcd_state(case) if on_etcd else "  (TCPStore)"
        raise Hung(
            f"{case.candidate} N={case.n}: {exc} (each worker printed its nodes by stage and "
            f"its tasks to stderr); etcd holds:\n{state}"
        ) from None
    server_cpu = (etcd_cpu(etcd_pid) if on_etcd else _cpu()) - server_before
    if profiling is not None:
        profiling.join(case.etcd_profile + 30)
    counters_after = etcd_counters(case.metrics) if on_etcd else {}
    for conn, _ in active:
        conn.send("cleanup")
    for conn, _ in active:
        _recv(conn, deadline + HANG_MARGIN)
    start.clear()
    del master
    errors = [r.error for r in results if r.error]
    stuck = _stage_counts([r.stage for r in results if r.error]) if errors else None
    joined = [r.joined_at for r in results if r.joined_at is not None]
    last = max(r.done_at for r in results)
    returned = [r.rendezvous_at for r in results if r.rendezvous_at is not None]
    return Row(
        case=case,
        rendezvous=(max(returned) - t0) if returned else None,
        total=last - t0,
        after_last_join=(last - max(joined)) if joined else None,
        requests_per_node=sum(r.requests for r in results) / len(results),
        failed_cas=sum(r.failed_cas for r in results),
        unanswered=sum(r.unanswered for r in results),
        errors=len(errors),
        first_error=errors[0] if errors else None,
        client_cpu=cpu,
        server_cpu=server_cpu,
        etcd={k: v - counters_before.get(k, 0.0) for k, v in counters_after.items()},
        stuck=stuck,
        load=os.getloadavg()[0],
    )


def _spawn(ctx: Any, workers: int, start: Any) -> list[tuple[Any, Connection]]:
    pool = []
    for _ in range(workers):
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=worker, args=(child, start), daemon=True)
        proc.start()
        pool.append((proc, parent))
    return pool


def _stop(pool: list[tuple[Any, Connection]]) -> None:
    for _, conn in pool:
        with contextlib.suppress(OSError):
            conn.send(None)
    for proc, _ in pool:
        proc.join(5)
        if proc.is_alive():
            proc.kill()
            proc.join(5)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="64", help="N for every candidate")
    parser.add_argument("--ours-sizes", default="256,1024,4096", help="extra N for ours only")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS), help=f"of {SCENARIOS}")
    parser.add_argument("--candidates", default="ours,torch-c10d")
    parser.add_argument("--path", default="agent", choices=PATHS)
    parser.add_argument("--repeat", type=int, default=1, help="runs of every case")
    parser.add_argument("--workers", type=int, default=4, help="worker processes")
    parser.add_argument(
        "--lease-ttl", type=int, default=10, help="ours: lease TTL (s), the agent's heartbeat"
    )
    parser.add_argument(
        "--case-timeout",
        type=float,
        default=CASE_TIMEOUT,
        help="every node's join deadline (s); a case is hung past it plus a margin",
    )
    parser.add_argument(
        "--loop",
        type=int,
        default=0,
        metavar="RUNS",
        help="hang check: RUNS consecutive runs of ours (min-eq-max, --ours-sizes), going on "
        "after a hung run, each reported with the state it stuck in; exit 3 if any hung",
    )
    parser.add_argument(
        "--freeze-setup",
        action="store_true",
        help="ours: exempt each worker's set-up (its N/workers clients) from Python's cyclic GC "
        "before the start signal: an agent's process holds one client, not N/workers",
    )
    parser.add_argument(
        "--no-gc",
        action="store_true",
        help="ours: with --freeze-setup, also turn Python's cyclic GC off in the workers during "
        "the measured window: separates the packed layout's GC cost from the agent's own work",
    )
    parser.add_argument(
        "--etcd-binary",
        default=None,
        help="the etcd server to run (default: `etcd` on PATH); e.g. the release the operator "
        "deploys, built by `make etcd-release`",
    )
    parser.add_argument(
        "--etcd-profile",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="with --profile: etcd's CPU profile (Go pprof) of SECONDS from each start signal",
    )
    parser.add_argument(
        "--profile", metavar="DIR", help="ours: a cProfile per worker process and case in DIR"
    )
    parser.add_argument(
        "--request-timeout",
        type=float,
        help="ours: the deadline of one etcd request (s); default: the agent's",
    )
    args = parser.parse_args()
    if args.loop:
        if args.loop < 1:
            parser.error("--loop must be at least 1")
        args.candidates, args.scenarios, args.sizes, args.repeat = (
            "ours",
            "min-eq-max",
            "",
            args.loop,
        )
    scenarios = [s for s in args.scenarios.split(",") if s]
    unknown = [s for s in scenarios if s not in SCENARIOS]
    if unknown:
        # An unknown name once ran silently as last-call: a 1 s wait measured as our latency.
        parser.error(f"unknown scenario(s) {unknown}: choose from {SCENARIOS}")
    candidates = [c for c in args.candidates.split(",") if c]
    bad = [c for c in candidates if c not in CANDIDATES]
    if bad:
        parser.error(f"unknown candidate(s) {bad}")
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    sizes = [int(s) for s in args.sizes.split(",") if s]
    ours_sizes = [int(s) for s in args.ours_sizes.split(",") if s]
    resource.setrlimit(resource.RLIMIT_NOFILE, (20000, 20000))
    # A SIGTERM (e.g. from `timeout`) unwinds through the finally blocks: no stray etcd.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    ctx = mp.get_context("spawn")
    start = ctx.Event()
    pool: list[tuple[Any, Connection]] = []
    etcd = Etcd(binary=args.etcd_binary)
    tls_etcd = Etcd(tls=True, binary=args.etcd_binary) if "ours-tls" in candidates else None
    print(f"server: {etcd.version}", flush=True)
    rows: list[Row] = []
    hung = 0
    if args.profile:
        Path(args.profile).mkdir(parents=True, exist_ok=True)
    try:
        for scenario in scenarios:
            for n in sorted({*sizes, *ours_sizes}):
                # Repeats interleave the candidates: a change in the machine's load over the run
                # then weighs on each of them alike.
                for run, candidate in itertools.product(range(args.repeat), candidates):
                    if n not in sizes and candidate != "ours":
                        continue
                    server = tls_etcd if candidate == "ours-tls" and tls_etcd else etcd
                    case = Case(
                        candidate,
                        scenario,
                        n,
                        server.endpoint,
                        free_port(),
                        f"{candidate}-{scenario}-{n}-{uuid.uuid4().hex[:6]}",
                        args.path,
                        args.lease_ttl,
                        args.profile,
                        args.case_timeout,
                        server.tls_dir,
                        server.metrics,
                        request_timeout=args.request_timeout,
                        etcd_profile=args.etcd_profile,
                        freeze_setup=args.freeze_setup,
                        no_gc=args.no_gc,
                    )
                    # Fresh worker processes for every case: grpc's asyncio layer is bound
                    # to one event loop per process, and a case must not inherit the last
                    # one's (its late callbacks hit a closed loop and can wedge new calls).
                    _stop(pool)
                    pool = _spawn(ctx, args.workers, start)
                    try:
                        row = run_case(case, pool, start, server.proc.pid)
                    except Hung as exc:
                        hung += 1
                        print(f"HUNG (run {run + 1}): {exc}", flush=True)
                        if not args.loop:
                            raise
                        continue
                    rows.append(row)
                    print(_format(row), flush=True)
    except Hung:
        pass
    finally:
        etcd.close()
        if tls_etcd is not None:
            tls_etcd.close()
        _stop(pool)
    print()
    print(_table(rows, args.repeat))
    if args.loop:
        failed = sum(1 for r in rows if r.errors)
        print(
            f"\n--loop {args.loop}: {len(rows) + hung} runs, {hung} hung, {failed} with node errors"
        )
    return 3 if hung else 0


def _format(row: Row) -> str:
    c = row.case
    alj = f"{row.after_last_join:.3f}" if row.after_last_join is not None else "-"
    rdzv = f"{row.rendezvous:.3f}" if row.rendezvous is not None else "-"
    err = (
        f" errors={row.errors} ({row.first_error}; failed nodes stopped at: {row.stuck})"
        if row.errors
        else ""
    )
    server = (
        " etcd/node: "
        + " ".join(
            f"{name.replace(' ', '-')}={value / c.n:.2f}"
            for name, value in sorted(row.etcd.items())
            if value
        )
        if row.etcd
        else ""
    )
    return (
        f"{c.candidate:14s} {c.scenario:10s} N={c.n:5d} total={row.total:7.3f}s rdzv={rdzv} "
        f"after-last-join={alj} req/node={row.requests_per_node:6.1f} "
        f"failed-cas={row.failed_cas} unanswered={row.unanswered} "
        f"cpu(clients)={row.client_cpu:.2f}s "
        f"cpu(server)={row.server_cpu:.2f}s cpu/node={row.cpu_per_node * 1000:.2f}ms "
        f"load={row.load:.1f}{server}{err}"
    )


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def _table(rows: list[Row], repeat: int) -> str:
    """One line per case (medians when repeated; min-max of the totals in brackets)."""
    lines = [
        "| scenario | N | candidate | runs | total (s) | of which rendezvous (s) "
        "| last join -> last env (s) | requests/node | failed CAS | errors | CPU ms/node "
        "| vs ours | load |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    groups: dict[tuple[str, int, str], list[Row]] = {}
    for r in rows:
        groups.setdefault((r.case.scenario, r.case.n, r.case.candidate), []).append(r)
    ours = {
        (sc, n): _median([r.total for r in rs]) for (sc, n, c), rs in groups.items() if c == "ours"
    }
    for (scenario, n, candidate), rs in groups.items():
        total = _median([r.total for r in rs])
        spread = (
            f" ({min(r.total for r in rs):.3f}-{max(r.total for r in rs):.3f})"
            if repeat > 1
            else ""
        )
        joins = [r.after_last_join for r in rs if r.after_last_join is not None]
        alj = f"{_median(joins):.3f}" if joins else "-"
        rdzvs = [r.rendezvous for r in rs if r.rendezvous is not None]
        rdzv = f"{_median(rdzvs):.3f}" if rdzvs else "-"
        base = ours.get((scenario, n))
        ratio = f"{total / base:.2f}x" if base and candidate != "ours" else ""
        lines.append(
            f"| {scenario} | {n} | {candidate} | {len(rs)} | {total:.3f}{spread} | {rdzv} | {alj} "
            f"| {_median([r.requests_per_node for r in rs]):.1f} "
            f"| {sum(r.failed_cas for r in rs)} | {sum(r.errors for r in rs)} "
            f"| {_median([r.cpu_per_node for r in rs]) * 1000:.2f} | {ratio} "
            f"| {min(r.load for r in rs):.1f}-{max(r.load for r in rs):.1f} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
