"""What every part of the supervisor works on: its collaborators, what it remembers across
rounds, and the one way out (``AgentExit``)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from elasticjob_agent.etcd.client import EtcdRequestError
from elasticjob_agent.health.metrics import AgentMetrics
from elasticjob_agent.health.status import AgentStatus
from elasticjob_agent.logs import EventLog
from elasticjob_agent.protocol.exit_codes import ExitCode
from elasticjob_agent.protocol.failure import FinalCounts, WorkerFailure
from elasticjob_agent.protocol.restarts import RestartCounts, RestartStateError
from elasticjob_agent.rendezvous import RendezvousConnectionError
from elasticjob_agent.rendezvous.supervised_handler import SupervisedHandler
from elasticjob_agent.supervision.failure_report import write_termination_message
from elasticjob_agent.supervision.parts import Counter, Timers, Workers
from elasticjob_agent.supervision.settings import SupervisorSettings

T = TypeVar("T")


class AgentExit(Exception):
    """Raised anywhere in the supervisor to end the agent with ``code``."""

    def __init__(self, code: ExitCode, detail: str = "") -> None:
        super().__init__(code, detail)
        self.code = code
        self.detail = detail


class Supervision:
    """The agent's collaborators and its memory across rounds (one per agent process)."""

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
        self.settings = settings
        self.handler = handler
        self.counter = counter
        self.workers = workers
        self.timers = timers
        self.status = status
        self.metrics = metrics
        self.events = events
        self.environ = dict(environ)
        self.unreachable_since = etcd_unreachable_since
        self.stop_signal = threading.Event()
        self.round = 0
        self.attempt = 0
        self.base_rank: int | None = None
        self.root_cause: WorkerFailure | None = None
        """The last root cause written to the termination message (rewritten with the final
        counts when the budget is spent)."""
        self.decision: Mapping[str, Any] | None = None
        """The failure policy's last decision written to the termination message (kept when it
        is rewritten)."""
        self.counts: RestartCounts | None = None
        """The job-wide restart counts as this agent last saw them (at its round's start or its
        group's stop): the final counts it leaves in the termination message when it exits."""
        self.round_cause: WorkerFailure | None = None
        """This round's root cause, if this agent saw one (what the failure policy judges)."""
        self.oom_kills_at_start: int | None = None

    @property
    def pod(self) -> str | None:
        return self.environ.get("POD_NAME") or self.environ.get("HOSTNAME")

    def etcd(self, fn: Callable[[], T]) -> T:
        """An etcd operation we cannot do without: exit 13 if etcd stays away too long."""
        try:
            return fn()
        except (RendezvousConnectionError, EtcdRequestError) as exc:
            raise AgentExit(ExitCode.ETCD_UNREACHABLE, str(exc)) from exc
        except RestartStateError as exc:
            raise AgentExit(ExitCode.WORKER_FAILED, f"corrupt restart state: {exc}") from exc

    def check_etcd_deadline(self, what: str) -> None:
        since = self.unreachable_since()
        if since is not None and time.time() - since > self.settings.etcd_timeout:
            raise AgentExit(
                ExitCode.ETCD_UNREACHABLE,
                f"etcd unreachable for more than {self.settings.etcd_timeout:g}s during {what}",
            )

    def note_warm(self) -> int:
        """Put the warm workers that have torch imported (and the pool's size) in the report."""
        warm, pool = self.workers.warm_ready()
        fields = self.status.fields
        if (warm, pool) != (fields.warm_workers, fields.warm_pool):
            self.status.update(warm_workers=warm, warm_pool=pool)
        return int(warm)

    def write_root_cause(self, failure: WorkerFailure) -> None:
        self.root_cause = failure
        self.round_cause = failure
        self.write_termination()

    def write_termination(self, final: bool = False, headline: str | None = None) -> None:
        """The termination message: this node's last root cause, the policy's last decision
        and, when ``final`` (the agent exits now, maybe before the operator's next poll), the
        restart counts it last saw. The kubelet keeps the message after we exit."""
        counts = None
        if final and self.counts is not None:
            counts = FinalCounts(self.handler.get_run_id(), dict(self.counts.by_reason))
        write_termination_message(
            self.root_cause, counts=counts, decision=self.decision, headline=headline
        )
