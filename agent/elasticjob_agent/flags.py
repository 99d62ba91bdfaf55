"""The agent's command-line table: torchrun's flags and ours, each also read from
``PET_<NAME>`` (pure).

``build_parser(environ)`` declares the flags and their defaults as text; ``args.parse_args``
validates what it returns.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from typing import Any

from elasticjob_agent.protocol import defaults
from elasticjob_agent.protocol.endpoints import TLS_KEYS
from elasticjob_agent.protocol.hang_timeout import AutoSettings
from elasticjob_agent.protocol.restarts import TORCHRUN_MAX_RESTARTS_DEFAULT

# --rdzv-conf keys of our etcd-v3 backend (docs/contracts.md).
RDZV_SECONDS_KEYS = (
    "join_timeout",
    "last_call_timeout",
    "close_timeout",
    "heartbeat",
    "etcd_timeout",
)
"""The keys whose values are seconds (> 0)."""
RDZV_CONF_KEYS = (*RDZV_SECONDS_KEYS, "key_prefix", "node_id", *TLS_KEYS, "protocol")
_AUTO = AutoSettings()
"""The automatic hang timeout's defaults, shown in ``--progress-auto-conf``'s help."""


class _EnvDefault(argparse.Action):
    """A valued flag whose default comes from ``PET_<DEST>`` when that variable is set."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        environ: Mapping[str, str] = kwargs.pop("environ")
        env_name = f"PET_{dest.upper()}"
        if env_name in environ:
            kwargs["default"] = environ[env_name]
            kwargs["required"] = False
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser: Any, namespace: Any, values: Any, option: Any = None) -> None:
        setattr(namespace, self.dest, values)


class _EnvFlag(argparse.Action):
    """A boolean flag that is also on when ``PET_<DEST>`` is set to a non-zero value."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        environ: Mapping[str, str] = kwargs.pop("environ")
        value = environ.get(f"PET_{dest.upper()}", "0")
        kwargs["default"] = value not in ("", "0", "false", "False")
        super().__init__(option_strings, dest, nargs=0, **kwargs)

    def __call__(self, parser: Any, namespace: Any, values: Any, option: Any = None) -> None:
        setattr(namespace, self.dest, True)


def build_parser(environ: Mapping[str, str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="elasticjob-agent",
        description="Drop-in torchrun: elastic PyTorch workers with dynamic rendezvous on etcd v3.",
    )

    def valued(*names: str, default: Any, help: str, type: Any = str, **kw: Any) -> None:
        parser.add_argument(
            *names, action=_EnvDefault, environ=environ, default=default, type=type, help=help, **kw
        )

    def flag(*names: str, help: str) -> None:
        parser.add_argument(*names, action=_EnvFlag, environ=environ, help=help)

    valued("--nnodes", default="1:1", help="number of nodes, or MIN:MAX")
    valued(
        "--nproc-per-node",
        "--nproc_per_node",
        default="1",
        help="workers per node: an integer, cpu, gpu or auto",
    )
    valued(
        "--rdzv-backend",
        "--rdzv_backend",
        default=defaults.BACKEND_NAME,
        help="rendezvous backend: etcd-v3 (default; 'etcd' is an alias), or c10d (torch's own; "
        "restarts are then counted per node, as torchrun does)",
    )
    valued(
        "--rdzv-endpoint",
        "--rdzv_endpoint",
        default="",
        help="etcd client address host:port[,host:port...]",
    )
    valued("--rdzv-id", "--rdzv_id", default="none", help="job run id shared by all nodes")
    valued(
        "--rdzv-conf",
        "--rdzv_conf",
        default="",
        help="rendezvous settings key=value,...: " + ", ".join(RDZV_CONF_KEYS),
    )
    flag("--standalone", help="start an embedded etcd for a one-node run")
    valued(
        "--max-restarts",
        "--max_restarts",
        default=str(TORCHRUN_MAX_RESTARTS_DEFAULT),
        help="job-wide restarts after failures before the job fails",
    )
    valued(
        "--monitor-interval",
        "--monitor_interval",
        default="0.1",
        help="seconds between checks of the workers",
    )
    valued(
        "--start-method",
        "--start_method",
        default="spawn",
        choices=["spawn", "fork", "forkserver"],
        help="as in torchrun: it applies only to function entrypoints; a script (what torchrun "
        "and this agent run) always starts as a fresh subprocess, whatever the method",
    )
    valued(
        "--event-log-handler",
        "--event_log_handler",
        default="null",
        help="accepted for torchrun compatibility (ignored)",
    )
    valued("--role", default="default", help="user-defined role of the workers")
    flag("-m", "--module", help="run the script as a module, like python -m")
    flag("--no-python", "--no_python", help="run the script directly, not through python")
    flag("--run-path", "--run_path", help="run the script with runpy.run_path")
    valued("--log-dir", "--log_dir", default=None, help="base directory of worker log files")
    valued(
        "-r",
        "--redirects",
        default="0",
        help="redirect worker streams to files: 0-3 or local_rank:0-3,...",
    )
    valued("-t", "--tee", default="0", help="tee worker streams to files and the console")
    valued(
        "--log-line-prefix-template",
        "--log_line_prefix_template",
        default=None,
        help="prefix of tee'd lines (${role_name}, ${rank}, ${local_rank}, ${hostname})",
    )
    valued(
        "--local-ranks-filter",
        "--local_ranks_filter",
        default="",
        help="show only these local ranks' output on the console, e.g. 0,1",
    )
    valued("--node-rank", "--node_rank", default="0", help="static rendezvous only (ignored)")
    valued(
        "--master-addr",
        "--master_addr",
        default="127.0.0.1",
        help="static rendezvous only (ignored)",
    )
    valued("--master-port", "--master_port", default=None, help="static rendezvous only (ignored)")
    valued(
        "--local-addr",
        "--local_addr",
        default=None,
        help="this node's address for MASTER_ADDR when it is rank 0",
    )
    valued(
        "--shutdown-timeout",
        "--shutdown_timeout",
        default=environ.get(
            "TORCH_ELASTIC_SHUTDOWN_TIMEOUT", str(defaults.SHUTDOWN_TIMEOUT_SECONDS)
        ),
        help="seconds between SIGTERM and SIGKILL when stopping workers",
    )
    valued("--health-addr", "--health_addr", default="0.0.0.0", help="health server address")
    valued(
        "--health-port",
        "--health_port",
        default=str(defaults.HEALTH_PORT),
        help="health server port; 0 disables it",
    )
    valued(
        "--etcd-timeout",
        "--etcd_timeout",
        default=None,
        help="seconds etcd may stay unreachable before exit code 13 "
        f"(default {defaults.ETCD_TIMEOUT_SECONDS})",
    )
    valued(
        "--nccl-collective-timeout",
        "--nccl_collective_timeout",
        default=str(defaults.NCCL_COLLECTIVE_TIMEOUT_SECONDS),
        help=f"collective timeout (s), as {defaults.COLLECTIVE_TIMEOUT_ENV}",
    )
    valued(
        "--nccl-heartbeat-timeout",
        "--nccl_heartbeat_timeout",
        default=str(defaults.NCCL_HEARTBEAT_TIMEOUT_SECONDS),
        help=defaults.NCCL_HEARTBEAT_TIMEOUT_ENV,
    )
    valued(
        "--nccl-async-error-handling",
        "--nccl_async_error_handling",
        default=None,
        help=f"{defaults.NCCL_ASYNC_ERROR_HANDLING_ENV} "
        f"(default {defaults.NCCL_ASYNC_ERROR_HANDLING}, or the inherited value)",
    )
    valued(
        "--nccl-monitoring",
        "--nccl_monitoring",
        default=str(int(defaults.NCCL_MONITORING)),
        help=f"{defaults.NCCL_MONITORING_ENV} (0 or 1)",
    )
    valued("--node-id", "--node_id", default=None, help="this node's id (default hostname-pid)")
    valued(
        "--progress-timeout",
        "--progress_timeout",
        default="0",
        help="seconds without a step report (elasticjob_agent.progress.report_step) after the "
        "first one before the group restarts with reason hang; 0 (default): off; auto: a "
        "multiple of the observed step interval (--progress-auto-conf)",
    )
    valued(
        "--progress-auto-conf",
        "--progress_auto_conf",
        default="",
        help="with --progress-timeout auto, key=value,...: "
        f"factor ({_AUTO.factor:g}), percentile ({_AUTO.percentile:g}), "
        f"window ({_AUTO.window} intervals), floor ({_AUTO.floor:g} s), "
        f"ceiling ({_AUTO.ceiling:g} s), exempt ({_AUTO.exempt} steps per round)",
    )
    valued(
        "--failure-policy",
        "--failure_policy",
        default=None,
        help='a JSON file (or the JSON text itself) {"rules": [...]} as in an ElasticJob\'s '
        "spec.failurePolicy: FailJob / Ignore / Count a failure by exit code, root cause or "
        "reason",
    )
    flag(
        "--preflight",
        help="before the first round, time a short fixed computation (a few tenths of a second, "
        "10 s at most) and report it as preflightSeconds for the operator to compare nodes",
    )
    valued(
        "--warm-workers",
        "--warm_workers",
        default="1",
        help="1: keep spare workers with torch imported so restarts skip the import; 0: off",
    )
    valued(
        "--log-format",
        "--log_format",
        default=environ.get(defaults.LOG_FORMAT_ENV, defaults.LOG_FORMAT),
        help="the agent's own log lines (not the workers' output): "
        f"{' or '.join(defaults.LOG_FORMATS)} (default {defaults.LOG_FORMAT}, "
        f"or ${defaults.LOG_FORMAT_ENV})",
    )
    parser.add_argument("training_script", help="the training script (or module, or program)")
    parser.add_argument("training_script_args", nargs=argparse.REMAINDER)
    return parser
