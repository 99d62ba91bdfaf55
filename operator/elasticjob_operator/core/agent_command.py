"""Turn the user's training command into an ``elasticjob-agent`` command line (pure).

The user writes only ``[python, train.py, --steps, 200]``; the worker runs
``elasticjob-agent <every flag> train.py --steps 200``. A command that is not ``python script``
or ``python -m module`` runs as ``--no-python`` so the agent executes it as written.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from elasticjob_agent.protocol.endpoints import Endpoint, format_endpoints, tls_conf
from elasticjob_agent.protocol.health import DEFAULT_HEALTH_PORT

from .spec import JobSpec, SpecError

AGENT = "elasticjob-agent"
POD_IP_ENV = "ELASTICJOB_POD_IP"
_PYTHON = re.compile(r"^(.*/)?python(3(\.\d+)?)?$")
_LAUNCHERS = ("torchrun", AGENT, "python -m torch.distributed.run")

ETCD_TIMEOUT_MARGIN_SECONDS = 60
"""Agents wait this much longer than ``stallTimeoutSeconds`` for etcd, so the operator decides
first (remediate or fail the job with the stall's reason) instead of agents exiting one by one."""


@dataclass(frozen=True)
class AgentTarget:
    """Where the agent finds etcd and who it is."""

    rdzv_endpoints: tuple[Endpoint, ...]
    """Each says whether (and with which files) the agent speaks TLS to etcd."""
    run_id: str
    node_id: str
    nproc_per_node: int
    grace_seconds: int = 60
    """The pod's ``terminationGracePeriodSeconds``; the agent's worker shutdown fits inside it."""


def training_argv(command: Sequence[str], args: Sequence[str]) -> list[str]:
    """The agent's positional part: ``script args``, ``-m module args`` or ``--no-python cmd``."""
    argv = [*command, *args]
    if not argv:
        raise SpecError("spec.template.spec.containers[trainer].command must not be empty")
    head = argv[0].rsplit("/", 1)[-1]
    if head in ("torchrun", AGENT) or " ".join(argv[:3]) in _LAUNCHERS:
        raise SpecError(
            "spec.template.spec.containers[trainer].command: write only the training command "
            f"(e.g. [python, train.py]); the operator adds {AGENT} and its flags itself"
        )
    if _PYTHON.match(argv[0]) and len(argv) >= 2:
        if argv[1] == "-m" and len(argv) >= 3:
            return ["-m", *argv[2:]]
        if not argv[1].startswith("-"):
            return argv[1:]
    return ["--no-python", *argv]


def agent_args(spec: JobSpec, target: AgentTarget, argv: Sequence[str]) -> list[str]:
    """Every agent flag the job's spec implies, then the training part ``argv``.

    ``--local-addr`` uses ``$(ELASTICJOB_POD_IP)``, which Kubernetes expands from the container's
    environment (the builder sets it from ``status.podIP`` through the downward API).
    """
    rdzv = spec.rendezvous
    conf = ",".join(
        [
            f"join_timeout={rdzv.join_timeout_seconds}",
            f"last_call_timeout={rdzv.last_call_timeout_seconds}",
            f"close_timeout={rdzv.close_timeout_seconds}",
            f"heartbeat={rdzv.heartbeat_seconds}",
            f"key_prefix={spec.etcd.key_prefix}",
            # torchrun's names for TLS to etcd (the endpoints are https:// then).
            *(f"{k}={v}" for k, v in tls_conf(target.rdzv_endpoints[0].tls).items()),
        ]
    )
    nccl = spec.nccl
    return [
        f"--nnodes={spec.min_nodes}:{spec.max_nodes}",
        f"--nproc-per-node={target.nproc_per_node}",
        "--rdzv-backend=etcd-v3",
        f"--rdzv-endpoint={format_endpoints(target.rdzv_endpoints)}",
        f"--rdzv-id={target.run_id}",
        f"--rdzv-conf={conf}",
        f"--max-restarts={spec.max_restarts}",
        f"--monitor-interval={_number(spec.monitor_interval_seconds)}",
        f"--node-id={target.node_id}",
        f"--local-addr=$({POD_IP_ENV})",
        f"--health-port={DEFAULT_HEALTH_PORT}",
        f"--shutdown-timeout={worker_shutdown_seconds(target.grace_seconds)}",
        f"--etcd-timeout={spec.stall_timeout_seconds + ETCD_TIMEOUT_MARGIN_SECONDS}",
        f"--nccl-collective-timeout={nccl.collective_timeout_seconds}",
        f"--nccl-heartbeat-timeout={nccl.heartbeat_timeout_seconds}",
        f"--nccl-async-error-handling={nccl.async_error_handling}",
        f"--nccl-monitoring={1 if nccl.monitoring else 0}",
        *(
            [f"--progress-timeout={spec.progress_timeout_seconds}"]
            if spec.progress_timeout_seconds is not None
            else []
        ),
        *(
            ["--progress-timeout=auto", f"--progress-auto-conf={spec.progress_auto.to_conf()}"]
            if spec.progress_auto is not None
            else []
        ),
        *(["--preflight"] if spec.health.preflight else []),
        *(
            # Inline JSON; "$" doubled because Kubernetes expands $(VAR) in a container's args.
            [f"--failure-policy={spec.failure_policy.dumps().replace('$', '$$')}"]
            if spec.failure_policy.rules
            else []
        ),
        *argv,
    ]


SHUTDOWN_MARGIN_SECONDS = 10
"""Of a pod's grace period, what the agent keeps for itself after its workers stopped: counting
the preemption and leaving the rendezvous come first (at once), its exit comes last."""


def worker_shutdown_seconds(grace_seconds: int) -> int:
    """How long the workers get between SIGTERM and SIGKILL inside a pod grace period."""
    return max(1, grace_seconds - SHUTDOWN_MARGIN_SECONDS)


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(value)
