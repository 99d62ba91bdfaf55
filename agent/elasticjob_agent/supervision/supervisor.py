"""The agent's main loop: rendezvous, start the local workers, watch them, restart together.

One iteration per round: ``next_rendezvous()`` (``rendezvous_call``) -> agree on ranks through
the round's store and start ``nproc_per_node`` workers (``round_setup``) -> every
``monitor_interval`` observe workers, timers, waiting nodes and lost members and decide
(``monitor``: ``observation`` -> pure ``decision`` -> its executor) -> on a restart stop the
group and count it once for the job (``restart``), and go around again. Terminal outcomes are
``ExitCode`` values (protocol/exit_codes.py), reached through ``exits``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from elasticjob_agent.health.metrics import AgentMetrics
from elasticjob_agent.health.status import AgentStatus
from elasticjob_agent.logs import EventLog
from elasticjob_agent.protocol.exit_codes import ExitCode
from elasticjob_agent.rendezvous.supervised_handler import SupervisedHandler
from elasticjob_agent.supervision.context import AgentExit, Supervision
from elasticjob_agent.supervision.exits import finish
from elasticjob_agent.supervision.monitor import monitor
from elasticjob_agent.supervision.parts import Counter, Timers, Workers
from elasticjob_agent.supervision.rendezvous_call import rendezvous
from elasticjob_agent.supervision.restart import restart
from elasticjob_agent.supervision.round_setup import set_up_round
from elasticjob_agent.supervision.settings import SupervisorSettings

__all__ = ["Supervisor", "SupervisorSettings"]


class Supervisor:
    def __init__(
        self,
        settings: SupervisorSettings,
        *,
        handler: SupervisedHandler,
        counter: Counter,
        workers: Workers,
        timers: Timers,
        status: AgentStatus,
        metrics: AgentMetrics,
        events: EventLog,
        environ: Mapping[str, str],
        etcd_unreachable_since: Callable[[], float | None],
    ) -> None:
        self._sup = Supervision(
            settings,
            handler=handler,
            counter=counter,
            workers=workers,
            timers=timers,
            status=status,
            metrics=metrics,
            events=events,
            environ=environ,
            etcd_unreachable_since=etcd_unreachable_since,
        )

    def request_stop(self) -> None:
        """Called from the SIGTERM handler: stop workers, leave the rendezvous, exit 143."""
        self._sup.stop_signal.set()

    def run(self) -> ExitCode:
        sup = self._sup
        sup.events.info(
            "agent_started",
            max_restarts=sup.settings.max_restarts,
            nproc_per_node=sup.settings.nproc_per_node,
            worst_case_time_to_fail_s=sup.status.report().worst_case_time_to_fail_seconds,
        )
        # torch has no supported way to set the workers' default process-group timeout
        # (docs/agent.md, NCCL failure detection): only scripts that pass it are bounded.
        sup.events.warning(
            "collective_timeout_not_enforced",
            seconds=sup.settings.knobs.nccl_collective_timeout,
            unless="init_process_group(timeout=ELASTICJOB_COLLECTIVE_TIMEOUT_SECONDS)",
            torch_default_gloo_s=1800,
            torch_default_nccl_s=600,
            see="docs/agent.md#nccl-failure-detection",
        )
        try:
            while True:
                info, rdzv_seconds = rendezvous(sup)
                group = set_up_round(sup, info, rdzv_seconds)
                restart(sup, monitor(sup, group))
        except AgentExit as done:
            return finish(sup, done.code, done.detail)
        finally:
            sup.workers.stop(sup.settings.shutdown_timeout)
