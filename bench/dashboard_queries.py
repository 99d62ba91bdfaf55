"""The Grafana dashboard's queries as Grafana sends them (pure): every target of every panel of
``dashboards/elasticjob.json``, its template variables set to one job (or All), and whether a
range query's answer holds data."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DASHBOARD = Path(__file__).resolve().parents[1] / "dashboards" / "elasticjob.json"
_VARIABLE = re.compile(r"\$\{?(\w+)\}?")
#: Grafana's own interval variables; the template variables are the dashboard's.
_INTERVALS = ("__rate_interval", "__interval")


@dataclass(frozen=True)
class Target:
    """One query of one panel."""

    panel: str
    ref_id: str
    expr: str

    def expanded(self, variables: Mapping[str, str], rate_interval: str) -> str:
        """The query with ``$name`` / ``${name}`` replaced: Grafana's intervals by
        ``rate_interval``, each template variable by its regex in ``variables``. Raises
        ``ValueError`` naming a variable that has no value."""

        def fill(match: re.Match[str]) -> str:
            name = match[1]
            if name in _INTERVALS:
                return rate_interval
            if name in variables:
                return variables[name]
            raise ValueError(f"{self.panel} [{self.ref_id}]: no value for ${name}")

        return _VARIABLE.sub(fill, self.expr)


def load(path: Path = DASHBOARD) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def targets(dashboard: Mapping[str, Any]) -> list[Target]:
    """Every Prometheus target of every panel (rows hold none), in the dashboard's order."""
    return [
        Target(panel=str(p["title"]), ref_id=str(t["refId"]), expr=str(t["expr"]))
        for p in dashboard["panels"]
        if p.get("type") != "row"
        for t in p.get("targets", [])
        if t.get("expr")
    ]


def template_variables(dashboard: Mapping[str, Any]) -> list[str]:
    """The names of the dashboard's query variables (the data source variable is no filter)."""
    return [
        str(v["name"]) for v in dashboard["templating"]["list"] if v.get("type") != "datasource"
    ]


def selection(dashboard: Mapping[str, Any], chosen: Mapping[str, str]) -> dict[str, str]:
    """Each template variable's regex: ``chosen``'s exact value (escaped), else All (``.*``).
    Raises ``ValueError`` when ``chosen`` names a variable the dashboard lacks."""
    names = template_variables(dashboard)
    unknown = sorted(set(chosen) - set(names))
    if unknown:
        raise ValueError(f"the dashboard has no variable {', '.join(unknown)} (has {names})")
    return {name: promql_regex(chosen[name]) if name in chosen else ".*" for name in names}


def promql_regex(value: str) -> str:
    """A regex matching exactly ``value``, written for a PromQL double-quoted string (whose own
    escapes need each backslash of the regex doubled, as Grafana writes it)."""
    return re.escape(value).replace("\\", "\\\\")


def finite_points(result: Iterable[Mapping[str, Any]]) -> int:
    """Samples of a range query's ``result`` that are numbers (not NaN, not infinite)."""
    return sum(
        1
        for series in result
        for _, value in series.get("values", [])
        if math.isfinite(float(value))
    )
