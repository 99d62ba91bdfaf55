"""Import first (before grpc): keep gRPC's fork handlers out of the agent's process.

The agent starts workers and warm spares with ``subprocess.Popen(preexec_fn=...)`` (to set
``PR_SET_PDEATHSIG``), which makes CPython use a real ``fork()``. With gRPC's fork support on,
its ``pthread_atfork`` handlers run in that fork while the etcd client's threads are inside gRPC
("Other threads are currently calling into gRPC, skipping fork() handlers") and the child can
die with SIGSEGV before it execs: a worker that "failed" with exit code -11 within a fraction of
a second, counted as a ``failure`` restart (seen under CPU load, when the warm pool is not ready
and workers are started cold). With ``GRPC_ENABLE_FORK_SUPPORT=false`` gRPC installs no fork
handlers; the child only calls ``prctl(2)`` and execs. Workers get the user's own value back
(``worker_environ``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

GRPC_FORK_VAR = "GRPC_ENABLE_FORK_SUPPORT"

_USER_VALUE = os.environ.get(GRPC_FORK_VAR)
os.environ[GRPC_FORK_VAR] = "false"


def worker_environ(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` with ``GRPC_ENABLE_FORK_SUPPORT`` as the user set it (or unset)."""
    env = dict(environ)
    if _USER_VALUE is None:
        env.pop(GRPC_FORK_VAR, None)
    else:
        env[GRPC_FORK_VAR] = _USER_VALUE
    return env
