"""``python -m elasticjob_agent.checkpoint``: one node's checkpoint service on its own, for
tests and the benchmark (the agent runs the same service inside ``elasticjob-agent``).

Settings come from ``ELASTICJOB_CHECKPOINT_*``; prints ``ready <socket> <endpoint>`` once it
serves, and stops on SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading
from contextlib import ExitStack
from pathlib import Path

from elasticjob_agent.checkpoint.config import SOCKET_ENV, settings_from_env
from elasticjob_agent.checkpoint.serving import start_checkpoints
from elasticjob_agent.etcd.session import EtcdSession
from elasticjob_agent.protocol.endpoints import TlsFiles, parse_endpoints
from elasticjob_agent.protocol.keys import DEFAULT_PREFIX, JobKeys


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m elasticjob_agent.checkpoint")
    parser.add_argument(
        "--etcd", help="etcd endpoint (https: the checkpoint certificates); none: no peers"
    )
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--node", required=True)
    parser.add_argument("--addr", default="127.0.0.1")
    parser.add_argument("--work-dir", required=True)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    settings = settings_from_env(os.environ)
    if settings is None:
        parser.error("set ELASTICJOB_CHECKPOINT_MEMORY_LIMIT")
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    with ExitStack() as stack:
        session = None
        if args.etcd:
            tls = settings.tls
            files = TlsFiles(tls.cacert, tls.cert, tls.key) if tls is not None else None
            endpoints = parse_endpoints(args.etcd, files if args.etcd.startswith("https") else None)
            session = EtcdSession(endpoints, request_timeout=5.0, lease_ttl=10)
            stack.callback(session.close)
        served = start_checkpoints(
            settings,
            stack,
            session=session,
            keys=JobKeys(DEFAULT_PREFIX, args.run_id),
            node=args.node,
            local_addr=args.addr,
            work_dir=Path(args.work_dir),
        )
        print(f"ready {served.env[SOCKET_ENV]}", flush=True)
        stop.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
