"""Which pytest session ``make test`` starts next (pure: no processes, no clock).

The suite is cut into sessions that each start their own clusters, so any of them can run beside
any other. Three runners take sessions from one queue, longest expected first (the classic
longest-processing-time rule), so the runners end at about the same time whatever the machine:
on a machine with the builds cached every runner starts an end-to-end session at once; on a cold
one the runners work through the unit and integration sessions while the builds run, and take
each end-to-end session once the builds it needs are done (Kueue, built last, only for the
session that runs the Kueue tests).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "BUILD_PATIENCE_S",
    "BUILD_STAGES",
    "CLUSTERS",
    "KUEUE",
    "SESSIONS",
    "Builds",
    "Session",
    "Wait",
    "next_session",
]

BUILD_PATIENCE_S = 60.0
"""How long a free runner waits for the builds before it takes a session that does not need
them: cached builds end within seconds, and an end-to-end session is the better start."""

CLUSTERS = "clusters"
"""Build stage: Kubernetes, kube-router and the images (``make cluster-build images``): what
every local cluster of the end-to-end sessions runs."""
KUEUE = "kueue"
"""Build stage: Kueue (``make kueue-build``), after Kubernetes: only the Kueue tests start it."""
BUILD_STAGES: tuple[tuple[str, tuple[str, ...]], ...] = (
    (CLUSTERS, ("cluster-build", "images")),
    (KUEUE, ("kueue-build",)),
)
"""The build stages in order, each with its make targets."""


@dataclass(frozen=True)
class Builds:
    """Where the builds are: the stages ``done``, whether one ``failed`` (then the rest is
    never built), and how long they have run."""

    done: frozenset[str]
    failed: bool
    running_s: float

    @property
    def finished(self) -> bool:
        return self.failed or len(self.done) == len(BUILD_STAGES)


@dataclass(frozen=True)
class Session:
    """One pytest session: its ``args`` (paths and ``--ignore``s), the build stages it needs,
    and its expected length in seconds on two cores beside two other sessions
    (bench/RESULTS.md has the measured runs): only the order depends on it."""

    name: str
    args: tuple[str, ...]
    needs: frozenset[str]
    expected_s: int


class Wait(enum.Enum):
    """No session can start now, but one may later (the builds are still running)."""

    WAIT = "wait"


_NONE: frozenset[str] = frozenset()
_CLUSTERS = frozenset({CLUSTERS})
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
    Session("unit", ("tests/unit",), _NONE, 80),
    Session(
        "integration",
        ("tests/integration", *_ignoring("tests/integration/agent", _CHECKPOINT, _TORCHRUN)),
        _NONE,
        450,
    ),
    Session("integration-agent", ("tests/integration/agent",), _NONE, 790),
    Session("integration-checkpoint-nodes", (_CHECKPOINT_NODES,), _NONE, 600),
    Session(
        "integration-checkpoint",
        (_CHECKPOINT, _TORCHRUN, *_ignoring(_CHECKPOINT_NODES)),
        _NONE,
        450,
    ),
    Session("e2e-realnodes-demo", _REALNODES_FIRST, _CLUSTERS, 855),
    Session("e2e-realnodes", (_REALNODES, *_ignoring(*_REALNODES_FIRST, _RESIZE)), _CLUSTERS, 1180),
    Session("e2e-resize", (_RESIZE,), _CLUSTERS, 530),
    Session("e2e-operator", ("tests/e2e/operator",), _CLUSTERS, 1095),
    Session(
        "e2e-rest",
        # tests/e2e/kubeflow is the benchmark peer's tooling (`make test-peer`), in no session.
        ("tests/e2e", *_ignoring(_REALNODES, "tests/e2e/operator", "tests/e2e/kubeflow")),
        frozenset({CLUSTERS, KUEUE}),
        1105,
    ),
)


def next_session(pending: Sequence[Session], builds: Builds) -> Session | Wait | None:
    """The session a free runner starts: the longest pending one whose builds are done.
    ``None``: nothing left this runner can ever run (after a failed build, the sessions that
    need what was not built are never started)."""
    runnable = [s for s in pending if s.needs <= builds.done]
    blocked = not builds.finished and any(not s.needs <= builds.done for s in pending)
    if blocked and builds.running_s < BUILD_PATIENCE_S:
        return Wait.WAIT
    if runnable:
        return max(runnable, key=lambda s: s.expected_s)
    return Wait.WAIT if blocked else None
