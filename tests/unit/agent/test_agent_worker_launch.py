"""Worker command lines, stream routing and the group outcome rule."""

from __future__ import annotations

import pytest
from elasticjob_agent.supervision.worker_launch import (
    GroupState,
    group_outcome,
    streams_for,
    worker_command,
)


def test_commands_like_torchrun() -> None:
    assert worker_command("t.py", ["--a"], "py") == ["py", "-u", "t.py", "--a"]
    assert worker_command("pkg.mod", [], "py", module=True) == ["py", "-u", "-m", "pkg.mod"]
    assert worker_command("./run.sh", ["x"], "py", no_python=True) == ["./run.sh", "x"]
    run_path = worker_command("/abs/t.py", ["x"], "py", run_path=True)
    assert run_path[:3] == ["py", "-u", "-c"] and run_path[-2:] == ["/abs/t.py", "x"]
    with pytest.raises(ValueError, match="--module and --no-python"):
        worker_command("t", [], "py", module=True, no_python=True)


def test_streams() -> None:
    assert streams_for("0", "0", 0) == streams_for("0:3", "0", 1)
    s = streams_for("0:1,1:2", "0", 1)
    assert (s.stdout_to_file, s.stderr_to_file, s.stderr_tee) == (False, True, False)
    t = streams_for("0", "3", 0)
    assert t.stdout_to_file and t.stderr_to_file and t.stdout_tee and t.stderr_tee


@pytest.mark.parametrize(
    ("codes", "state"),
    [
        ({0: None, 1: None}, GroupState.RUNNING),
        ({0: 0, 1: None}, GroupState.RUNNING),
        ({0: 0, 1: 0}, GroupState.SUCCEEDED),
        ({0: 0, 1: 3}, GroupState.FAILED),
        ({0: None, 1: -9}, GroupState.FAILED),
    ],
)
def test_group_outcome(codes: dict[int, int | None], state: GroupState) -> None:
    assert group_outcome(codes).state is state
