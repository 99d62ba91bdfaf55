"""The demo driver's pure parts: reading an ElasticJob's status into the live table."""

from __future__ import annotations

from typing import Any

import pytest

from scripts.demo_cluster import HEADER, JobView, Timeline, format_row, with_steps

RUNNING: dict[str, Any] = {
    "spec": {"replicas": 2},
    "status": {
        "phase": "Running",
        "readyNodes": 2,
        "waitingNodes": 0,
        "round": 3,
        "worldSize": 4,
        "restarts": {"total": 2, "byReason": {"failure": 1, "etcd-recovered": 1, "preemption": 0}},
        "conditions": [
            {"type": "Stalled", "status": "False", "reason": "EtcdUnavailable"},
            {"type": "Running", "status": "True", "reason": "Training"},
        ],
    },
}


@pytest.mark.parametrize(
    "obj,expected",
    [
        ({"spec": {"replicas": 3}}, ("Pending", "0/3", "0", "0", "0", "-", "-")),
        (RUNNING, ("Running", "2/2", "0", "3", "4", "etcd-recovered=1,failure=1", "-")),
        (
            {
                "spec": {"replicas": 2},
                "status": {
                    "phase": "Running",
                    "conditions": [
                        {"type": "Stalled", "status": "True", "reason": "EtcdUnavailable"}
                    ],
                },
            },
            ("Running", "0/2", "0", "0", "0", "-", "EtcdUnavailable"),
        ),
    ],
    ids=["no-status", "running", "stalled"],
)
def test_job_view_rows(obj: dict[str, Any], expected: tuple[str, ...]) -> None:
    assert JobView.from_object(obj).row() == expected


def test_timeline_prints_only_changes() -> None:
    lines: list[str] = []
    timeline = Timeline(started=0.0, out=lines.append)
    view = JobView.from_object(RUNNING)
    timeline.observe(view)
    timeline.observe(JobView.from_object(RUNNING))
    timeline.note(None, "inject: kill")
    assert len(lines) == 2
    assert lines[0].split()[1:6] == ["Running", "2/2", "0", "3", "4"]
    assert lines[1].endswith("inject: kill")
    assert format_row(HEADER).startswith("time")


@pytest.mark.parametrize(
    "args,expected",
    [
        ([], ["--steps", "7"]),
        (["--steps", "60", "--step-sleep", "0.1"], ["--step-sleep", "0.1", "--steps", "7"]),
        (["--steps=60", "-v"], ["-v", "--steps", "7"]),
    ],
)
def test_with_steps(args: list[str], expected: list[str]) -> None:
    assert with_steps(args, 7) == expected
