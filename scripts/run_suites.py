"""Run every pytest session of ``make test`` (scripts/suite_plan.py says which and in what order)
on three runners beside the builds, then print each session's log with when it ran.

Usage, from the repository: ``python -m scripts.run_suites [PYTEST ARGS...]`` (extra arguments
go to every session, e.g. ``-x``).
``--dry-run`` prints the plan and runs nothing. Exits 1 if the builds or any session failed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from scripts.suite_plan import BUILD_STAGES, SESSIONS, Builds, Session, next_session

REPO = Path(__file__).resolve().parents[1]
PYTHON = REPO / ".venv" / "bin" / "python"
RUNNERS = 3
POLL_S = 2.0
BUILDS_DEADLINE_S = 5400.0
"""CI's own limit: builds that never end fail the run instead of hanging it."""


@dataclass
class Outcome:
    code: int
    began: float
    ended: float


class Suite:
    def __init__(self, logs: Path, extra: list[str]) -> None:
        self.logs = logs
        self.extra = extra
        self.started = time.monotonic()
        self.lock = threading.Lock()
        self.builds_changed = threading.Condition(self.lock)
        """Notified when a build stage ends; runners waiting for it wake at once."""
        self.pending: list[Session] = list(SESSIONS)
        self.built: set[str] = set()
        self.build_failed = False
        self.outcomes: dict[str, Outcome] = {}
        self.children: set[subprocess.Popen[bytes]] = set()

    def now(self) -> float:
        return time.monotonic() - self.started

    def say(self, message: str) -> None:
        print(f"test: [{self.now():.0f} s] {message}", file=sys.stderr, flush=True)

    def take(self) -> Session | None:
        """The next session for a free runner, waiting while only the builds stand between."""
        while True:
            with self.lock:
                running_s = self.now()
                if not self.build_failed and running_s > BUILDS_DEADLINE_S:
                    self.build_failed = True
                    self.say(f"the builds did not end within {BUILDS_DEADLINE_S:.0f} s")
                builds = Builds(frozenset(self.built), self.build_failed, running_s)
                choice = next_session(self.pending, builds)
                if isinstance(choice, Session):
                    self.pending.remove(choice)
                    return choice
                if choice is None:
                    return None
                # The poll bounds the wait: the patience and the deadline pass with no event.
                self.builds_changed.wait(POLL_S)

    def runner(self) -> None:
        while (session := self.take()) is not None:
            self.run(session)

    def run(self, session: Session) -> None:
        log = self.logs / f"{session.name}.log"
        began = self.now()
        self.say(f"{session.name} started (log {log})")
        command = [str(PYTHON), "-m", "pytest", "-q", "-ra", "--durations=15"]
        with log.open("wb") as out:
            child = subprocess.Popen(
                [*command, *self.extra, *session.args], cwd=REPO, stdout=out, stderr=out
            )
            with self.lock:
                self.children.add(child)
            code = child.wait()
            with self.lock:
                self.children.discard(child)
        self.outcomes[session.name] = Outcome(code, began, self.now())
        self.say(f"{session.name} finished (exit {code})")

    def build(self) -> None:
        """Each build stage in order; a failed one ends the builds."""
        log = self.logs / "builds.log"
        for stage, targets in BUILD_STAGES:
            with log.open("ab") as out:
                # make's own lock on apt and the content caches keep these builds from
                # colliding with anything; a lower priority lets the sessions beside them test.
                child = subprocess.Popen(
                    ["nice", "-n", "10", "make", "-j3", "--output-sync=line", *targets],
                    cwd=REPO,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
                with self.lock:
                    self.children.add(child)
                code = child.wait()
            with self.lock:
                self.children.discard(child)
                if code == 0:
                    self.built.add(stage)
                else:
                    self.build_failed = True
                self.builds_changed.notify_all()
            self.say(f"builds: {stage} ({' '.join(targets)}) finished (exit {code})")
            if code != 0:
                break
        text = log.read_text(errors="replace")
        timing = [line for line in text.splitlines() if any(w in line for w in _BUILD_WORDS)]
        ok = not self.build_failed
        print("\n".join(timing[-40:]) if ok else text, file=sys.stderr, flush=True)

    def stop(self) -> None:
        with self.lock:
            for child in self.children:
                child.send_signal(signal.SIGTERM)


_BUILD_WORDS = ("took", "reused", "built", "cached")


def report(suite: Suite) -> bool:
    ok = not suite.build_failed and len(suite.built) == len(BUILD_STAGES)
    for session in SESSIONS:
        outcome = suite.outcomes.get(session.name)
        if outcome is None:
            continue
        print(
            f"===== {session.name} (exit {outcome.code}, from {outcome.began:.0f} s to "
            f"{outcome.ended:.0f} s) =====",
            file=sys.stderr,
            flush=True,
        )
        sys.stderr.write((suite.logs / f"{session.name}.log").read_text(errors="replace"))
        sys.stderr.flush()
    for session in SESSIONS:
        outcome = suite.outcomes.get(session.name)
        if outcome is None:
            suite.say(f"{session.name}: not run (the builds failed)")
            ok = False
            continue
        suite.say(
            f"{session.name}: exit {outcome.code}, from {outcome.began:.0f} s to "
            f"{outcome.ended:.0f} s"
        )
        ok = ok and outcome.code == 0
    suite.say(f"all sessions finished (failed: {0 if ok else 1})")
    return ok


def main(argv: list[str]) -> int:
    if argv[:1] == ["--dry-run"]:
        for s in sorted(SESSIONS, key=lambda s: -s.expected_s):
            needs = f"after {'+'.join(sorted(s.needs))}" if s.needs else "at once"
            print(f"{s.name:30} {s.expected_s:5d} s  {needs:22} {' '.join(s.args)}")
        return 0
    logs = Path(tempfile.mkdtemp(prefix="elasticjob-test."))
    suite = Suite(logs, argv)

    def terminated(_signum: int, _frame: object) -> None:
        suite.stop()
        os._exit(130)

    signal.signal(signal.SIGTERM, terminated)
    builder = threading.Thread(target=suite.build, name="builds")
    builder.start()
    runners = [threading.Thread(target=suite.runner, name=f"runner-{i}") for i in range(RUNNERS)]
    for r in runners:
        r.start()
    try:
        builder.join()
        for r in runners:
            r.join()
    except KeyboardInterrupt:
        suite.stop()
        return 130
    return 0 if report(suite) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
