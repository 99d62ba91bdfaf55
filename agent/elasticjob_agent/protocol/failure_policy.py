"""The failure policy (``spec.failurePolicy``, ``--failure-policy``): rules that decide what a
counted failure does to the job. Pure; shared by the agent, which applies the rules where it sees
a failure, and the operator, which validates them and passes them on.

A policy is a list of rules, evaluated in order on every failure that would spend the budget;
the first rule that matches decides, and no match means ``Count`` (spend ``maxRestarts``, as
without a policy). A rule matches when every condition it has holds (at least one is required):

- ``onExitCodes: {operator: In | NotIn, values: [...]}``: the failed worker's exit code, as in a
  Job's ``podFailurePolicy``. A worker ended by a signal has exit code ``128 + signal`` (137 for
  ``SIGKILL``), as Kubernetes shows a container's; a failure with no exit code (a hang, a lost
  peer) matches neither ``In`` nor ``NotIn``.
- ``onRootCause: {pattern: ...}``: an RE2 regular expression, searched in the root-cause text
  (the one-line summary: rank, exit code or signal, exception type, message and frame; then the
  worker's stderr tail when the agent kept one).
- ``onReasons: [...]``: the restart reason (``failure``, ``timer``, ``hang``, ``pod-failure``),
  or ``OOMKilled`` (the kernel's OOM killer ended the worker).

Patterns run on RE2 (``google-re2``), whose matching time is linear in the text, so no pattern
can stall the agent or the operator; they are at most ``MAX_PATTERN`` characters and the text
is bounded by the failure record's caps. RE2's syntax is Python's minus backreferences and
lookaround.
"""

from __future__ import annotations

import json
import math
import signal
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

import re2

from elasticjob_agent.protocol.failure import WorkerFailure, from_json_line
from elasticjob_agent.protocol.restarts import POD_FAILURE, RestartReason

MAX_RULES = 20
MAX_PATTERN = 256
MAX_EXIT_CODES = 255
MAX_ROOT_CAUSE = 1024
"""The root cause carried in a decision record (report, termination message, status)."""
MAX_POLICY_BYTES = 64 * 1024
"""The largest policy file or JSON text the agent accepts."""
OOM_KILLED = "OOMKilled"
FAILURE_POLICY_REASON = "FailurePolicy"
"""The close reason, the ``Failed`` condition's reason and the exit reason of a ``FailJob``."""

REASONS = frozenset(
    {
        RestartReason.FAILURE.value,
        RestartReason.TIMER.value,
        RestartReason.HANG.value,
        POD_FAILURE,
        OOM_KILLED,
    }
)
"""What ``onReasons`` may name: the reasons that spend the budget, and ``OOMKilled``."""

_RULE_KEYS = frozenset({"action", "onExitCodes", "onRootCause", "onReasons"})
_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.max_mem = 1 << 20  # a pattern that needs more is rejected at parse time
_RE2_OPTIONS.log_errors = False


class FailurePolicyError(ValueError):
    """The policy cannot be used as written; the message names the field and what to fix."""


class Action(str, Enum):
    FAIL_JOB = "FailJob"
    """Fail the job now (reason ``FailurePolicy``), spending nothing."""
    IGNORE = "Ignore"
    """Restart the group without spending the budget (counted under ``ignored``)."""
    COUNT = "Count"
    """Restart and spend the budget, as without a policy."""


class ExitCodeOperator(str, Enum):
    IN = "In"
    NOT_IN = "NotIn"


@dataclass(frozen=True)
class ExitCodes:
    operator: ExitCodeOperator
    values: frozenset[int]

    def matches(self, code: int | None) -> bool:
        if code is None:
            return False
        inside = code in self.values
        return inside if self.operator is ExitCodeOperator.IN else not inside


@dataclass(frozen=True)
class Rule:
    action: Action
    exit_codes: ExitCodes | None = None
    pattern: str | None = None
    reasons: frozenset[str] | None = None

    def matches(self, facts: FailureFacts) -> bool:
        if self.exit_codes is not None and not self.exit_codes.matches(facts.exit_code):
            return False
        if self.pattern is not None and not _compiled(self.pattern).search(facts.root_cause):
            return False
        if self.reasons is not None:
            seen = {facts.reason, OOM_KILLED} if facts.oom_killed else {facts.reason}
            if not seen & self.reasons:
                return False
        return True

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"action": self.action.value}
        if self.exit_codes is not None:
            data["onExitCodes"] = {
                "operator": self.exit_codes.operator.value,
                "values": sorted(self.exit_codes.values),
            }
        if self.pattern is not None:
            data["onRootCause"] = {"pattern": self.pattern}
        if self.reasons is not None:
            data["onReasons"] = sorted(self.reasons)
        return data


@dataclass(frozen=True)
class FailurePolicy:
    rules: tuple[Rule, ...] = ()

    def decide(self, facts: FailureFacts) -> Decision:
        """The first matching rule's action and index; ``Count`` with no index when none
        matches."""
        for index, rule in enumerate(self.rules):
            if rule.matches(facts):
                return Decision(rule.action, index)
        return Decision(Action.COUNT, None)

    def to_json(self) -> dict[str, Any]:
        return {"rules": [r.to_json() for r in self.rules]}

    def dumps(self) -> str:
        return json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class FailureFacts:
    """What the rules look at, for one failure."""

    reason: str
    """The restart reason it would be counted under (``failure``, ``timer``, ``hang``,
    ``pod-failure``)."""
    exit_code: int | None = None
    root_cause: str = ""
    oom_killed: bool = False


@dataclass(frozen=True)
class Decision:
    action: Action
    rule: int | None
    """Index of the matching rule in ``rules``; ``None``: no rule matched."""


def facts_of(
    reason: str, failure: WorkerFailure | None, *, oom_killed: bool = False
) -> FailureFacts:
    """The facts of a failure the agent recorded as its round's root cause."""
    if failure is None:
        return FailureFacts(reason, oom_killed=oom_killed)
    return FailureFacts(
        reason, exit_code_of(failure), root_cause_text(failure), oom_killed=oom_killed
    )


def exit_code_of(failure: WorkerFailure) -> int | None:
    """The exit code rules match: the process's, or ``128 + n`` for a signal (Kubernetes')."""
    if failure.exit_code is not None:
        return failure.exit_code
    if failure.signal is not None:
        try:
            return 128 + int(signal.Signals[failure.signal])
        except KeyError:
            return None
    return None


def root_cause_text(failure: WorkerFailure) -> str:
    """What ``onRootCause`` patterns search: the summary line, then the stderr tail."""
    text = failure.summary()
    if failure.output_tail:
        text += "\n" + failure.output_tail
    return text


# --- parsing ---------------------------------------------------------------------------------


def parse_policy(data: Any, where: str = "spec.failurePolicy") -> FailurePolicy:
    """Parse ``{"rules": [...]}`` strictly; raise ``FailurePolicyError`` naming the field."""
    if data is None:
        return FailurePolicy()
    if not isinstance(data, Mapping):
        raise FailurePolicyError(f"{where} must be an object with a list 'rules'")
    unknown = set(data) - {"rules"}
    if unknown:
        raise FailurePolicyError(f"{where}: unknown field {sorted(unknown)[0]!r} (only 'rules')")
    rules = data.get("rules", [])
    if not isinstance(rules, list):
        raise FailurePolicyError(f"{where}.rules must be a list")
    if len(rules) > MAX_RULES:
        raise FailurePolicyError(f"{where}.rules has {len(rules)} rules, at most {MAX_RULES}")
    return FailurePolicy(tuple(_rule(r, f"{where}.rules[{i}]") for i, r in enumerate(rules)))


def loads_policy(text: str | bytes, where: str) -> FailurePolicy:
    """A policy from JSON text (the agent's ``--failure-policy`` file, or the operator's)."""
    if len(text) > MAX_POLICY_BYTES:
        raise FailurePolicyError(f"{where} is longer than {MAX_POLICY_BYTES} bytes")
    try:
        data = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        raise FailurePolicyError(f"{where} is not valid JSON: {exc}") from None
    return parse_policy(data, where)


def _rule(data: Any, where: str) -> Rule:
    if not isinstance(data, Mapping):
        raise FailurePolicyError(f"{where} must be an object")
    unknown = set(data) - _RULE_KEYS
    if unknown:
        raise FailurePolicyError(
            f"{where}: unknown field {sorted(unknown)[0]!r} "
            "(a rule has action, onExitCodes, onRootCause, onReasons)"
        )
    action = data.get("action")
    try:
        parsed_action = Action(action)
    except ValueError:
        raise FailurePolicyError(
            f"{where}.action must be one of FailJob, Ignore, Count (got {_show(action)})"
        ) from None
    if not {"onExitCodes", "onRootCause", "onReasons"} & set(data):
        raise FailurePolicyError(
            f"{where} has no condition: give onExitCodes, onRootCause or onReasons "
            "(a rule without one would match every failure)"
        )
    return Rule(
        parsed_action,
        _exit_codes(data.get("onExitCodes"), f"{where}.onExitCodes")
        if "onExitCodes" in data
        else None,
        _pattern(data.get("onRootCause"), f"{where}.onRootCause")
        if "onRootCause" in data
        else None,
        _reasons(data.get("onReasons"), f"{where}.onReasons") if "onReasons" in data else None,
    )


def _exit_codes(data: Any, where: str) -> ExitCodes:
    if not isinstance(data, Mapping) or set(data) - {"operator", "values"}:
        raise FailurePolicyError(f"{where} must be {{operator: In | NotIn, values: [...]}}")
    operator = data.get("operator")
    try:
        parsed = ExitCodeOperator(operator)
    except ValueError:
        raise FailurePolicyError(
            f"{where}.operator must be In or NotIn (got {_show(operator)})"
        ) from None
    values = data.get("values")
    if not isinstance(values, list) or not 1 <= len(values) <= MAX_EXIT_CODES:
        raise FailurePolicyError(f"{where}.values must list 1 to {MAX_EXIT_CODES} exit codes")
    for i, value in enumerate(values):
        if type(value) is not int or not 0 <= value <= 255:
            raise FailurePolicyError(f"{where}.values[{i}] must be an integer in 0..255")
    if len(set(values)) != len(values):
        raise FailurePolicyError(f"{where}.values must not repeat a value")
    if parsed is ExitCodeOperator.IN and 0 in values:
        raise FailurePolicyError(f"{where}.values: 0 is success, never a failure (use NotIn)")
    return ExitCodes(parsed, frozenset(values))


def _pattern(data: Any, where: str) -> str:
    if not isinstance(data, Mapping) or set(data) != {"pattern"}:
        raise FailurePolicyError(f"{where} must be {{pattern: <regular expression>}}")
    pattern = data["pattern"]
    if not isinstance(pattern, str) or not pattern:
        raise FailurePolicyError(f"{where}.pattern must be a non-empty string")
    if len(pattern) > MAX_PATTERN:
        raise FailurePolicyError(
            f"{where}.pattern is {len(pattern)} characters, at most {MAX_PATTERN}"
        )
    try:
        _compiled(pattern)
    except re2.error as exc:
        why = exc.args[0] if exc.args else exc
        if isinstance(why, bytes):  # google-re2 reports RE2's own message as bytes
            why = why.decode("utf-8", errors="replace")
        raise FailurePolicyError(
            f"{where}.pattern {pattern!r:.80} is not a valid RE2 regular expression: {why} "
            "(RE2 has no backreferences or lookaround)"
        ) from None
    return pattern


def _reasons(data: Any, where: str) -> frozenset[str]:
    if not isinstance(data, list) or not 1 <= len(data) <= len(REASONS):
        raise FailurePolicyError(f"{where} must list 1 to {len(REASONS)} reasons")
    for i, reason in enumerate(data):
        if reason not in REASONS:
            raise FailurePolicyError(
                f"{where}[{i}] is {_show(reason)}, not one of {', '.join(sorted(REASONS))} "
                "(the other reasons never spend the budget)"
            )
    if len(set(data)) != len(data):
        raise FailurePolicyError(f"{where} must not repeat a reason")
    return frozenset(data)


_CACHE: dict[str, Any] = {}


def _compiled(pattern: str) -> Any:
    """The compiled pattern (cached: a policy has few, and the agent checks them each failure)."""
    compiled = _CACHE.get(pattern)
    if compiled is None:
        compiled = re2.compile(pattern, options=_RE2_OPTIONS)
        if len(_CACHE) < 4 * MAX_RULES:
            _CACHE[pattern] = compiled
    return compiled


def _show(value: Any) -> str:
    return repr(value)[:60]


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed")


# --- the decision record ---------------------------------------------------------------------


@dataclass(frozen=True)
class PolicyDecision:
    """A rule that matched, as the agent reports it (health report ``failurePolicy``, the
    termination message) and the operator shows it (``status.failurePolicy``, the condition
    ``FailurePolicy``, the Event). Untrusted when read: ``from_json`` is strict."""

    action: Action
    rule: int
    reason: str
    """The restart reason the failure would have been counted under."""
    round: int
    root_cause: str
    time: float

    def summary(self) -> str:
        verb = {
            Action.FAIL_JOB: "failed the job",
            Action.IGNORE: "restarted the group without spending the budget",
            Action.COUNT: "counted the failure against maxRestarts",
        }[self.action]
        return (
            f"failurePolicy.rules[{self.rule}] ({self.action.value}) matched a {self.reason} "
            f"in round {self.round} and {verb}: {self.root_cause}"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "action": self.action.value,
            "rule": self.rule,
            "reason": self.reason,
            "round": self.round,
            "rootCause": self.root_cause,
            "time": self.time,
        }

    @classmethod
    def from_json(cls, data: Any) -> PolicyDecision:
        if not isinstance(data, Mapping):
            raise FailurePolicyError("failurePolicy decision must be an object")
        try:
            action = Action(data.get("action"))
        except ValueError:
            raise FailurePolicyError("failurePolicy decision has no known action") from None
        rule, round_ = data.get("rule"), data.get("round")
        for name, value in (("rule", rule), ("round", round_)):
            if type(value) is not int or not 0 <= value <= 2**53:
                raise FailurePolicyError(f"failurePolicy decision field {name!r} is not a count")
        reason, cause, at = data.get("reason"), data.get("rootCause"), data.get("time")
        if reason not in REASONS:
            raise FailurePolicyError("failurePolicy decision has no known reason")
        if not isinstance(cause, str) or len(cause) > MAX_ROOT_CAUSE:
            raise FailurePolicyError(
                f"failurePolicy decision field 'rootCause' must be a string of at most "
                f"{MAX_ROOT_CAUSE} characters"
            )
        if isinstance(at, bool) or not isinstance(at, int | float):
            raise FailurePolicyError("failurePolicy decision field 'time' must be a number")
        if not math.isfinite(float(at)) or at < 0 or at > 2**53:
            raise FailurePolicyError("failurePolicy decision field 'time' is out of range")
        assert isinstance(rule, int) and isinstance(round_, int)
        return cls(action, rule, reason, round_, cause, float(at))


def decision_record(
    decision: Decision, facts: FailureFacts, round_: int, at: float, summary: str | None
) -> PolicyDecision | None:
    """The record of a decision a rule made (``None`` when no rule matched)."""
    if decision.rule is None:
        return None
    cause = summary if summary is not None else facts.root_cause.split("\n", 1)[0]
    if len(cause) > MAX_ROOT_CAUSE:
        cause = cause[: MAX_ROOT_CAUSE - 3] + "..."
    return PolicyDecision(decision.action, decision.rule, facts.reason, round_, cause, at)


def decision_from_termination_message(text: str) -> PolicyDecision | None:
    """The decision an agent left in its termination message on a ``FailJob`` exit
    (``protocol.failure.termination_message``); ``None`` when there is none or it is invalid
    (the message comes from a pod: untrusted)."""
    try:
        return from_json_line(text, "failurePolicy", PolicyDecision.from_json)
    except FailurePolicyError:
        return None


def encode_close_reason(decision: PolicyDecision, node: str) -> bytes:
    """The rendezvous' ``close-reason`` record of a ``FailJob`` (``protocol.restarts`` reads its
    ``reason``): every agent that finds the rendezvous closed exits ``FAILURE_POLICY``."""
    payload = {
        "reason": FAILURE_POLICY_REASON,
        "node": node,
        # Short: the record must stay under protocol.restarts.MAX_VALUE_BYTES even escaped.
        "failurePolicy": {**decision.to_json(), "rootCause": decision.root_cause[:256]},
        "at": decision.time,
    }
    return json.dumps(payload, sort_keys=True).encode()
