"""torch parity of the rendezvous in one process: own node ids per handler, a clean exit."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

from elasticjob_agent.rendezvous import RendezvousConnectionError
from elasticjob_agent.rendezvous.backend import create_backend
from elasticjob_agent.rendezvous.config import RendezvousConfig
from elasticjob_agent.rendezvous.handler import EtcdRendezvousHandler
from torch.distributed.elastic.rendezvous import RendezvousParameters

from tests.support.etcd_server import EtcdServer
from tests.support.rendezvous_handlers import new_run_id

REPO = Path(__file__).resolve().parents[3]


def test_handlers_without_a_node_id_in_one_process_complete(
    etcd_server_session: EtcdServer,
) -> None:
    # Like torch's own handlers (addr_pid_localid): each handler is a node of its own.
    params = RendezvousParameters(
        backend="etcd-v3",
        endpoint=etcd_server_session.endpoint,
        run_id=new_run_id(),
        min_nodes=3,
        max_nodes=3,
        join_timeout="60",
        last_call_timeout="1",
    )
    handlers = [EtcdRendezvousHandler(RendezvousConfig.from_parameters(params)) for _ in range(3)]
    assert len({h.config.node_id for h in handlers}) == 3
    ranks: list[int] = []
    lock = threading.Lock()

    def join(h: EtcdRendezvousHandler) -> None:
        info = h.next_rendezvous()
        with lock:
            ranks.append(info.rank)

    threads = [threading.Thread(target=join, args=(h,), daemon=True) for h in handlers]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(90)
        assert sorted(ranks) == [0, 1, 2]
    finally:
        for h in handlers:
            h.shutdown()


def test_a_closed_backend_raises_a_rendezvous_error_never_a_closed_loop(
    etcd_server_session: EtcdServer,
) -> None:
    params = RendezvousParameters(
        backend="etcd-v3",
        endpoint=etcd_server_session.endpoint,
        run_id=new_run_id(),
        min_nodes=1,
        max_nodes=1,
    )
    backend, _store = create_backend(params)
    errors: list[BaseException] = []
    stop = threading.Event()

    calls = [0]

    def hammer() -> None:  # what torch's keep-alive timer does, at any time
        while not stop.is_set():
            try:
                backend.get_state()
            except BaseException as exc:
                errors.append(exc)
            calls[0] += 1

    thread = threading.Thread(target=hammer, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while calls[0] < 3 and time.monotonic() < deadline:  # it runs before the close
        time.sleep(0.01)
    backend.close()
    closed_at = calls[0]
    while calls[0] < closed_at + 3 and time.monotonic() < deadline:  # and after it
        time.sleep(0.01)
    stop.set()
    thread.join(10)
    assert not thread.is_alive()
    assert errors, "get_state after close() must fail"
    assert all(isinstance(e, RendezvousConnectionError) for e in errors), {
        type(e).__name__: str(e) for e in errors
    }


_TORCH_HANDLER_SCRIPT = """
import sys, time
from torch.distributed.elastic.rendezvous import RendezvousParameters
from torch.distributed.elastic.rendezvous.dynamic_rendezvous import create_handler
from elasticjob_agent.rendezvous.backend import create_backend
params = RendezvousParameters(backend="etcd-v3", endpoint=sys.argv[1], run_id=sys.argv[2],
    min_nodes=1, max_nodes=1, last_call_timeout="1", local_addr="127.0.0.1",
    keep_alive_interval="1")
backend, store = create_backend(params)
handler = create_handler(store, backend, params)
print("rank", handler.next_rendezvous().rank, flush=True)
backend.close()  # before torch's handler stops its keep-alive timer
time.sleep(2.5)
print("exiting", flush=True)
"""


def test_torch_handler_on_our_backend_exits_without_tracebacks(
    etcd_server_session: EtcdServer,
) -> None:
    result = subprocess.run(
        [sys.executable, "-c", _TORCH_HANDLER_SCRIPT, etcd_server_session.endpoint, new_run_id()],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env={"PYTHONPATH": str(REPO / "agent"), "PATH": "/usr/bin:/bin"},
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "rank 0" in result.stdout and "exiting" in result.stdout
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    assert "Event loop is closed" not in result.stderr
