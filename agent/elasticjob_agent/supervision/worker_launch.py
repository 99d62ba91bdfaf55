"""Pure helpers for starting workers: the command line, stream routing, and group outcome."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

_RUN_PATH = (
    "import runpy, sys; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"
)


def worker_command(
    script: str,
    script_args: Sequence[str],
    python: str,
    *,
    module: bool = False,
    no_python: bool = False,
    run_path: bool = False,
) -> list[str]:
    """The argv of a worker, as torchrun builds it (``python -u [-m] script args``)."""
    if run_path:
        return [python, "-u", "-c", _RUN_PATH, script, *script_args]
    if no_python:
        if module:
            raise ValueError("--module and --no-python cannot be used together")
        return [script, *script_args]
    return [python, "-u", *(["-m"] if module else []), script, *script_args]


@dataclass(frozen=True)
class Streams:
    """Which of a worker's streams go to a log file (``redirect``) or to both (``tee``)."""

    stdout_to_file: bool
    stderr_to_file: bool
    stdout_tee: bool
    stderr_tee: bool


def _spec_value(spec: str, local_rank: int) -> int:
    if ":" not in spec:
        return int(spec)
    for item in spec.split(","):
        rank, _, value = item.partition(":")
        if int(rank) == local_rank:
            return int(value)
    return 0


def streams_for(redirects: str, tee: str, local_rank: int) -> Streams:
    """torchrun's ``Std`` bits: 1 = stdout, 2 = stderr, 3 = both; tee implies a file too."""
    r = _spec_value(redirects, local_rank)
    t = _spec_value(tee, local_rank)
    return Streams(
        stdout_to_file=bool((r | t) & 1),
        stderr_to_file=bool((r | t) & 2),
        stdout_tee=bool(t & 1),
        stderr_tee=bool(t & 2),
    )


class GroupState(StrEnum):
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


@dataclass(frozen=True)
class GroupOutcome:
    state: GroupState
    failures: Mapping[int, int]
    """local_rank -> exit code of each worker that failed."""


def group_outcome(exit_codes: Mapping[int, int | None]) -> GroupOutcome:
    """Failed as soon as one worker failed; succeeded when all exited 0; else running."""
    failures = {rank: code for rank, code in exit_codes.items() if code not in (None, 0)}
    if failures:
        return GroupOutcome(GroupState.FAILED, failures)
    if exit_codes and all(code == 0 for code in exit_codes.values()):
        return GroupOutcome(GroupState.SUCCEEDED, {})
    return GroupOutcome(GroupState.RUNNING, {})
