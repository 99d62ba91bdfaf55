"""The agent's Prometheus metrics (names in docs/contracts.md), on a private registry."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

# Rendezvous rounds take from a second (re-forming) to many minutes (waiting for nodes).
_DURATION_BUCKETS = (0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, float("inf"))


class AgentMetrics:
    """``etcd_reachable`` is read at every scrape from the session's reachability record."""

    def __init__(self, run_id: str, *, etcd_reachable: Callable[[], bool]) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._run_id = run_id
        self.job_restarts = Gauge(
            "elasticjob_agent_job_restarts",
            "Job-wide group restarts by reason, as this agent last read them from etcd.",
            ["run_id", "reason"],
            registry=self.registry,
        )
        self.rendezvous_round = Gauge(
            "elasticjob_agent_rendezvous_round",
            "Round of the last completed rendezvous.",
            ["run_id"],
            registry=self.registry,
        )
        self.rendezvous_duration = Histogram(
            "elasticjob_agent_rendezvous_duration_seconds",
            "Time spent in next_rendezvous() per completed round.",
            ["run_id"],
            buckets=_DURATION_BUCKETS,
            registry=self.registry,
        )
        self.world_size = Gauge(
            "elasticjob_agent_world_size",
            "Number of workers in the current group (all nodes).",
            ["run_id"],
            registry=self.registry,
        )
        self.etcd_reachable = Gauge(
            "elasticjob_agent_etcd_reachable",
            "1 while etcd answers this agent, else 0.",
            ["run_id"],
            registry=self.registry,
        )
        self.worker_failures = Counter(
            "elasticjob_agent_worker_failures",
            "Local worker processes that failed (non-zero exit or killed by a timer).",
            ["run_id"],
            registry=self.registry,
        )
        self.etcd_reachable.labels(run_id).set_function(lambda: 1.0 if etcd_reachable() else 0.0)
        self.worker_failures.labels(run_id)

    def set_restarts(self, by_reason: Mapping[str, int]) -> None:
        for reason, count in by_reason.items():
            self.job_restarts.labels(self._run_id, reason).set(count)

    def set_round(self, round_: int, world_size: int, duration: float) -> None:
        self.rendezvous_round.labels(self._run_id).set(round_)
        self.world_size.labels(self._run_id).set(world_size)
        self.rendezvous_duration.labels(self._run_id).observe(duration)

    def worker_failed(self, count: int = 1) -> None:
        self.worker_failures.labels(self._run_id).inc(count)

    def render(self) -> bytes:
        return generate_latest(self.registry)
