"""Back-off for agents whose report was refused (pure; the clock is an argument).

A pod that answers ``/status`` with something we refuse (a body too large or too slow, not
JSON, not a report) costs its job's step up to the probe timeout every time it is polled, and
asking again two seconds later changes nothing but that cost: a hostile or broken pod among a
thousand jobs lengthened the slowest steps by half. So a refused pod is polled again only after
a back-off that doubles while it keeps being refused at the same address (``FIRST`` s, up to
``MOST`` s); in between its last refusal stands (``status.invalidReports`` keeps naming it). A
valid report, a new address or the pod's end forgets it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

FIRST = 4.0
"""Seconds until a pod refused once is polled again."""
MOST = 60.0
"""The longest back-off (a persistently hostile pod is polled once a minute)."""


@dataclass(frozen=True)
class _Refused:
    ip: str
    reason: str
    until: float
    wait: float


class Refusals:
    """One job's refused pods (owned by the job's loop)."""

    def __init__(self, first: float = FIRST, most: float = MOST) -> None:
        self._first = first
        self._most = most
        self._pods: dict[str, _Refused] = {}

    def held(self, targets: Mapping[str, str], now: float) -> dict[str, str]:
        """The pods of ``targets`` (``{name: ip}``) not to poll now, with their last refusal."""
        return {
            name: r.reason
            for name, r in self._pods.items()
            if targets.get(name) == r.ip and now < r.until
        }

    def record(
        self,
        polled: Mapping[str, str],
        refused: Mapping[str, str],
        targets: Mapping[str, str],
        now: float,
    ) -> None:
        """After a poll of ``polled`` (``{name: ip}``) that refused ``refused`` (``{name:
        reason}``); pods no longer in ``targets`` are forgotten."""
        for name, ip in polled.items():
            reason = refused.get(name)
            if reason is None:
                self._pods.pop(name, None)
                continue
            before = self._pods.get(name)
            wait = self._first if before is None or before.ip != ip else before.wait * 2
            wait = min(wait, self._most)
            self._pods[name] = _Refused(ip, reason, now + wait, wait)
        for name in [n for n in self._pods if n not in targets]:
            del self._pods[name]
