"""The Grafana dashboard: the panels operators need, valid PromQL, only documented metrics."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import yaml

from tests.support.dashboard import load, panels, queries, variables
from tests.support.paths import REPO


def _documented_metrics() -> set[str]:
    text = (REPO / "docs" / "contracts.md").read_text()
    return set(re.findall(r"`(elasticjob_[a-z_]+)[{`]", text))


def test_dashboard_identity_for_the_sidecar() -> None:
    data = load()
    assert data["uid"] == "elasticjob"
    assert data["title"] == "ElasticJob"
    assert "id" not in data, "a fixed id clashes with dashboards already in Grafana"
    assert {"datasource", "namespace", "job", "run_id"} <= variables(data)


def test_required_panels_exist() -> None:
    by_metric: dict[str, list[str]] = {}
    for q in queries():
        for m in q.metrics:
            by_metric.setdefault(m, []).append(q.panel)
    required = {
        "elasticjob_job_restarts": "restart counts by job and reason",
        "elasticjob_job_phase": "job phases",
        "elasticjob_job_stalls_total": "stalls by reason",
        "elasticjob_job_world_size": "world size",
        "elasticjob_job_rendezvous_duration_seconds": "rendezvous duration",
        "elasticjob_agent_rendezvous_duration_seconds": "rendezvous duration (agents)",
    }
    missing = {m: why for m, why in required.items() if m not in by_metric}
    assert not missing, f"no panel shows {missing}"
    restarts = [q for q in queries() if "elasticjob_job_restarts" in q.metrics]
    assert any("reason" in q.expr and "job" in q.expr for q in restarts)


def test_every_metric_is_in_the_contract() -> None:
    documented = _documented_metrics()
    assert documented, "docs/contracts.md lists no metrics"
    used = set().union(*(q.metrics for q in queries()))
    assert used <= documented, f"not in docs/contracts.md: {sorted(used - documented)}"


def test_every_panel_uses_the_datasource_variable() -> None:
    for panel in panels():
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["targets"], f"panel {panel['title']!r} has no query"
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}"


def test_panels_do_not_overlap() -> None:
    cells: set[tuple[int, int]] = set()
    for panel in load()["panels"]:
        g = panel["gridPos"]
        assert g["x"] + g["w"] <= 24, panel["title"]
        area = {
            (x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])
        }
        assert not cells & area, f"panel {panel['title']!r} overlaps another"
        cells |= area


def test_every_query_is_valid_promql(tmp_path: Path) -> None:
    # promtool (Debian's prometheus package) parses recording rules with Prometheus' own parser.
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {"record": f"dashboard:q{i}", "expr": q.expanded()}
                    for i, q in enumerate(queries())
                ],
            }
        ]
    }
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump(rules))
    proc = subprocess.run(
        ["promtool", "check", "rules", str(path)], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
