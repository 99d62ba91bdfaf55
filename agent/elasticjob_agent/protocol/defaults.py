"""The agent's defaults, each written once: the agent's flags, its dataclasses, the operator's
parsed spec and the CRD's ``default:`` values all take them from here (pure, standard library
only; ``tests/unit/operator/test_crd_defaults.py`` ties the CRD to this module).

Times are whole seconds: the CRD's fields are integers, and the agent converts to ``float``.
"""

from __future__ import annotations

# NCCL failure detection, passed to every worker (``spec.nccl``, ``--nccl-*``).
NCCL_COLLECTIVE_TIMEOUT_SECONDS = 1800
"""How long a collective may block before it fails the worker."""
NCCL_HEARTBEAT_TIMEOUT_SECONDS = 600
"""``TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC``: how long NCCL's watchdog may stall."""
NCCL_ASYNC_ERROR_HANDLING = 3
"""``TORCH_NCCL_ASYNC_ERROR_HANDLING``: 3 tears down the process group on error, no crash."""
NCCL_MONITORING = True
"""``TORCH_NCCL_ENABLE_MONITORING``: the heartbeat monitor is on."""

# The rendezvous (``spec.rendezvous``, ``--rdzv-conf``).
RDZV_JOIN_TIMEOUT_SECONDS = 600
"""How long ``next_rendezvous()`` waits for its round to complete (then fails for good)."""
RDZV_LAST_CALL_TIMEOUT_SECONDS = 30
"""Extra wait for more nodes once ``min_nodes`` have joined."""
RDZV_CLOSE_TIMEOUT_SECONDS = 30
"""How long ``shutdown()`` may spend leaving and closing."""
RDZV_HEARTBEAT_SECONDS = 5
"""Lease TTL: a node that stops refreshing for this long is dropped."""
ETCD_TIMEOUT_SECONDS = 300
"""How long etcd may stay unreachable before the agent gives up (exit code 13)."""
SHUTDOWN_TIMEOUT_SECONDS = 30
"""Seconds between SIGTERM and SIGKILL when the agent stops its workers."""
KEY_PREFIX = "/elasticjob"
"""Every job's etcd keys live under ``<prefix>/<run_id>/`` (``spec.etcd.keyPrefix``)."""
BACKEND_NAME = "etcd-v3"
"""Our rendezvous backend, as ``--rdzv-backend`` and torch's handler registry name it."""

# The agent's own log records (``--log-format``).
LOG_FORMATS = ("text", "json")
"""``text`` (the default) for people, ``json`` (one object a line) for log stores."""
LOG_FORMAT = "text"
LOG_FORMAT_ENV = "ELASTICJOB_LOG_FORMAT"
"""The environment variable that sets ``--log-format``'s default."""

# Ports.
HEALTH_PORT = 29401
"""The agent's health server (``/healthz``, ``/status``, ``/metrics``)."""
CHECKPOINT_PORT = 29402
"""The agents' checkpoint replication port (mutual TLS)."""
ETCD_CLIENT_PORT = 2379
"""etcd's client port: a managed etcd's, and an endpoint's when it names none."""

# Environment variables the agent sets for its workers.
TIMER_SOCKET_ENV = "ELASTICJOB_TIMER_SOCKET"
"""The Unix datagram socket of the agent's timer server (``timers.expires``, progress)."""
COLLECTIVE_TIMEOUT_ENV = "ELASTICJOB_COLLECTIVE_TIMEOUT_SECONDS"
"""The collective timeout, for training code to pass to ``init_process_group``."""
NCCL_ASYNC_ERROR_HANDLING_ENV = "TORCH_NCCL_ASYNC_ERROR_HANDLING"
"""torch's variable; an agent that inherits it passes its value on (``--nccl-async-...``)."""
NCCL_HEARTBEAT_TIMEOUT_ENV = "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC"
"""torch's variable for the NCCL heartbeat timeout."""
NCCL_MONITORING_ENV = "TORCH_NCCL_ENABLE_MONITORING"
"""torch's variable for the NCCL heartbeat monitor (``0`` or ``1``)."""

# Compute time per step (``elasticjob_agent.progress.step_timer``), for straggler detection.
COMPUTE_WINDOW_STEPS = 20
"""The health report's ``computeSeconds`` is the median over a node's local ranks of each
rank's median over its last this many timed steps."""
