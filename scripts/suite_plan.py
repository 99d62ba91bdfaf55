"""Which pytest session ``make test`` starts next (pure: no processes, no clock).

The suite is cut into sessions that each start their own clusters, so any of them can run beside
any other. Three runners take sessions from one queue, longest expected first (the classic
longest-processing-time rule), so the runners end at about the same time whatever the machine:
on a machine with the builds cached every runner starts an end-to-end session at once; on a cold
one the runners work through the unit and integration sessions while the builds run, and take
the end-to-end sessions when the builds are done.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["BUILD_PATIENCE_S", "SESSIONS", "Builds", "Session", "Wait", "next_session"]

BUILD_PATIENCE_S = 60.0
"""How long a free runner waits for the builds before it takes a session that does not need
them: cached builds end within seconds, and an end-to-end session is the better start."""


class Builds(enum.Enum):
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


@dataclass(frozen=True)
class Session:
    """One pytest session: its ``args`` (paths and ``--ignore``s), whether it needs the builds
    (images, Kubernetes, Kueue), and its expected length in seconds on two cores beside two
    other sessions (bench/RESULTS.md has the measured runs): only the order depends on it."""

    name: str
    args: tuple[str, ...]
    needs_builds: bool
    expected_s: int


class Wait(enum.Enum):
    """No session can start now, but one may later (the builds are still running)."""

    WAIT = "wait"


_REALNODES = "tests/e2e/realnodes"
_REALNODES_FIRST = (
    f"{_REALNODES}/test_realnodes_demo.py",
    f"{_REALNODES}/test_realnodes_examples.py",
)
_RESIZE = f"{_REALNODES}/test_realnodes_resize.py"
_CHECKPOINT = "tests/integration/checkpoint"
_CHECKPOINT_NODES = f"{_CHECKPOINT}/test_checkpoint_nodes.py"
_TORCHRUN = "tests/integration/test_torchrun_plugin.py"


def _ignoring(*paths: str) -> tuple[str, ...]:
    return tuple(f"--ignore={p}" for p in paths)


SESSIONS: tuple[Session, ...] = (
    Session("unit", ("tests/unit",), False, 80),
    Session(
        "integration",
        ("tests/integration", *_ignoring("tests/integration/agent", _CHECKPOINT, _TORCHRUN)),
        False,
        450,
    ),
    Session("integration-agent", ("tests/integration/agent",), False, 790),
    Session("integration-checkpoint-nodes", (_CHECKPOINT_NODES,), False, 600),
    Session(
        "integration-checkpoint",
        (_CHECKPOINT, _TORCHRUN, *_ignoring(_CHECKPOINT_NODES)),
        False,
        450,
    ),
    Session("e2e-realnodes-demo", _REALNODES_FIRST, True, 855),
    Session("e2e-realnodes", (_REALNODES, *_ignoring(*_REALNODES_FIRST, _RESIZE)), True, 1180),
    Session("e2e-resize", (_RESIZE,), True, 530),
    Session("e2e-operator", ("tests/e2e/operator",), True, 1095),
    Session(
        "e2e-rest",
        # tests/e2e/kubeflow is the benchmark peer's tooling (`make test-peer`), in no session.
        ("tests/e2e", *_ignoring(_REALNODES, "tests/e2e/operator", "tests/e2e/kubeflow")),
        True,
        1105,
    ),
)


def next_session(
    pending: Sequence[Session], builds: Builds, builds_running_s: float
) -> Session | Wait | None:
    """The session a free runner starts: the longest pending one it can run.
    ``builds_running_s``: how long the builds have run. ``None``: nothing left this runner can
    ever run (with the builds failed, the sessions that need them are never started)."""
    runnable = [s for s in pending if builds is Builds.DONE or not s.needs_builds]
    if (
        builds is Builds.RUNNING
        and builds_running_s < BUILD_PATIENCE_S
        and any(s.needs_builds for s in pending)
    ):
        return Wait.WAIT
    if runnable:
        return max(runnable, key=lambda s: s.expected_s)
    if builds is Builds.RUNNING and pending:
        return Wait.WAIT
    return None
