"""``elasticjob-agent``: parse the command line, wire the pieces, run the supervisor, exit.

Exit codes are ``protocol.exit_codes.ExitCode``; a bad command line exits 2 before anything starts.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import tempfile
import uuid
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

# First: it must run before anything imports grpc (the etcd session does).
from elasticjob_agent._fork_safe_grpc import worker_environ
from elasticjob_agent.args import C10D, AgentArgs, UsageError, parse_args, resolve_nproc
from elasticjob_agent.errors import RendezvousConnectionError
from elasticjob_agent.etcd.session import EtcdSession
from elasticjob_agent.health.metrics import AgentMetrics
from elasticjob_agent.health.ports import start_with_fallback
from elasticjob_agent.health.server import HealthServer
from elasticjob_agent.health.status import AgentStatus
from elasticjob_agent.logs import EventContext, EventLog, configure
from elasticjob_agent.pid1 import init_if_pid1
from elasticjob_agent.protocol.checkpoint import NO_CHECKPOINTS, CheckpointFacts
from elasticjob_agent.protocol.endpoints import Endpoint, parse_endpoints
from elasticjob_agent.protocol.exit_codes import ExitCode
from elasticjob_agent.protocol.failure_policy import (
    MAX_POLICY_BYTES,
    FailurePolicy,
    FailurePolicyError,
    loads_policy,
)
from elasticjob_agent.protocol.health import EtcdStatus
from elasticjob_agent.protocol.keys import JobKeys
from elasticjob_agent.standalone import EmbeddedEtcd, EtcdStartError
from elasticjob_agent.supervision.agent_restart_counter import AgentRestartCounter
from elasticjob_agent.supervision.restart_counter import JobRestartCounter
from elasticjob_agent.supervision.settings import SupervisorSettings
from elasticjob_agent.supervision.supervisor import Supervisor
from elasticjob_agent.supervision.warm_pool import WarmPool
from elasticjob_agent.supervision.worker_env import TORCH_TIMER_FILE_ENV, AgentKnobs
from elasticjob_agent.supervision.worker_launch import worker_command
from elasticjob_agent.supervision.workers import LocalWorkers, LogSettings, WarmLaunch
from elasticjob_agent.timers import preflight
from elasticjob_agent.timers.server import TimerServer

logger = logging.getLogger("elasticjob_agent")

_PROBE_INTERVAL = 1.0


def _usage_error(message: str) -> int:
    print(f"elasticjob-agent: error: {message}", file=sys.stderr)
    return int(ExitCode.USAGE)


def _accelerators() -> int:
    try:
        import torch  # noqa: PLC0415 - only needed for --nproc-per-node gpu/auto

        return int(torch.cuda.device_count())
    except Exception:
        return 0


def _rendezvous_config(
    args: AgentArgs, endpoints: tuple[Endpoint, ...], run_id: str, node: str
) -> Any:
    """Our ``RendezvousConfig`` from the parsed arguments (no text in between); ``ValueError``
    on a bad value."""
    from elasticjob_agent.rendezvous.config import RendezvousConfig  # noqa: PLC0415

    return RendezvousConfig.from_args(args, endpoints=endpoints, run_id=run_id, node_id=node)


def _make_handler(config: Any, session: EtcdSession) -> Any:
    """Our etcd-v3 handler on the process's one etcd session."""
    from elasticjob_agent.rendezvous.handler import EtcdRendezvousHandler  # noqa: PLC0415

    return EtcdRendezvousHandler(config, session=session)


@dataclass(frozen=True)
class _Rendezvous:
    """The rendezvous side of one agent: its handler, restart counter and etcd record."""

    handler: Any
    counter: Any
    etcd_status: Callable[[], EtcdStatus]
    session: EtcdSession | None = None


def _etcd_rendezvous(
    args: AgentArgs, stack: ExitStack, endpoints: tuple[Endpoint, ...], run_id: str, node: str
) -> _Rendezvous:
    """Ours: the handler, the job-wide counter and the probe on the process's one etcd
    session. ``ValueError`` on a bad ``--rdzv-conf``."""
    config = _rendezvous_config(args, endpoints, run_id, node)
    # The process's one way to etcd: the handler, its stores, the restart counter and the
    # probe all run on this session (one loop thread, one channel, one reachability record).
    session = EtcdSession(
        endpoints, request_timeout=config.request_timeout, lease_ttl=config.lease_ttl
    )
    stack.callback(session.close)
    handler = _make_handler(config, session)
    session.start_probe(_PROBE_INTERVAL, timeout=_PROBE_INTERVAL)
    counter = JobRestartCounter(
        session, JobKeys(args.key_prefix, run_id), node, patience=args.etcd_timeout
    )

    def etcd_status() -> EtcdStatus:
        reach = session.reachability()
        return EtcdStatus(
            reach.reachable,
            reach.last_contact,
            reach.unreachable_since,
            tuple(e.url for e in endpoints),
        )

    return _Rendezvous(handler, counter, etcd_status, session)


def _c10d_rendezvous(args: AgentArgs, run_id: str, node: str) -> _Rendezvous:
    """torch's c10d rendezvous; restarts counted by this agent alone (docs/agent.md). No etcd:
    the report's ``etcd`` is reachable with no endpoints, and nothing waits for it."""
    from elasticjob_agent.rendezvous.c10d import make_c10d_handler  # noqa: PLC0415

    handler, store = make_c10d_handler(
        args.c10d_endpoint,
        run_id,
        min_nodes=args.min_nodes,
        max_nodes=args.max_nodes,
        local_addr=args.local_addr,
        conf=args.rdzv_conf,
    )
    no_etcd = EtcdStatus(True, None, None, ())
    return _Rendezvous(handler, AgentRestartCounter(store, run_id, node), lambda: no_etcd)


def load_failure_policy(source: str | None) -> FailurePolicy:
    """``--failure-policy``: JSON text (the operator passes it inline), else a file's path."""
    if source is None:
        return FailurePolicy()
    if source.lstrip().startswith("{"):
        return loads_policy(source, "--failure-policy")
    try:
        with open(source, "rb") as file:
            text = file.read(MAX_POLICY_BYTES + 1)
    except OSError as exc:
        raise FailurePolicyError(f"--failure-policy {source}: cannot read it: {exc}") from None
    return loads_policy(text, f"--failure-policy {source}")


def run(args: AgentArgs) -> int:
    try:
        policy = load_failure_policy(args.failure_policy)
    except FailurePolicyError as exc:
        return _usage_error(str(exc))
    nproc = resolve_nproc(args.nproc_per_node, os.cpu_count() or 1, _accelerators())
    node = args.node_id or args.rdzv_conf.get("node_id") or f"{socket.gethostname()}-{os.getpid()}"
    with ExitStack() as stack:
        if args.standalone:
            etcd = stack.enter_context(EmbeddedEtcd())
            endpoints, run_id = parse_endpoints(etcd.endpoint), str(uuid.uuid4())
            logger.info("standalone: embedded etcd at %s, rdzv id %s", etcd.endpoint, run_id)
        else:
            endpoints, run_id = args.rdzv_endpoints, args.rdzv_id
        events = EventLog(logger, EventContext(run_id=run_id, node=node))
        if args.rdzv_backend == C10D:
            try:
                rdzv = _c10d_rendezvous(args, run_id, node)
            except ValueError as exc:
                return _usage_error(f"--rdzv-conf: {exc}")
            except RendezvousConnectionError as exc:
                logger.error("c10d rendezvous store %s unreachable: %s", args.c10d_endpoint, exc)
                return int(ExitCode.ETCD_UNREACHABLE)
        else:
            try:
                rdzv = _etcd_rendezvous(args, stack, endpoints, run_id, node)
            except ValueError as exc:
                return _usage_error(str(exc))
        handler, counter = rdzv.handler, rdzv.counter
        metrics = AgentMetrics(run_id, etcd_reachable=lambda: rdzv.etcd_status().reachable)

        work_dir = Path(tempfile.mkdtemp(prefix="elasticjob-agent-"))
        stack.callback(_remove_tree, work_dir)
        # torch's file timers, served always (torchrun: only with TORCHELASTIC_ENABLE_FILE_TIMER=1)
        # at the path the user chose, like torchrun, else in our work directory.
        torch_timer_file = os.environ.get(TORCH_TIMER_FILE_ENV) or str(work_dir / "timer.fifo")
        timers = TimerServer(
            str(work_dir / "timer.sock"),
            torch_fifo=torch_timer_file,
            auto_timeout=args.progress_auto,
        )
        stack.callback(timers.close)
        try:
            checkpoint_env, checkpoint_facts = _checkpoints(
                args, stack, rdzv, run_id=run_id, node=node, work_dir=work_dir
            )
        except ValueError as exc:
            return _usage_error(str(exc))
        environ = {**worker_environ(os.environ), **checkpoint_env}

        status = AgentStatus(
            run_id,
            node,
            args.max_restarts,
            args.worst_case_time_to_fail,
            etcd=rdzv.etcd_status,
            progress=lambda: timers.last_progress,
            steps=lambda: None if (p := timers.steps()) is None else (p.step, p.at, p.done),
            first_step=timers.first_step,
            previous_step=timers.previous_step,
            checkpoints=checkpoint_facts,
            compute=timers.compute,
        )
        if args.health_port:

            def start_health(port: int) -> HealthServer:
                return HealthServer(
                    args.health_addr,
                    port,
                    status.report,
                    metrics.render,
                    lambda: status.alive(within=max(30.0, 10 * args.monitor_interval)),
                )

            try:
                server = start_with_fallback(
                    start_health, args.health_addr, args.health_port, lambda s: s.port
                )
            except OSError as exc:
                return _usage_error(
                    f"cannot serve health on {args.health_addr}:{args.health_port}: {exc} "
                    "(choose another --health-port, or 0 to disable)"
                )
            stack.callback(server.close)
            status.update(health_port=server.port)
            logger.info("health server on %s:%d", args.health_addr, server.port)
        if args.preflight:  # before the warm workers import torch: nothing else runs yet
            checked = preflight.measure()
            status.update(preflight_seconds=checked)
            logger.info("preflight check took %.3f s", checked)

        log_dir = Path(args.log_dir) if args.log_dir else work_dir / "logs"
        log_dir = log_dir / f"{run_id}_{uuid.uuid4().hex[:8]}"
        command = worker_command(
            args.training_script,
            args.training_script_args,
            os.environ.get("PYTHON_EXEC", sys.executable),
            module=args.module,
            no_python=args.no_python,
            run_path=args.run_path,
        )
        python = os.environ.get("PYTHON_EXEC", sys.executable)
        warm: WarmLaunch | None = None
        if args.warm_workers:
            pool = WarmPool(python, _spare_env(environ, nproc), nproc)
            stack.callback(pool.close)
            pool.fill()  # imports torch while the first rendezvous runs
            script = args.training_script
            if not args.module:
                script = os.path.abspath(script)
            warm = WarmLaunch(pool, (script, *args.training_script_args), args.module)
        workers = LocalWorkers(
            command,
            LogSettings(
                log_dir,
                args.redirects,
                args.tee,
                args.log_line_prefix_template,
                args.local_ranks_filter,
            ),
            warm,
        )
        supervisor = Supervisor(
            SupervisorSettings(
                role=args.role,
                nproc_per_node=nproc,
                max_restarts=args.max_restarts,
                monitor_interval=args.monitor_interval,
                shutdown_timeout=args.shutdown_timeout,
                etcd_timeout=args.etcd_timeout,
                local_addr=args.local_addr,
                progress_timeout=args.progress_timeout,
                progress_auto=args.progress_auto is not None,
                failure_policy=policy,
                knobs=AgentKnobs(
                    nccl_async_error_handling=args.nccl_async_error_handling,
                    nccl_heartbeat_timeout=args.nccl_heartbeat_timeout,
                    nccl_monitoring=args.nccl_monitoring,
                    nccl_collective_timeout=args.nccl_collective_timeout,
                    timer_socket=timers.path,
                    torch_timer_file=torch_timer_file,
                ),
            ),
            handler=handler,
            counter=counter,
            workers=workers,
            timers=timers,
            status=status,
            metrics=metrics,
            events=events,
            environ=environ,
            etcd_unreachable_since=lambda: rdzv.etcd_status().unreachable_since,
        )

        def on_signal(signum: int, frame: FrameType | None) -> None:
            supervisor.request_stop()

        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, on_signal)
        return int(supervisor.run())
    return int(ExitCode.WORKER_FAILED)  # pragma: no cover - ExitStack does not swallow


def _checkpoints(
    args: AgentArgs, stack: ExitStack, rdzv: _Rendezvous, *, run_id: str, node: str, work_dir: Path
) -> tuple[Mapping[str, str], Callable[[], CheckpointFacts]]:
    """The node's checkpoint service when ``ELASTICJOB_CHECKPOINT_MEMORY_LIMIT`` asks for it
    (docs/checkpoints.md); the variables its workers get and what the health report reads of
    it. ``ValueError`` on a bad setting."""
    from elasticjob_agent.checkpoint.config import settings_from_env  # noqa: PLC0415

    settings = settings_from_env(os.environ)
    if settings is None:
        return {}, lambda: NO_CHECKPOINTS
    from elasticjob_agent.checkpoint.serving import start_checkpoints  # noqa: PLC0415

    served = start_checkpoints(
        settings,
        stack,
        session=rdzv.session,
        keys=JobKeys(args.key_prefix, run_id),
        node=node,
        local_addr=args.local_addr,
        work_dir=work_dir,
    )
    return served.env, served.view.facts


def _spare_env(environ: Mapping[str, str], nproc: int) -> dict[str, str]:
    """What a warm worker starts with: what every worker of this agent will share."""
    env = dict(environ)
    if "OMP_NUM_THREADS" not in env and nproc > 1:
        env["OMP_NUM_THREADS"] = "1"  # read when torch initialises its thread pools
    return env


def _remove_tree(path: Path) -> None:
    import shutil  # noqa: PLC0415

    shutil.rmtree(path, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``elasticjob-agent`` script; returns (and exits with) an ExitCode."""
    if argv is None:
        init_if_pid1()  # a container's PID 1: an init reaps orphans and forwards signals
    configure()
    try:
        args = parse_args(sys.argv[1:] if argv is None else argv, os.environ)
        configure(log_format=args.log_format)
        code = run(args)
    except UsageError as exc:
        code = _usage_error(str(exc))
    except EtcdStartError as exc:
        logger.error("standalone etcd failed: %s", exc)
        code = int(ExitCode.WORKER_FAILED)
    if argv is None:
        sys.exit(code)
    return code
