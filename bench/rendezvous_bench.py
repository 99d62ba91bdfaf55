"""Rendezvous completion time for N simulated nodes, ours against torch's, in the same run.

Candidates (every node has its own client connection; nodes are spread round-robin over a fixed
pool of worker processes, so no single process's GIL decides the result):

- ``ours``: our rendezvous (``elasticjob_agent.rendezvous``) on etcd v3: the same executor and
  master-address bootstrap that ``EtcdRendezvousHandler.next_rendezvous()`` runs, one
  ``EtcdClient`` (one TCP connection) per node, nodes as asyncio tasks in each worker;
- ``torch-c10d``: torch's ``DynamicRendezvousHandler`` on its ``C10dRendezvousBackend``
  (one TCPStore client per node, the TCPStore server in the parent), one thread per node;
- ``torch-etcd-v3``: torch's ``DynamicRendezvousHandler`` on our ``EtcdV3RendezvousBackend``.

Scenarios: ``min-eq-max`` (``min = max = N``: completes at max) and ``last-call`` (``min = N``,
``max = 2N``, ``last_call = 1 s``). Reported per case: time from the start signal to the last
node returning, for ours also from the last join to the last return, requests per node (etcd
requests for etcd backends; state reads and writes for torch's handler), and failed
compare-and-swaps. Then the ratio torch/ours for each case.

etcd runs with its data directory on tmpfs (/dev/shm; etcd 3.4 has no ``--unsafe-no-fsync``),
the same for every etcd candidate.

    .venv/bin/python bench/rendezvous_bench.py                 # the full table
    .venv/bin/python bench/rendezvous_bench.py --sizes 8,64 --ours-sizes 1024 --workers 4
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing as mp
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from elasticjob_agent.etcd.client import EtcdClient
from elasticjob_agent.protocol.keys import JobKeys
from elasticjob_agent.rendezvous.backend import create_backend
from elasticjob_agent.rendezvous.executor import Executor
from elasticjob_agent.rendezvous.session import LeaseKeeper
from elasticjob_agent.rendezvous.state import Context
from elasticjob_agent.rendezvous.wire import RendezvousKeys
from torch.distributed import TCPStore  # type: ignore[attr-defined]
from torch.distributed.elastic.rendezvous import RendezvousParameters
from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import C10dRendezvousBackend
from torch.distributed.elastic.rendezvous.dynamic_rendezvous import (
    RendezvousBackend,
    create_handler,
)

CASE_TIMEOUT = 240.0
SCENARIOS = ("min-eq-max", "last-call")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class Case:
    candidate: str
    scenario: str
    n: int
    endpoint: str
    tcp_port: int
    run_id: str

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


# --- worker side -------------------------------------------------------------------------


def _ours(case: Case, nodes: list[str], ready: Connection, start: Any) -> list[NodeResult]:
    keys = RendezvousKeys.of(JobKeys("/bench", case.run_id))

    async def main() -> list[NodeResult]:
        clients = [EtcdClient(case.endpoint, request_timeout=60) for _ in nodes]
        leases = [LeaseKeeper(c, 10) for c in clients]
        # Connected (watch stream open) and holding a lease before the start signal, like an
        # agent that is up.
        await asyncio.gather(*(c.prepare() for c in clients))
        await asyncio.gather(*(lease.current() for lease in leases))
        executors = [
            Executor(c, keys, node, lease, etcd_timeout=60, recheck_interval=5)
            for c, node, lease in zip(clients, nodes, leases, strict=True)
        ]
        before = [c.requests for c in clients]
        ready.send("ready")
        await asyncio.get_running_loop().run_in_executor(None, _wait_start, start)

        async def one(ex: Executor) -> tuple[float, float | None]:
            now = time.time()
            ctx = Context(
                min_nodes=case.min_nodes,
                max_nodes=case.max_nodes,
                last_call_timeout=case.last_call,
                join_deadline=now + CASE_TIMEOUT,
                recheck_interval=5.0,
            )
            outcome = await ex.next_rendezvous(ctx, 0)
            assert outcome.master_addr == "127.0.0.1"
            return time.time(), ex.joined_at

        done = await asyncio.gather(*(one(ex) for ex in executors), return_exceptions=True)
        results = []
        for d, c, b in zip(done, clients, before, strict=True):
            if isinstance(d, BaseException):
                results.append(NodeResult(time.time(), None, c.requests - b, 0, repr(d)))
            else:
                results.append(NodeResult(d[0], d[1], c.requests - b, c.failed_txns))
        for lease in leases:
            await lease.stop()
        await asyncio.gather(*(c.close() for c in clients))
        return results

    return asyncio.run(main())


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
        join_timeout=str(int(CASE_TIMEOUT)),
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

    def run(i: int) -> None:
        if i == 0:
            _wait_start(start)
        start.wait()
        try:
            handlers[i].next_rendezvous()
            results[i] = NodeResult(time.time(), None, 0, 0)
        except Exception as exc:
            results[i] = NodeResult(time.time(), None, 0, 0, repr(exc))

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(len(nodes))]
    for t in threads:
        t.start()
    ready.send("ready")
    for t in threads:
        t.join(CASE_TIMEOUT + 30)
    out: list[NodeResult] = []
    for i, maybe in enumerate(results):
        r = maybe or NodeResult(time.time(), None, 0, 0, "hung")
        c = counters[i]
        if sessions:
            r.requests = sessions[i].client.requests - etcd_before[i]
        else:
            r.requests = c.reads + c.writes
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
        fn = _ours if case.candidate == "ours" else _torch
        try:
            results = fn(case, nodes, conn, start)
            if case.candidate == "ours":
                conn.send((results, _cpu() - _START_CPU[0]))
                conn.recv()
        except Exception as exc:  # report, keep the pool alive
            conn.send("ready")
            conn.send(([NodeResult(time.time(), None, 0, 0, repr(exc)) for _ in nodes], 0.0))
            conn.recv()
        conn.send("clean")


# --- parent side -------------------------------------------------------------------------


class Etcd:
    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="ej-bench-etcd-", dir="/dev/shm"))
        self.port, peer = free_port(), free_port()
        client, peer_url = f"http://127.0.0.1:{self.port}", f"http://127.0.0.1:{peer}"
        binary = shutil.which("etcd")
        if binary is None:
            raise SystemExit("etcd not found: run scripts/setup.sh")
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
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            ok = subprocess.run(
                ["etcdctl", f"--endpoints=127.0.0.1:{self.port}", "endpoint", "health"],
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
        return f"127.0.0.1:{self.port}"

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
    errors: int
    first_error: str | None
    client_cpu: float
    """CPU seconds of the worker processes from the start signal to their last node."""
    etcd_cpu: float
    """CPU seconds etcd used in the same window."""


ETCD_PID = [0]


def etcd_cpu() -> float:
    """CPU seconds etcd has used so far (utime + stime from /proc)."""
    fields = Path(f"/proc/{ETCD_PID[0]}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_case(case: Case, pool: list[tuple[Any, Connection]], start: Any) -> Row:
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
    for conn, share in active:
        conn.send((case, share))
    for conn, _ in active:
        if conn.recv() != "ready":
            raise RuntimeError("worker not ready")
    time.sleep(0.2)
    server_before = etcd_cpu()
    t0 = time.time()
    start.set()
    results: list[NodeResult] = []
    cpu = 0.0
    for conn, _ in active:
        part, part_cpu = conn.recv()
        results.extend(part)
        cpu += part_cpu
    server_cpu = etcd_cpu() - server_before if case.candidate != "torch-c10d" else 0.0
    for conn, _ in active:
        conn.send("cleanup")
    for conn, _ in active:
        conn.recv()
    start.clear()
    del master
    errors = [r.error for r in results if r.error]
    joined = [r.joined_at for r in results if r.joined_at is not None]
    last = max(r.done_at for r in results)
    return Row(
        case=case,
        total=last - t0,
        after_last_join=(last - max(joined)) if joined else None,
        requests_per_node=sum(r.requests for r in results) / len(results),
        failed_cas=sum(r.failed_cas for r in results),
        errors=len(errors),
        first_error=errors[0] if errors else None,
        client_cpu=cpu,
        etcd_cpu=server_cpu,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="8,64,256", help="N for every candidate")
    parser.add_argument("--ours-sizes", default="1024", help="extra N for ours only")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS), help=f"of {SCENARIOS}")
    parser.add_argument("--candidates", default="ours,torch-c10d,torch-etcd-v3")
    parser.add_argument("--workers", type=int, default=4, help="worker processes")
    args = parser.parse_args()
    scenarios = [s for s in args.scenarios.split(",") if s]
    unknown = [s for s in scenarios if s not in SCENARIOS]
    if unknown:
        # An unknown name once ran silently as last-call: a 1 s wait measured as our latency.
        parser.error(f"unknown scenario(s) {unknown}: choose from {SCENARIOS}")
    sizes = [int(s) for s in args.sizes.split(",") if s]
    ours_sizes = [int(s) for s in args.ours_sizes.split(",") if s]
    candidates = args.candidates.split(",")
    resource.setrlimit(resource.RLIMIT_NOFILE, (20000, 20000))
    # A SIGTERM (e.g. from `timeout`) unwinds through the finally blocks: no stray etcd.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    ctx = mp.get_context("spawn")
    start = ctx.Event()
    pool = []
    for _ in range(args.workers):
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=worker, args=(child, start), daemon=True)
        proc.start()
        pool.append((proc, parent))
    etcd = Etcd()
    ETCD_PID[0] = etcd.proc.pid
    rows: list[Row] = []
    try:
        for scenario in scenarios:
            for n in sorted({*sizes, *ours_sizes}):
                for candidate in candidates:
                    if n not in sizes and candidate != "ours":
                        continue
                    case = Case(
                        candidate,
                        scenario,
                        n,
                        etcd.endpoint,
                        free_port(),
                        f"{candidate}-{scenario}-{n}-{uuid.uuid4().hex[:6]}",
                    )
                    row = run_case(case, pool, start)
                    rows.append(row)
                    print(_format(row), flush=True)
    finally:
        etcd.close()
        for proc, conn in pool:
            with contextlib.suppress(OSError):
                conn.send(None)
            proc.join(5)
            if proc.is_alive():
                proc.kill()
    print()
    print(_table(rows))
    return 0


def _format(row: Row) -> str:
    c = row.case
    alj = f"{row.after_last_join:.3f}" if row.after_last_join is not None else "-"
    err = f" errors={row.errors} ({row.first_error})" if row.errors else ""
    return (
        f"{c.candidate:14s} {c.scenario:9s} N={c.n:5d} total={row.total:7.3f}s "
        f"after-last-join={alj} req/node={row.requests_per_node:6.1f} "
        f"failed-cas={row.failed_cas} cpu(clients)={row.client_cpu:.2f}s "
        f"cpu(etcd)={row.etcd_cpu:.2f}s{err}"
    )


def _table(rows: list[Row]) -> str:
    lines = [
        "| scenario | N | candidate | total (s) | last join -> last return (s) "
        "| requests/node | failed CAS | errors | CPU s clients | CPU s etcd | torch / ours |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    ours = {(r.case.scenario, r.case.n): r.total for r in rows if r.case.candidate == "ours"}
    for r in rows:
        c = r.case
        base = ours.get((c.scenario, c.n))
        ratio = f"{r.total / base:.1f}x" if base and c.candidate != "ours" else ""
        alj = f"{r.after_last_join:.3f}" if r.after_last_join is not None else "-"
        lines.append(
            f"| {c.scenario} | {c.n} | {c.candidate} | {r.total:.3f} | {alj} "
            f"| {r.requests_per_node:.1f} | {r.failed_cas} | {r.errors} "
            f"| {r.client_cpu:.2f} | {r.etcd_cpu:.2f} | {ratio} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
