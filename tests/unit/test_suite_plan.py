"""make test's queue of pytest sessions: the order a free runner takes them in, and that the
sessions together run every test module exactly once."""

from __future__ import annotations

from pathlib import Path

from scripts.suite_plan import (
    BUILD_PATIENCE_S,
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

E2E = Session("e2e", ("tests/e2e/x",), True, 1000)
LONG = Session("long", ("tests/integration/x",), False, 800)
SHORT = Session("short", ("tests/unit",), False, 80)


def test_with_the_builds_done_the_longest_session_goes_first() -> None:
    assert next_session([SHORT, E2E, LONG], Builds.DONE, 5) == E2E
    assert next_session([SHORT, LONG], Builds.DONE, 5) == LONG


def test_a_runner_waits_briefly_for_builds_that_may_be_cached() -> None:
    assert next_session([SHORT, E2E, LONG], Builds.RUNNING, 1) is Wait.WAIT


def test_on_a_cold_machine_runners_test_what_needs_no_build_meanwhile() -> None:
    running = BUILD_PATIENCE_S + 1
    assert next_session([SHORT, E2E, LONG], Builds.RUNNING, running) == LONG
    assert next_session([E2E], Builds.RUNNING, running) is Wait.WAIT


def test_without_builds_pending_nothing_waits_for_them() -> None:
    assert next_session([SHORT, LONG], Builds.RUNNING, 0) == LONG


def test_failed_builds_leave_their_sessions_unrun_and_the_rest_runs() -> None:
    assert next_session([E2E, SHORT], Builds.FAILED, 5) == SHORT
    assert next_session([E2E], Builds.FAILED, 5) is None
    assert next_session([], Builds.DONE, 5) is None


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
