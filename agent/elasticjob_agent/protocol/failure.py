"""The root cause of a group restart: the first worker failure of a round (``lastFailure``).

The agent puts it in its health report; the operator copies it into the job's
``status.lastFailure``, the ``Restarted`` Event and the ``Failed`` condition. It comes from a pod,
so ``WorkerFailure.from_json`` is strict: every field has its type, every string is capped, and
the whole record, as JSON, stays under ``MAX_FAILURE_BYTES``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from elasticjob_agent.protocol.integers import IntegerError, bounded_int
from elasticjob_agent.protocol.symptoms import Symptom, classify

T = TypeVar("T")

MAX_TYPE = 128
MAX_MESSAGE = 1024
MAX_FRAME = 512
MAX_TAIL = 1536
MAX_TAIL_LINES = 20
"""A failed worker's output tail keeps at most this many lines and ``MAX_TAIL`` characters."""
MAX_NAME = 256
MAX_INT = 2**53
MAX_FAILURE_BYTES = 4096
"""A record's JSON is at most this long: the caps above, plus keys and escapes, fit."""
MAX_TERMINATION_MESSAGE = 4096
"""Kubernetes keeps at most 4096 bytes of a container's termination message."""


def last_line(text: str) -> str:
    """The last non-blank line of ``text``, stripped (a traceback's is its exception)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


class FailureRecordError(ValueError):
    """The payload is not a valid failure record; the message names the field."""


@dataclass(frozen=True)
class WorkerFailure:
    """One worker's failure, as far as the agent could tell."""

    local_rank: int
    time: float
    """Unix time the agent saw the failure (or the error file's timestamp)."""
    rank: int | None = None
    """Global rank, when the group had formed."""
    node: str | None = None
    pod: str | None = None
    exit_code: int | None = None
    """The process's exit status; ``None`` when a signal ended it."""
    signal: str | None = None
    """``SIGKILL``, ``SIGSEGV``, ...: the signal that ended the process."""
    exception_type: str | None = None
    message: str | None = None
    frame: str | None = None
    """Where the exception was raised: ``file:line in function``."""
    output_tail: str | None = None
    """The last lines of the worker's stderr (at most ``MAX_TAIL_LINES`` and ``MAX_TAIL``
    characters), when it left no error file: often the only account of an early death."""
    round: int | None = None
    """The rendezvous round the worker ran in (job-wide with ``etcd-v3``): a later round's
    failure is news; within one round a cause outranks its consequences (``outranks``)."""
    oom_killed: bool = False
    """The ``SIGKILL`` was the kernel's OOM killer's: the container's cgroup counted an OOM
    kill meanwhile (``supervision/oom.py``). On cgroup v1 it kills the one process, and the
    container lives on: the kubelet never says ``OOMKilled``."""

    def summary(self) -> str:
        """One line for Events, conditions and logs: who, how and why."""
        who = f"rank {self.rank}" if self.rank is not None else f"local rank {self.local_rank}"
        where = self.pod or self.node
        if where:
            who += f" on {where}"
        if self.signal:
            how = f"killed by {self.signal}"
            if self.oom_killed:
                how += " (the kernel's OOM killer: the container reached its memory limit)"
        elif self.exit_code is not None:
            how = f"exited with code {self.exit_code}"
        else:
            how = "failed"
        text = f"{who} {how}"
        if self.exception_type:
            text += f": {self.exception_type}"
            if self.message:
                text += f": {self.message}"
            if self.frame:
                text += f" (at {self.frame})"
        elif self.message:  # the agent's own finding, e.g. an expired timer
            text += f": {self.message}"
        elif self.output_tail and self.signal is None:
            # What it said last explains an exit; a signal explains itself (a killed worker's
            # last line is whatever it was doing).
            text += f": {last_line(self.output_tail)}"
        return text

    def symptom(self) -> Symptom | None:
        """What consequence of another rank's failure this one looks like (``protocol.symptoms``):
        read from the exception, else (no error file) from the last line the worker printed, or
        for a ``SIGABRT`` (NCCL's watchdog tears the process down) from its whole output tail;
        ``None`` for a failure of its own."""
        if self.exception_type is not None:
            return classify(f"{self.exception_type}: {self.message or ''}")
        if self.message is not None or not self.output_tail:
            return None  # the agent's own finding (an expired timer, a hang), or nothing said
        if self.signal is None:
            return classify(last_line(self.output_tail))
        return classify(self.output_tail) if self.signal == "SIGABRT" else None

    def is_consequence(self) -> bool:
        """True for a failure that looks caused by another rank's: a collective that lost a
        peer (gloo's "Connection closed by peer", ``DistBackendError``, ...)."""
        return self.symptom() is not None

    def outranks(self, other: WorkerFailure | None) -> bool:
        """Whether this failure should replace ``other`` as the job's last root cause: a later
        round, else (same round, or a round unknown) a cause over a consequence, then the newer.
        A peer's lost connection, seen after the rank that died, never hides it."""
        if other is None:
            return True
        if self.round is not None and other.round is not None and self.round != other.round:
            return self.round > other.round
        if self.is_consequence() != other.is_consequence():
            return other.is_consequence()
        return self.time > other.time

    def to_json(self) -> dict[str, Any]:
        data = {
            "localRank": self.local_rank,
            "time": self.time,
            "rank": self.rank,
            "node": self.node,
            "pod": self.pod,
            "exitCode": self.exit_code,
            "signal": self.signal,
            "exceptionType": self.exception_type,
            "message": self.message,
            "frame": self.frame,
            "outputTail": self.output_tail,
            "round": self.round,
            "oomKilled": self.oom_killed or None,
        }
        return {k: v for k, v in data.items() if v is not None}

    @classmethod
    def from_json(cls, data: object) -> WorkerFailure:
        """Parse strictly; raise ``FailureRecordError`` naming the bad field."""
        if not isinstance(data, dict):
            raise FailureRecordError("lastFailure must be an object")
        local_rank = _int(data, "localRank", required=True)
        assert local_rank is not None
        return cls(
            local_rank=local_rank,
            time=_time(data),
            rank=_int(data, "rank"),
            node=_str(data, "node", MAX_NAME),
            pod=_str(data, "pod", MAX_NAME),
            exit_code=_int(data, "exitCode", signed=True),
            signal=_str(data, "signal", 32),
            exception_type=_str(data, "exceptionType", MAX_TYPE),
            message=_str(data, "message", MAX_MESSAGE),
            frame=_str(data, "frame", MAX_FRAME),
            output_tail=_str(data, "outputTail", MAX_TAIL),
            round=_int(data, "round"),
            oom_killed=_bool(data, "oomKilled"),
        )


def cap(text: str | None, limit: int) -> str | None:
    """``text`` cut to ``limit`` characters (an ellipsis marks the cut); ``None`` stays."""
    if text is None or len(text) <= limit:
        return text
    return text[: limit - 3] + "..."


def _int(
    data: Mapping[str, Any], key: str, *, required: bool = False, signed: bool = False
) -> int | None:
    value = data.get(key)
    if value is None:
        if required:
            raise FailureRecordError(f"field 'lastFailure.{key}' is missing")
        return None
    try:
        return bounded_int(value, -MAX_INT if signed else 0, MAX_INT)
    except IntegerError as exc:
        problem = "is out of range" if exc.out_of_range else "must be an integer"
        raise FailureRecordError(f"field 'lastFailure.{key}' {problem}") from None


def _time(data: Mapping[str, Any]) -> float:
    value = data.get("time")
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise FailureRecordError("field 'lastFailure.time' must be a number")
    if isinstance(value, int) and value > MAX_INT:
        raise FailureRecordError("field 'lastFailure.time' is out of range")
    number = float(value)
    if not math.isfinite(number) or number < 0:
        raise FailureRecordError("field 'lastFailure.time' must be finite and >= 0")
    return number


def _bool(data: Mapping[str, Any], key: str) -> bool:
    value = data.get(key, False)
    if not isinstance(value, bool):
        raise FailureRecordError(f"field 'lastFailure.{key}' must be true or false")
    return value


def _str(data: Mapping[str, Any], key: str, limit: int) -> str | None:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise FailureRecordError(f"field 'lastFailure.{key}' must be a string")
    if len(value) > limit:
        raise FailureRecordError(f"field 'lastFailure.{key}' is longer than {limit} characters")
    return value


MAX_REASONS = 16
"""Restart reasons a termination message may carry at most (the agent knows fewer)."""


@dataclass(frozen=True)
class FinalCounts:
    """The job-wide restart counts an agent saw as it exited on the spent budget or on success:
    the last counts reach the operator even when the agent exits before its next health poll.
    Untrusted like a health report (``from_json`` is strict)."""

    run_id: str
    by_reason: Mapping[str, int]

    def to_json(self) -> dict[str, Any]:
        return {"runId": self.run_id, "byReason": dict(sorted(self.by_reason.items()))}

    @classmethod
    def from_json(cls, data: Any) -> FinalCounts:
        if not isinstance(data, Mapping):
            raise FailureRecordError("field 'restarts' must be an object")
        run_id = data.get("runId")
        if not isinstance(run_id, str) or not run_id or len(run_id) > MAX_NAME:
            raise FailureRecordError(f"field 'restarts.runId' must be a string of 1-{MAX_NAME}")
        by_reason = data.get("byReason")
        if not isinstance(by_reason, Mapping) or len(by_reason) > MAX_REASONS:
            raise FailureRecordError(
                f"field 'restarts.byReason' must be an object of at most {MAX_REASONS} keys"
            )
        counts: dict[str, int] = {}
        for reason, value in by_reason.items():
            if not isinstance(reason, str) or not reason or len(reason) > MAX_TYPE:
                raise FailureRecordError("a key of 'restarts.byReason' is not a reason name")
            if type(value) is not int or not 0 <= value <= MAX_INT:
                raise FailureRecordError(f"field 'restarts.byReason.{reason}' is not a count")
            counts[reason] = value
        return cls(run_id, counts)


def termination_message(
    failure: WorkerFailure | None,
    counts: FinalCounts | None = None,
    decision: Mapping[str, Any] | None = None,
    headline: str | None = None,
) -> bytes:
    """What the container's termination message file gets: the failure's summary line, then its
    record as JSON, then (on the agent's final exit) the final counts as JSON, and (after a
    failure policy's decision) the ``decision`` as JSON (``{"failurePolicy": ...}``), within
    ``MAX_TERMINATION_MESSAGE`` bytes (the record's JSON is dropped first if it does not fit).
    Without a failure of this node's own: ``headline`` (by default, that the budget is spent),
    then the counts."""
    if failure is not None:
        text = failure.summary()
    else:
        text = "restart budget spent" if headline is None else headline
    summary = text.encode("utf-8", errors="replace")[: MAX_TERMINATION_MESSAGE - 1] + b"\n"
    record = b""
    if failure is not None:
        record = json.dumps({"lastFailure": failure.to_json()}, sort_keys=True).encode() + b"\n"
    tail = b""
    if counts is not None:
        tail = json.dumps({"restarts": counts.to_json()}, sort_keys=True).encode() + b"\n"
    if decision is not None:
        tail += json.dumps({"failurePolicy": dict(decision)}, sort_keys=True).encode() + b"\n"
    for whole in (summary + record + tail, summary + tail):
        if len(whole) <= MAX_TERMINATION_MESSAGE:
            return whole
    return summary


def from_json_line(text: str, key: str, parse: Callable[[Any], T]) -> T | None:
    """``parse`` of the value under ``key`` in the termination message's JSON line that holds
    it; ``None`` when there is none, or when the message, the line or the value is not valid
    (the message comes from a pod: untrusted)."""
    if len(text) > MAX_TERMINATION_MESSAGE:
        return None
    try:
        for line in text.splitlines()[1:]:
            if line.startswith('{"' + key + '"'):
                data = json.loads(line, parse_constant=_reject_constant).get(key)
                return None if data is None else parse(data)
    except (ValueError, AttributeError, RecursionError):
        return None
    return None


def from_termination_message(text: str) -> WorkerFailure | None:
    """The record in a container's termination message (``termination_message``'s second line),
    parsed as strictly as a health report's; ``None`` when there is none or it is not valid."""
    return from_json_line(text, "lastFailure", WorkerFailure.from_json)


def counts_from_termination_message(text: str) -> FinalCounts | None:
    """The final counts in a container's termination message (see ``termination_message``);
    ``None`` when there are none or they are not valid (untrusted, like the record)."""
    return from_json_line(text, "restarts", FinalCounts.from_json)


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not a number")
