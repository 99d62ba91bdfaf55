"""The dashboard as code: the committed JSON is what dashboards/generator.py builds, its panel ids
are unique, every series a query reads is exported by our code, and every per-job panel follows
the Namespace and Job variables."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from elasticjob_agent.health.metrics import AgentMetrics
from elasticjob_operator import metrics as operator_metrics
from prometheus_client.metrics import MetricWrapperBase

from dashboards import generator
from tests.support.dashboard import DASHBOARD, Query, load, queries

# The series names Prometheus stores for one metric family, by type (the exposition format).
_SERIES_SUFFIXES = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "summary": ("", "_count", "_sum", "_created"),
}


def _wrappers(namespace: object) -> list[MetricWrapperBase]:
    return [v for v in vars(namespace).values() if isinstance(v, MetricWrapperBase)]


def _exported(wrappers: list[MetricWrapperBase]) -> dict[str, tuple[str, ...]]:
    """Series name -> the metric's label names."""
    out: dict[str, tuple[str, ...]] = {}
    for wrapper in wrappers:
        labels = tuple(wrapper._labelnames)
        for family in wrapper.describe():
            for suffix in _SERIES_SUFFIXES[family.type]:
                out[family.name + suffix] = labels
    return out


def _operator_series() -> dict[str, tuple[str, ...]]:
    return _exported(_wrappers(operator_metrics))


def _agent_series() -> dict[str, tuple[str, ...]]:
    return _exported(_wrappers(AgentMetrics("run", etcd_reachable=lambda: True)))


def _all_panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _all_panels(panel.get("panels", []))


def _matchers(query: Query, series: str) -> list[str]:
    """The label matchers of each selector of ``series`` in ``query``."""
    return re.findall(rf"\b{re.escape(series)}\{{([^}}]*)\}}", query.expr)


def test_the_committed_dashboard_is_the_generated_one() -> None:
    assert DASHBOARD.read_text() == generator.render(), (
        "dashboards/elasticjob.json is stale: run `python -m dashboards.generator` and"
        " scripts/sync-chart.sh"
    )


def test_check_flags_a_stale_file_and_passes_a_fresh_one(tmp_path: Path) -> None:
    path = tmp_path / "elasticjob.json"
    path.write_text("{}\n")
    assert generator.main(["--check", "--output", str(path)]) == 1
    assert generator.main(["--output", str(path)]) == 0
    assert generator.main(["--check", "--output", str(path)]) == 0
    assert path.read_text() == generator.render()


def test_panel_ids_are_unique() -> None:
    ids = [p["id"] for p in _all_panels(load()["panels"])]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)


def test_every_series_a_query_reads_is_exported_by_our_code() -> None:
    exported = _operator_series() | _agent_series()
    missing = {
        f"{q.panel} [{q.ref_id}]": sorted(q.series - exported.keys())
        for q in queries()
        if q.series - exported.keys()
    }
    assert not missing, f"series no metrics module exports: {missing}"
    assert all(q.series for q in queries()), "a query reads no series"


def test_every_variable_reads_an_exported_series() -> None:
    exported = _operator_series() | _agent_series()
    variables = [v for v in load()["templating"]["list"] if v["type"] == "query"]
    assert variables
    for variable in variables:
        match = re.fullmatch(r"label_values\((\w+)(\{[^}]*\})?, (\w+)\)", variable["query"])
        assert match, variable["query"]
        assert match[1] in exported, variable["query"]


def test_every_per_job_series_follows_the_namespace_and_job_variables() -> None:
    # Operator series labelled by job, and every agent series (the PodMonitor adds the labels).
    per_job = {n for n, labels in _operator_series().items() if {"namespace", "job"} <= {*labels}}
    agent = set(_agent_series())
    unfiltered = []
    for q in queries():
        for series in q.series & (per_job | agent):
            wanted = ['namespace=~"$namespace"', 'job=~"$job"']
            if series in agent:
                wanted.append('run_id=~"$run_id"')
            selectors = _matchers(q, series)
            if not selectors or any(w not in s for s in selectors for w in wanted):
                unfiltered.append(f"{q.panel} [{q.ref_id}] {series}: {q.expr}")
    assert not unfiltered, "\n".join(unfiltered)


def test_the_series_parser_sees_through_functions_labels_and_ranges() -> None:
    query = Query(
        panel="p",
        ref_id="A",
        expr='histogram_quantile(0.9, sum by (le, job) (rate(a_bucket{x="b c", y=~"d|e"}[5m])))'
        " / on (job) group_left b_total offset 1m and c unless sum without (le) (d)",
    )
    assert query.series == {"a_bucket", "b_total", "c", "d"}


def test_the_panels_the_operators_ask_for_are_there() -> None:
    titles = {p["title"] for p in _all_panels(load()["panels"])}
    assert {
        "Restarts by job and reason",
        "Restart budget spent",
        "Stalls by reason",
        "etcd reachable from agents",
        "Training steps per second",
        "Restart budget used",
        "Spares ready",
        "etcd reachable (operator probes)",
        "Failure-policy decisions",
    } <= titles
