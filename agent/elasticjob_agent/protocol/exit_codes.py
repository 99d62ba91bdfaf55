"""Exit codes of ``elasticjob-agent``: one per terminal reason, so a pod's exit code says why.

The operator reads these from container statuses; keep them stable (they are part of the v1 API).
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """Why the agent exited. Values below 10 follow shell conventions."""

    SUCCEEDED = 0
    """Every local worker finished with exit code 0."""

    WORKER_FAILED = 1
    """A worker failed and the agent gave up for a reason not listed below."""

    USAGE = 2
    """Bad command line, environment or ``--rdzv-conf``: nothing was started."""

    MAX_RESTARTS_EXCEEDED = 10
    """The job-wide restart budget (failures only) is spent; the rendezvous was closed."""

    RENDEZVOUS_CLOSED = 11
    """The rendezvous was closed by another agent or by the operator."""

    JOIN_TIMEOUT = 12
    """``min_nodes`` never arrived within the join timeout."""

    ETCD_UNREACHABLE = 13
    """etcd stayed unreachable for longer than the configured timeout."""

    FAILURE_POLICY = 14
    """A failure-policy rule with action ``FailJob`` matched a failure; the rendezvous was
    closed without spending the budget."""

    TERMINATED = 143
    """The agent received SIGTERM (pod deletion, preemption) and stopped its workers."""

    @property
    def reason(self) -> str:
        """A CamelCase reason, as used in Kubernetes conditions and Events."""
        return _REASONS[self]


_REASONS: dict[ExitCode, str] = {
    ExitCode.SUCCEEDED: "Succeeded",
    ExitCode.WORKER_FAILED: "WorkerFailed",
    ExitCode.USAGE: "InvalidArguments",
    ExitCode.MAX_RESTARTS_EXCEEDED: "MaxRestartsExceeded",
    ExitCode.RENDEZVOUS_CLOSED: "RendezvousClosed",
    ExitCode.JOIN_TIMEOUT: "JoinTimeout",
    ExitCode.ETCD_UNREACHABLE: "EtcdUnavailable",
    ExitCode.FAILURE_POLICY: "FailurePolicy",
    ExitCode.TERMINATED: "Terminated",
}
