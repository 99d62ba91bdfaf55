"""``status.checkpoint``: what the agents' checkpoints kept, as a typed value and its JSON (pure).

- ``lastSavedStep``: the newest step any agent of the run holds in its checkpoint memory.
- ``lastRestore``: the newest restore by round (``RestoreReport.as_status()``'s shape, with
  its ``round``).
- ``lastRestoreFailure``: the newest round in which an agent restored nothing although a
  checkpoint existed, and why.
- ``stepRewound``: why ``status.progress.step`` (the STEP column) last went below its
  previous value: ``fromStep``, ``toStep``, ``reason`` (``RESTORED``, ``NOT_RESTORED`` or
  ``NO_RESTORE``) and a ``message``.

A stored status is read leniently (a field that is not what we write is dropped); the rounds
only grow (``newest``), so an Event decided from them is posted once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from elasticjob_agent.protocol.checkpoint import RestoreReport
from elasticjob_agent.protocol.integers import IntegerError, bounded_int

MAX_REASON_CHARS = 1024
"""Longest reason stored in ``lastRestoreFailure`` or ``stepRewound.message``."""

RESTORED = "CheckpointRestored"
"""The step went back to a checkpoint's step: the restore in ``lastRestore`` explains it."""
NOT_RESTORED = "CheckpointNotRestored"
"""The step went back although a checkpoint existed: ``lastRestoreFailure`` says why."""
NO_RESTORE = "NoCheckpointRestored"
"""The step went back and no agent reported a restore (checkpoints off, or the training
script restores its own)."""


@dataclass(frozen=True)
class RestoreFailure:
    round: int
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"round": self.round, "reason": self.reason}


@dataclass(frozen=True)
class StepRewind:
    from_step: int
    to_step: int
    reason: str
    message: str

    def to_json(self) -> dict[str, Any]:
        return {
            "fromStep": self.from_step,
            "toStep": self.to_step,
            "reason": self.reason,
            "message": self.message,
        }


@dataclass(frozen=True)
class CheckpointStatus:
    last_saved_step: int | None = None
    last_restore: RestoreReport | None = None
    """Always with its ``round`` (restores reported without one are not taken)."""
    last_restore_failure: RestoreFailure | None = None
    step_rewound: StepRewind | None = None

    @property
    def empty(self) -> bool:
        return self == CheckpointStatus()

    def to_json(self) -> dict[str, Any]:
        return {
            "lastSavedStep": self.last_saved_step,
            "lastRestore": None if self.last_restore is None else self.last_restore.as_status(),
            "lastRestoreFailure": None
            if self.last_restore_failure is None
            else self.last_restore_failure.to_json(),
            "stepRewound": None if self.step_rewound is None else self.step_rewound.to_json(),
        }

    @classmethod
    def from_json(cls, data: object) -> CheckpointStatus:
        """A stored ``status.checkpoint``; never raises (what is not ours is dropped)."""
        if not isinstance(data, Mapping):
            return cls()
        return cls(
            last_saved_step=_count(data.get("lastSavedStep")),
            last_restore=_restore(data.get("lastRestore")),
            last_restore_failure=_failure(data.get("lastRestoreFailure")),
            step_rewound=_rewind(data.get("stepRewound")),
        )


def restore_round(restore: RestoreReport | None) -> int:
    """The round of a restore, ``-1`` for none (every reported round is newer)."""
    return -1 if restore is None or restore.round is None else restore.round


def failure_round(failure: RestoreFailure | None) -> int:
    return -1 if failure is None else failure.round


def newest(ours: CheckpointStatus, theirs: CheckpointStatus) -> CheckpointStatus:
    """``ours`` with the restore and the restore failure of the newer round of the two (a
    status read back after a write conflict): an Event already posted for a round is not
    posted again."""
    if restore_round(theirs.last_restore) > restore_round(ours.last_restore):
        ours = replace(ours, last_restore=theirs.last_restore)
    if failure_round(theirs.last_restore_failure) > failure_round(ours.last_restore_failure):
        ours = replace(ours, last_restore_failure=theirs.last_restore_failure)
    return ours


def _count(value: Any) -> int | None:
    try:
        return bounded_int(value, 0)
    except IntegerError:
        return None


def _text(value: Any) -> str:
    return value[:MAX_REASON_CHARS] if isinstance(value, str) else ""


def _restore(value: Any) -> RestoreReport | None:
    if not isinstance(value, Mapping):
        return None
    try:
        restore = RestoreReport.from_status(dict(value))
    except ValueError:
        return None
    return restore if restore.round is not None else None


def _failure(value: Any) -> RestoreFailure | None:
    if not isinstance(value, Mapping):
        return None
    round_ = _count(value.get("round"))
    return None if round_ is None else RestoreFailure(round_, _text(value.get("reason")))


def _rewind(value: Any) -> StepRewind | None:
    if not isinstance(value, Mapping):
        return None
    before, after = _count(value.get("fromStep")), _count(value.get("toStep"))
    if before is None or after is None:
        return None
    return StepRewind(before, after, _text(value.get("reason")), _text(value.get("message")))
