"""make test's queue of pytest sessions: the order a free runner takes them in, and that the
sessions together run every test module exactly once."""

from __future__ import annotations

from pathlib import Path

from scripts.suite_plan import (
    BUILD_PATIENCE_S,
    BUILD_STAGES,
    CLUSTERS,
    KUEUE,
    SESSIONS,
    Builds,
    Session,
    Wait,
    next_session,
)

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent
#: Not in make test: the benchmark peer's tooling (`make test-peer`).
OUTSIDE = {"tests/e2e/kubeflow"}

E2E = Session("e2e", ("tests/e2e/x",), frozenset({CLUSTERS}), 1000)
QUEUED = Session("queued", ("tests/e2e/kueue",), frozenset({CLUSTERS, KUEUE}), 1100)
LONG = Session("long", ("tests/integration/x",), frozenset(), 800)
SHORT = Session("short", ("tests/unit",), frozenset(), 80)

ALL_BUILT = frozenset(stage for stage, _ in BUILD_STAGES)


def _builds(*done: str, failed: bool = False, running_s: float = 5) -> Builds:
    return Builds(frozenset(done), failed, running_s)


def test_with_the_builds_done_the_longest_session_goes_first() -> None:
    assert next_session([SHORT, E2E, LONG, QUEUED], _builds(*ALL_BUILT)) == QUEUED
    assert next_session([SHORT, LONG], _builds(*ALL_BUILT)) == LONG


def test_a_runner_waits_briefly_for_builds_that_may_be_cached() -> None:
    assert next_session([SHORT, E2E, LONG], _builds()) is Wait.WAIT
    assert next_session([SHORT, E2E, QUEUED], _builds(CLUSTERS)) is Wait.WAIT


def test_on_a_cold_machine_runners_test_what_the_builds_so_far_allow() -> None:
    later = BUILD_PATIENCE_S + 1
    assert next_session([SHORT, E2E, LONG], _builds(running_s=later)) == LONG
    assert next_session([E2E], _builds(running_s=later)) is Wait.WAIT
    # Kubernetes and the images built, Kueue not yet: the sessions without Kueue go on.
    assert next_session([QUEUED, E2E], _builds(CLUSTERS, running_s=later)) == E2E
    assert next_session([QUEUED], _builds(CLUSTERS, running_s=later)) is Wait.WAIT


def test_without_sessions_waiting_for_builds_nothing_waits_for_them() -> None:
    assert next_session([SHORT, LONG], _builds()) == LONG


def test_failed_builds_leave_their_sessions_unrun_and_the_rest_runs() -> None:
    assert next_session([E2E, SHORT], _builds(failed=True)) == SHORT
    assert next_session([E2E], _builds(failed=True)) is None
    assert next_session([QUEUED, E2E], _builds(CLUSTERS, failed=True)) == E2E
    assert next_session([QUEUED], _builds(CLUSTERS, failed=True)) is None
    assert next_session([], _builds(*ALL_BUILT)) is None


def test_only_the_sessions_with_kueue_tests_wait_for_kueue() -> None:
    for session in SESSIONS:
        runs_kueue = any(a in ("tests/e2e", "tests/e2e/kueue") for a in session.args)
        assert (KUEUE in session.needs) == runs_kueue, session.name


def _selected(session: Session) -> set[Path]:
    """The test modules a session collects: its paths minus its ``--ignore``s."""
    ignored = [REPO / a.removeprefix("--ignore=") for a in session.args if a.startswith("--")]
    found: set[Path] = set()
    for arg in session.args:
        if arg.startswith("--"):
            continue
        path = REPO / arg
        modules = [path] if path.is_file() else list(path.rglob("test_*.py"))
        found |= {m for m in modules if not any(m.is_relative_to(i) for i in ignored)}
    return found


def test_the_sessions_run_every_test_module_exactly_once() -> None:
    seen: dict[Path, str] = {}
    for session in SESSIONS:
        for module in _selected(session):
            assert module not in seen, f"{module} is in {seen[module]} and {session.name}"
            seen[module] = session.name
    every = {
        m for m in TESTS.rglob("test_*.py") if not any(m.is_relative_to(REPO / o) for o in OUTSIDE)
    }
    missing = sorted(str(m.relative_to(REPO)) for m in every - set(seen))
    assert not missing, f"in no session of scripts/suite_plan.py: {missing}"


def test_session_names_are_unique() -> None:
    names = [s.name for s in SESSIONS]
    assert len(names) == len(set(names))
