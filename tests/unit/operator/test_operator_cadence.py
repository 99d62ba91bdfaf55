"""When a job's agents and etcd are probed (``cadence.py``): watchful while anything moves,
steady (etcd every few seconds, agents rarely) once calm."""

from __future__ import annotations

import pytest
from elasticjob_agent.protocol.health import AgentState, EtcdStatus, HealthReport
from elasticjob_operator.core import cadence
from elasticjob_operator.settings import OperatorSettings

SETTINGS = cadence.CadenceSettings(etcd_interval=3.0, report_interval=10.0, settle=20.0)


def report(state: AgentState = AgentState.RUNNING, reachable: bool = True) -> HealthReport:
    return HealthReport(
        run_id="run",
        node="n",
        state=state,
        etcd=EtcdStatus(reachable=reachable, last_contact=1.0, unreachable_since=None),
    )


def is_calm(**overrides: object) -> bool:
    args: dict[str, object] = {
        "running": True,
        "stalled": False,
        "etcd_reachable": True,
        "expects_etcd": True,
        "reports": {"a": report(), "b": report()},
        "running_workers": 2,
        "run_id": "run",
    }
    args.update(overrides)
    return cadence.calm(**args)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({}, True),
        ({"running": False}, False),
        ({"stalled": True}, False),
        ({"etcd_reachable": False}, False),
        ({"etcd_reachable": None}, False),
        ({"etcd_reachable": None, "expects_etcd": False}, True),
        ({"reports": {"a": report()}}, False),
        ({"reports": {"a": report()}, "refused": 1}, True),
        ({"reports": {"a": report()}, "no_verdict": 1}, True),
        ({"reports": {}, "refused": 1, "no_verdict": 1}, True),
        ({"reports": {}, "no_verdict": 1}, False),
        ({"reports": {"a": report(), "b": report(AgentState.RENDEZVOUS)}}, False),
        ({"reports": {"a": report(), "b": report(reachable=False)}}, False),
        ({"run_id": "another run"}, False),
    ],
)
def test_calm_needs_every_witness_quiet(overrides: dict[str, object], expected: bool) -> None:
    assert is_calm(**overrides) is expected


def test_calm_starts_holds_and_breaks() -> None:
    record = cadence.next_calm(cadence.Calm(), True, False, 100.0)
    assert record == cadence.Calm(100.0)
    assert cadence.next_calm(record, True, False, 105.0) == cadence.Calm(100.0)
    assert not cadence.steady(record, 119.0, SETTINGS)
    assert cadence.steady(record, 120.0, SETTINGS)
    assert cadence.next_calm(record, False, False, 121.0) == cadence.Calm(None)
    assert cadence.next_calm(record, True, True, 121.0) == cadence.Calm(None)
    assert not cadence.steady(cadence.Calm(None), 1e9, SETTINGS)


def test_watchful_probes_everything_every_interval() -> None:
    due = cadence.due(
        steady_now=False,
        last_reports=99.0,
        last_etcd=99.0,
        now=100.0,
        interval=2.0,
        settings=SETTINGS,
    )
    assert due == cadence.Due(reports=True, etcd=True, wait=2.0)


@pytest.mark.parametrize(
    ("last_reports", "last_etcd", "now", "expected"),
    [
        (None, None, 100.0, cadence.Due(True, True, 3.0)),
        (100.0, 100.0, 101.0, cadence.Due(False, False, 2.0)),
        (100.0, 100.0, 103.0, cadence.Due(False, True, 3.0)),
        (100.0, 109.0, 110.0, cadence.Due(True, False, 2.0)),
        (100.0, 107.0, 110.0, cadence.Due(True, True, 3.0)),
    ],
)
def test_steady_probes_each_kind_on_its_period(
    last_reports: float | None, last_etcd: float | None, now: float, expected: cadence.Due
) -> None:
    got = cadence.due(
        steady_now=True,
        last_reports=last_reports,
        last_etcd=last_etcd,
        now=now,
        interval=2.0,
        settings=SETTINGS,
    )
    assert got == expected


def test_negative_periods_are_refused() -> None:
    with pytest.raises(ValueError, match="etcd_interval must not be negative"):
        cadence.CadenceSettings(etcd_interval=-1.0)


def test_steady_periods_stretch_alike_to_stay_within_the_probe_budget() -> None:
    base = cadence.CadenceSettings(etcd_interval=3.0, report_interval=10.0, probes_per_second=400)
    assert cadence.within_budget(base, jobs=100, agents=4) == base  # 73 probes/s: no stretch
    stretched = cadence.within_budget(base, jobs=1000, agents=4)  # 733 probes/s
    factor = (1000 / 3 + 4000 / 10) / 400
    assert stretched.etcd_interval == pytest.approx(3.0 * factor)
    assert stretched.report_interval == pytest.approx(10.0 * factor)
    assert stretched.etcd_interval < 6.0  # a cut etcd still Stalled well within 15 s
    unbounded = cadence.CadenceSettings(probes_per_second=0)
    assert cadence.within_budget(unbounded, jobs=1000, agents=4) == unbounded
    env = {"ELASTICJOB_STEADY_PROBES_PER_SECOND": "250"}
    assert OperatorSettings.from_env(env).loop.cadence.probes_per_second == 250
