"""The agent's own memory directory: one per job and node, a safe path component."""

from __future__ import annotations

from elasticjob_agent.checkpoint.serving import scope
from elasticjob_agent.protocol.keys import JobKeys


def test_agents_of_two_jobs_or_two_nodes_never_share_a_directory() -> None:
    a = scope(JobKeys("/elasticjob/ns/a", "run1"), "pod-a-0")
    assert scope(JobKeys("/elasticjob/ns/b", "run1"), "pod-a-0") != a
    assert scope(JobKeys("/elasticjob/ns/a", "run1"), "pod-a-1") != a
    assert scope(JobKeys("/elasticjob/ns/a", "run2"), "pod-a-0") != a


def test_the_scope_is_one_safe_path_component() -> None:
    name = scope(JobKeys("/elasticjob/ns/job", "run"), "node/../x y")
    assert "/" not in name and " " not in name and name not in {".", ".."}
    assert name == "elasticjob_ns_job-run-node_.._x_y"
