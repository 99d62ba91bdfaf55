"""The ``RequestRejected`` condition: the API server refused one of the operator's requests."""

from __future__ import annotations

from dataclasses import dataclass

from ..conditions import ConditionType, find_condition, set_condition
from ..status import JobStatus
from .actions import Event


@dataclass(frozen=True)
class Rejection:
    """The API server refused one of the operator's requests."""

    what: str
    """The request, e.g. ``create Pod ns/name``."""
    http_status: int
    message: str
    """The server's own explanation."""

    @property
    def reason(self) -> str:
        return {400: "BadRequest", 403: "Forbidden", 422: "Invalid"}.get(
            self.http_status, f"HTTP{self.http_status}"
        )


def note_rejection(
    status: JobStatus, rejection: Rejection | None, *, now: float, generation: int
) -> tuple[JobStatus, Event | None]:
    """Record (or clear) the ``RequestRejected`` condition; the Event to post when it turns
    True or its message changes (not on every retry)."""
    before = find_condition(status.conditions, ConditionType.REQUEST_REJECTED)
    if rejection is None:
        if before is None or before.get("status") != "True":
            return status, None
        conds = set_condition(
            status.conditions,
            ConditionType.REQUEST_REJECTED,
            False,
            "Accepted",
            "the API server accepts the operator's requests again",
            now=now,
            generation=generation,
        )
        return status.evolve(conditions=tuple(conds)), None
    message = f"{rejection.what}: {rejection.message}"[:1024]
    conds = set_condition(
        status.conditions,
        ConditionType.REQUEST_REJECTED,
        True,
        rejection.reason,
        message,
        now=now,
        generation=generation,
    )
    fresh = before is None or before.get("status") != "True" or before.get("message") != message
    event = Event("Warning", rejection.reason, message) if fresh else None
    return status.evolve(conditions=tuple(conds)), event
