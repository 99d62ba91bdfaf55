"""The PromQL queries of the Grafana dashboard, with Grafana's variables filled in.

Shared by the dashboard's unit test (syntax, metric names) and the end-to-end test that runs each
query against a real Prometheus.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.paths import REPO

DASHBOARD = REPO / "dashboards" / "elasticjob.json"
_VARIABLE = re.compile(r"\$\{?(\w+)\}?")
_METRIC = re.compile(r"\b(elasticjob_[a-z_]+)")
_HISTOGRAM_SUFFIX = re.compile(r"_(bucket|count|sum)$")
# PromQL, enough to find the series a query reads: strings, label matchers ({...}) and ranges
# ([...]) hold no series name; `by (...)` and friends list label names; an identifier followed by
# "(" is a function or aggregation; the rest are keywords or series names.
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_BRACES = re.compile(r"\{[^{}]*\}|\[[^\[\]]*\]")
_LABEL_LIST = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_IDENTIFIER = re.compile(r"(?<![\w.])([a-zA-Z_:][\w:]*)(\s*\()?")
_KEYWORDS = frozenset(
    {"and", "or", "unless", "bool", "offset", "inf", "nan", "group_left", "group_right"}
)


@dataclass(frozen=True)
class Query:
    panel: str
    ref_id: str
    expr: str

    @property
    def metrics(self) -> frozenset[str]:
        """Metric names the query reads, with histogram suffixes dropped."""
        return frozenset(_HISTOGRAM_SUFFIX.sub("", n) for n in _METRIC.findall(self.expr))

    @property
    def series(self) -> frozenset[str]:
        """Every series name the query selects, exactly as Prometheus stores it (a histogram's
        ``_bucket``, a counter's ``_total``): what the scraped code must export."""
        text = _STRING.sub('""', self.expr)
        text = _BRACES.sub("", text)
        text = _LABEL_LIST.sub("", text)
        return frozenset(
            m[1] for m in _IDENTIFIER.finditer(text) if not m[2] and m[1].lower() not in _KEYWORDS
        )

    def expanded(self, rate_interval: str = "1m") -> str:
        """The query as Grafana sends it with every template variable set to "All"."""
        values = {"__rate_interval": rate_interval, "__interval": rate_interval}

        def fill(match: re.Match[str]) -> str:
            name = match[1]
            if name in values:
                return values[name]
            if name in variables():
                return ".*"
            raise ValueError(f"query uses unknown variable ${name}: {match[0]}")

        return _VARIABLE.sub(fill, self.expr)


def load(path: Path = DASHBOARD) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def variables(dashboard: dict[str, Any] | None = None) -> set[str]:
    data = dashboard or load()
    return {v["name"] for v in data["templating"]["list"]}


def panels(dashboard: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    data = dashboard or load()
    return [p for p in data["panels"] if p["type"] != "row"]


def queries(dashboard: dict[str, Any] | None = None) -> list[Query]:
    return [
        Query(panel=p["title"], ref_id=t["refId"], expr=t["expr"])
        for p in panels(dashboard)
        for t in p["targets"]
    ]
