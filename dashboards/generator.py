"""The Grafana dashboard of ElasticJob, as code (grafana-foundation-sdk).

``python -m dashboards.generator`` writes ``dashboards/elasticjob.json``; ``--check`` writes
nothing and exits 1 when the committed file differs from what this module builds. Then
``scripts/sync-chart.sh`` copies the file into the chart. The metrics are those of
``operator/elasticjob_operator/metrics.py`` (labelled ``namespace``, ``job``) and
``agent/elasticjob_agent/health/metrics.py`` (labelled ``run_id``; the chart's PodMonitor adds
``namespace`` and ``job`` from the worker pod), listed in docs/contracts.md.

Panel ids are assigned here, in order, so they are unique by construction.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from elasticjob_agent.protocol.restarts import SPENDS_BUDGET
from elasticjob_operator.core.stall import StallReason
from grafana_foundation_sdk.builders import common as common_builders
from grafana_foundation_sdk.builders import dashboard as dashboard_builders
from grafana_foundation_sdk.builders import prometheus, stat, statetimeline, timeseries
from grafana_foundation_sdk.cog import variants
from grafana_foundation_sdk.cog.builder import Builder
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as models

OUTPUT = Path(__file__).resolve().parent / "elasticjob.json"
DATASOURCE = models.DataSourceRef(type_val="prometheus", uid="${datasource}")

# Label matchers of every operator series (the job's namespace and name) and of every agent
# series (the same two, set by the chart's PodMonitor from the worker pod, plus the run id).
JOB = 'namespace=~"$namespace", job=~"$job"'
AGENT = f'{JOB}, run_id=~"$run_id"'
BUDGET_REASONS = "|".join(sorted(SPENDS_BUDGET))

Panel = timeseries.Panel | stat.Panel | statetimeline.Panel


@dataclass(frozen=True)
class Query:
    """One PromQL target of a panel."""

    expr: str
    legend: str


@dataclass(frozen=True)
class Row:
    title: str
    panels: tuple[Panel, ...]


def _targets(queries: Sequence[Query]) -> list[Builder[variants.Dataquery]]:
    return [
        prometheus.Dataquery()
        .ref_id(chr(ord("A") + i))
        .datasource(DATASOURCE)
        .expr(q.expr)
        .legend_format(q.legend)
        .range()
        for i, q in enumerate(queries)
    ]


def _timeseries(
    title: str,
    description: str,
    queries: Sequence[Query],
    *,
    width: int,
    bars: bool = False,
    stacked: bool = False,
    unit: str = "",
) -> timeseries.Panel:
    panel = (
        timeseries.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .height(8)
        .span(width)
        .targets(_targets(queries))
        .draw_style(common.GraphDrawStyle.BARS if bars else common.GraphDrawStyle.LINE)
        .line_width(1)
        .fill_opacity(10)
        .show_points(common.VisibilityMode.NEVER)
        .span_nulls(False)
        .legend(
            common_builders.VizLegendOptions()
            .display_mode(common.LegendDisplayMode.TABLE)
            .placement(common.LegendPlacement.BOTTOM)
            .calcs(["lastNotNull", "max"])
            .show_legend(True)
        )
        .tooltip(
            common_builders.VizTooltipOptions()
            .mode(common.TooltipDisplayMode.MULTI)
            .sort(common.SortOrder.DESCENDING)
        )
    )
    if stacked:
        panel = panel.stacking(
            common_builders.StackingConfig().mode(common.StackingMode.NORMAL).group("A")
        )
    if unit:
        panel = panel.unit(unit)
    return panel


def _stat(title: str, description: str, query: Query, *, width: int) -> stat.Panel:
    return (
        stat.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .height(8)
        .span(width)
        .targets(_targets([query]))
        .reduce_options(
            common_builders.ReduceDataOptions().calcs(["lastNotNull"]).fields("").values(False)
        )
        .color_mode(common.BigValueColorMode.BACKGROUND)
        .graph_mode(common.BigValueGraphMode.NONE)
        .text_mode(common.BigValueTextMode.VALUE_AND_NAME)
    )


def _state_timeline(
    title: str, description: str, query: Query, *, width: int
) -> statetimeline.Panel:
    return (
        statetimeline.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .height(8)
        .span(width)
        .targets(_targets([query]))
        .show_value(common.VisibilityMode.NEVER)
        .merge_values(True)
        .row_height(0.8)
    )


def rows() -> tuple[Row, ...]:
    """The dashboard's rows, top to bottom; panels fill each row left to right."""
    return (
        Row(
            "Jobs",
            (
                _stat(
                    "Jobs by phase",
                    "How many ElasticJobs are in each phase now (operator).",
                    Query(f"sum by (phase) (elasticjob_job_phase{{{JOB}}})", "{{phase}}"),
                    width=8,
                ),
                _state_timeline(
                    "Job phase over time",
                    "The phase of each job over time: elasticjob_job_phase is 1 for the current"
                    " phase.",
                    Query(
                        f"max by (namespace, job, phase) (elasticjob_job_phase{{{JOB}}}) == 1",
                        "{{namespace}}/{{job}} {{phase}}",
                    ),
                    width=16,
                ),
            ),
        ),
        Row(
            "Restarts (job-wide, durable)",
            (
                _timeseries(
                    "Restarts by job and reason",
                    "Job-wide restart counts from status.restarts, by reason. Only"
                    f" {', '.join(sorted(SPENDS_BUDGET))} spend maxRestarts; every other reason"
                    " (membership, preemption, etcd-recovered, failures a failure-policy rule"
                    " ignored, ...) is free.",
                    [
                        Query(
                            f"max by (namespace, job, reason) (elasticjob_job_restarts{{{JOB}}})",
                            "{{namespace}}/{{job}} {{reason}}",
                        )
                    ],
                    width=12,
                ),
                _timeseries(
                    "New restarts per interval by reason",
                    "Restarts that happened in each interval, stacked by reason.",
                    [
                        Query(
                            "sum by (namespace, job, reason) (increase(elasticjob_job_restarts"
                            f"{{{JOB}}}[$__rate_interval]))",
                            "{{namespace}}/{{job}} {{reason}}",
                        )
                    ],
                    width=12,
                    bars=True,
                    stacked=True,
                ),
                _timeseries(
                    "Restart budget spent",
                    f"Restarts that spend spec.maxRestarts (reasons {BUDGET_REASONS}): the job"
                    " fails when this reaches its maxRestarts.",
                    [
                        Query(
                            "sum by (namespace, job) (elasticjob_job_restarts"
                            f'{{{JOB}, reason=~"{BUDGET_REASONS}"}})',
                            "{{namespace}}/{{job}}",
                        )
                    ],
                    width=8,
                ),
                _timeseries(
                    "Worker failures seen by agents",
                    "Local worker failures counted by each agent (a pod's counter restarts with"
                    " the pod).",
                    [
                        Query(
                            "sum by (namespace, job, instance) (increase("
                            f"elasticjob_agent_worker_failures_total{{{AGENT}}}[$__rate_interval]))",
                            "{{namespace}}/{{job}} {{instance}}",
                        )
                    ],
                    width=8,
                    bars=True,
                ),
                _timeseries(
                    "Restarts as agents read them",
                    "The job-wide counter as each agent last read it from etcd, by reason.",
                    [
                        Query(
                            "max by (namespace, job, run_id, reason) (elasticjob_agent_job_restarts"
                            f"{{{AGENT}}})",
                            "{{namespace}}/{{job}} {{run_id}} {{reason}}",
                        )
                    ],
                    width=8,
                ),
            ),
        ),
        Row(
            "Budget, spares and etcd (operator)",
            (
                _timeseries(
                    "Restart budget used",
                    f"Restarts that spend spec.maxRestarts (reasons {BUDGET_REASONS}) over"
                    " maxRestarts: the job fails once the budget is spent.",
                    [
                        Query(
                            "sum by (namespace, job) (elasticjob_job_restarts"
                            f'{{{JOB}, reason=~"{BUDGET_REASONS}"}}'
                            f" or 0 * elasticjob_job_max_restarts{{{JOB}}})"
                            " / max by (namespace, job)"
                            f" (elasticjob_job_max_restarts{{{JOB}}})",
                            "{{namespace}}/{{job}}",
                        )
                    ],
                    width=6,
                    unit="percentunit",
                ),
                _timeseries(
                    "Spares ready",
                    "Hot spares standing by, started and warm (status.readySpares).",
                    [
                        Query(
                            f"max by (namespace, job) (elasticjob_job_spares_ready{{{JOB}}})",
                            "{{namespace}}/{{job}}",
                        )
                    ],
                    width=6,
                ),
                _timeseries(
                    "etcd reachable (operator probes)",
                    "1 while the operator's probes reach the job's etcd, 0 while they fail"
                    " (status.etcd.unreachableSince).",
                    [
                        Query(
                            f"min by (namespace, job) (elasticjob_job_etcd_reachable{{{JOB}}})",
                            "{{namespace}}/{{job}}",
                        )
                    ],
                    width=6,
                ),
                _timeseries(
                    "Failure-policy decisions",
                    "Decisions of spec.failurePolicy rules per interval, by action (FailJob,"
                    " Ignore, Count); empty while no rule matched.",
                    [
                        Query(
                            "sum by (namespace, job, action) (increase("
                            "elasticjob_job_failure_policy_decisions_total"
                            f"{{{JOB}}}[$__rate_interval]))",
                            "{{namespace}}/{{job}} {{action}}",
                        )
                    ],
                    width=6,
                    bars=True,
                ),
            ),
        ),
        Row(
            "Stalls",
            (
                _timeseries(
                    "Stalls by reason",
                    "Stalls the operator detected per interval, by reason"
                    f" ({', '.join(reason.value for reason in StallReason)}).",
                    [
                        Query(
                            "sum by (namespace, job, reason) (increase(elasticjob_job_stalls_total"
                            f"{{{JOB}}}[$__rate_interval]))",
                            "{{namespace}}/{{job}} {{reason}}",
                        )
                    ],
                    width=8,
                    bars=True,
                ),
                _state_timeline(
                    "Stalled",
                    "1 while the job is stalled, by reason (the Stalled condition).",
                    Query(
                        f"max by (namespace, job, reason) (elasticjob_job_stalled{{{JOB}}})",
                        "{{namespace}}/{{job}} {{reason}}",
                    ),
                    width=8,
                ),
                _timeseries(
                    "etcd reachable from agents",
                    "1 while etcd answers every agent of the run, 0 when one cannot reach it.",
                    [
                        Query(
                            "min by (namespace, job, run_id) (elasticjob_agent_etcd_reachable"
                            f"{{{AGENT}}})",
                            "{{namespace}}/{{job}} {{run_id}}",
                        )
                    ],
                    width=8,
                ),
            ),
        ),
        Row(
            "Rendezvous and world size",
            (
                _timeseries(
                    "World size",
                    "Worker processes in the current round, as the operator and the agents see it.",
                    [
                        Query(
                            f"max by (namespace, job) (elasticjob_job_world_size{{{JOB}}})",
                            "{{namespace}}/{{job}}",
                        ),
                        Query(
                            "max by (namespace, job, run_id) (elasticjob_agent_world_size"
                            f"{{{AGENT}}})",
                            "agents {{namespace}}/{{job}} {{run_id}}",
                        ),
                    ],
                    width=8,
                ),
                _timeseries(
                    "Rendezvous round",
                    "The current rendezvous round: it grows by one each time the group re-forms.",
                    [
                        Query(
                            f"max by (namespace, job) (elasticjob_job_rendezvous_round{{{JOB}}})",
                            "{{namespace}}/{{job}}",
                        ),
                        Query(
                            "max by (namespace, job, run_id) (elasticjob_agent_rendezvous_round"
                            f"{{{AGENT}}})",
                            "agents {{namespace}}/{{job}} {{run_id}}",
                        ),
                    ],
                    width=8,
                ),
                _timeseries(
                    "Rendezvous duration",
                    "The last round as the operator observed it, and the agents' p50/p90 of"
                    " next_rendezvous().",
                    [
                        Query(
                            "max by (namespace, job) (elasticjob_job_rendezvous_duration_seconds"
                            f"{{{JOB}}})",
                            "last round {{namespace}}/{{job}}",
                        ),
                        *(
                            Query(
                                f"histogram_quantile({q}, sum by (le, namespace, job, run_id)"
                                " (rate(elasticjob_agent_rendezvous_duration_seconds_bucket"
                                f"{{{AGENT}}}[$__rate_interval])))",
                                f"p{round(q * 100)} {{{{namespace}}}}/{{{{job}}}} {{{{run_id}}}}",
                            )
                            for q in (0.5, 0.9)
                        ),
                    ],
                    width=8,
                    unit="s",
                ),
            ),
        ),
        Row(
            "Training progress",
            (
                _timeseries(
                    "Training steps per second",
                    "Steps per second over the last progress reports (status.progress).",
                    [
                        Query(
                            f"max by (namespace, job) (elasticjob_job_steps_per_second{{{JOB}}})",
                            "{{namespace}}/{{job}}",
                        )
                    ],
                    width=12,
                ),
                _timeseries(
                    "Training step",
                    "The last step the workers reported (status.progress.step).",
                    [
                        Query(
                            f"max by (namespace, job) (elasticjob_job_step{{{JOB}}})",
                            "{{namespace}}/{{job}}",
                        )
                    ],
                    width=12,
                ),
            ),
        ),
        Row(
            "What failures cost",
            (
                _timeseries(
                    "Recovery time by phase",
                    "Mean seconds of the job's recoveries so far, stacked by phase: detect"
                    " (fault to restart), rendezvous (to the new round), restore (to the first"
                    " step's start), first_step (status.lastRecovery); empty while nothing"
                    " failed. A mean since the operator started rather than a rate: recoveries"
                    " are rare, so most scrape intervals hold none.",
                    [
                        Query(
                            "sum by (namespace, job, phase) ("
                            f"elasticjob_recovery_seconds_sum{{{JOB}}})"
                            " / sum by (namespace, job, phase) ("
                            f"elasticjob_recovery_seconds_count{{{JOB}}})",
                            "{{namespace}}/{{job}} {{phase}}",
                        )
                    ],
                    width=8,
                    bars=True,
                    stacked=True,
                    unit="s",
                ),
                _timeseries(
                    "Goodput",
                    "Time spent in steps the model kept over wall time since the job started"
                    " (status.goodput.ratio).",
                    [
                        Query(
                            f"max by (namespace, job) (elasticjob_job_goodput_ratio{{{JOB}}})",
                            "{{namespace}}/{{job}}",
                        )
                    ],
                    width=8,
                    unit="percentunit",
                ),
                _timeseries(
                    "Restarts spent against maxRestarts",
                    f"Restarts that spend the budget (reasons {BUDGET_REASONS}) beside"
                    " spec.maxRestarts: the job fails when the first passes the second.",
                    [
                        Query(
                            "sum by (namespace, job) (elasticjob_job_restarts"
                            f'{{{JOB}, reason=~"{BUDGET_REASONS}"}}'
                            f" or 0 * elasticjob_job_max_restarts{{{JOB}}})",
                            "{{namespace}}/{{job}} spent",
                        ),
                        Query(
                            f"max by (namespace, job) (elasticjob_job_max_restarts{{{JOB}}})",
                            "{{namespace}}/{{job}} maxRestarts",
                        ),
                    ],
                    width=8,
                ),
            ),
        ),
        Row(
            "Operator",
            (
                _timeseries(
                    "Reconciles by result",
                    "Reconcile steps per second, by result (all jobs).",
                    [
                        Query(
                            "sum by (result) (rate(elasticjob_reconcile_total[$__rate_interval]))",
                            "{{result}}",
                        )
                    ],
                    width=12,
                ),
                _timeseries(
                    "Reconcile duration p90",
                    "90th percentile of one reconcile step (observe, plan, apply).",
                    [
                        Query(
                            "histogram_quantile(0.9, sum by (le) (rate("
                            "elasticjob_reconcile_duration_seconds_bucket[$__rate_interval])))",
                            "p90",
                        )
                    ],
                    width=12,
                    unit="s",
                ),
            ),
        ),
    )


def _variables() -> list[dashboard_builders.DatasourceVariable | dashboard_builders.QueryVariable]:
    def query(name: str, label: str, expr: str) -> dashboard_builders.QueryVariable:
        return (
            dashboard_builders.QueryVariable(name)
            .label(label)
            .datasource(DATASOURCE)
            .query(expr)
            .refresh(models.VariableRefresh.ON_TIME_RANGE_CHANGED)
            .include_all(True)
            .multi(True)
            .all_value(".*")
            .sort(models.VariableSort.ALPHABETICAL_ASC)
        )

    return [
        dashboard_builders.DatasourceVariable("datasource").label("Data source").type("prometheus"),
        query("namespace", "Namespace", "label_values(elasticjob_job_phase, namespace)"),
        query("job", "Job", 'label_values(elasticjob_job_phase{namespace=~"$namespace"}, job)'),
        query(
            "run_id",
            "Run id (agents)",
            f"label_values(elasticjob_agent_world_size{{{JOB}}}, run_id)",
        ),
    ]


def build() -> dict[str, Any]:
    """The dashboard as Grafana's JSON model (what the committed file holds)."""
    board = (
        dashboard_builders.Dashboard("ElasticJob")
        .uid("elasticjob")
        .description(
            "Elastic PyTorch training jobs: phases, job-wide restarts by reason and the restart"
            " budget, spares, failure-policy decisions, stalls, etcd reachability, world size,"
            " rendezvous time, training progress and what failures cost (recovery time by phase,"
            " goodput). Metrics: docs/contracts.md."
        )
        .tags(["elasticjob", "pytorch", "kubernetes"])
        .editable()
        .tooltip(models.DashboardCursorSync.CROSSHAIR)
        .refresh("30s")
        .time("now-6h", "now")
        .timezone("")
        .version(1)
        .annotation(
            dashboard_builders.AnnotationQuery()
            .name("Annotations & Alerts")
            .datasource(models.DataSourceRef(type_val="grafana", uid="-- Grafana --"))
            .enable(True)
            .hide(True)
            .icon_color("rgba(0, 211, 255, 1)")
            .type("dashboard")
            .built_in(1)
        )
    )
    for variable in _variables():
        board = board.with_variable(variable)
    next_id = 1
    for row in rows():
        board = board.with_row(dashboard_builders.Row(row.title).id(next_id))
        next_id += 1
        for panel in row.panels:
            board = board.with_panel(panel.id(next_id))
            next_id += 1
    data: dict[str, Any] = json.loads(json.dumps(board.build(), cls=JSONEncoder))
    return data


def render() -> str:
    """The committed file's exact text."""
    return json.dumps(build(), indent=2) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--output", type=Path, default=OUTPUT, help="where to write the JSON")
    parser.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 if the file is stale"
    )
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = args.output.read_text() if args.output.exists() else ""
        if current != text:
            print(f"{args.output} is stale: run python -m dashboards.generator", file=sys.stderr)
            return 1
        return 0
    args.output.write_text(text)
    print(f"wrote {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
