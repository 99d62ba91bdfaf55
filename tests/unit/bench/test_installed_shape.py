"""The operator as the chart installs it: the chart's defaults read, the kubelet's liveness
verdicts counted, and the sizing table derived from measured peaks."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
import yaml
from installed_shape import (
    ChartValuesError,
    LivenessCount,
    Probe,
    headroom,
    quantity,
    shape_of,
    sizing,
    sizing_table,
)

from tests.support.paths import REPO

VALUES = REPO / "charts" / "elasticjob-operator" / "values.yaml"


def _values(**resources: Any) -> dict[str, Any]:
    return {
        "resources": resources
        or {
            "requests": {"cpu": "100m", "memory": "128Mi"},
            "limits": {"cpu": "1", "memory": "1Gi"},
        },
        "livenessProbe": {"periodSeconds": 10, "timeoutSeconds": 5, "failureThreshold": 6},
        "watchNamespaces": [],
        "operator": {"logLevel": "info", "logFormat": "text"},
    }


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("512Mi", 512 * 2**20),
        ("1Gi", 2**30),
        ("100m", Decimal("0.1")),
        ("1", 1),
        ("1.5", Decimal("1.5")),
    ],
)
def test_quantities_read_as_kubernetes_does(text: str, value: Decimal) -> None:
    assert quantity(text, "k") == value


def test_a_bad_quantity_names_its_key() -> None:
    with pytest.raises(ChartValuesError, match=r"resources.limits.memory: '1 GB'"):
        shape_of(
            _values(requests={"cpu": "1", "memory": "1Gi"}, limits={"cpu": "1", "memory": "1 GB"})
        )


def test_a_missing_limit_names_its_key() -> None:
    with pytest.raises(ChartValuesError, match=r"resources.limits.cpu"):
        shape_of(_values(requests={"cpu": "1", "memory": "1Gi"}, limits={"memory": "1Gi"}))


def test_the_charts_own_defaults_are_read() -> None:
    values = yaml.safe_load(VALUES.read_text())
    got = shape_of(values)
    limits = values["resources"]["limits"]
    assert got.memory_limit == quantity(limits["memory"], "m")
    assert got.cpu_limit == float(quantity(limits["cpu"], "c"))
    assert got.liveness.failure_threshold == values["livenessProbe"]["failureThreshold"]
    assert got.all_namespaces is not bool(values["watchNamespaces"])
    assert got.env["ELASTICJOB_LOG_FORMAT"] == values["operator"]["logFormat"]


def test_a_kubelet_restarts_after_failure_threshold_failures_in_a_row_only() -> None:
    count = LivenessCount(Probe(0, 10, 5, 3))
    for ok in (False, False, True, False, False):  # never three in a row
        count.answer(ok)
    assert (count.restarts, count.failures, count.most_in_a_row) == (0, 4, 2)
    count.answer(False)  # the third in a row
    assert (count.restarts, count.in_a_row) == (1, 0)


def test_headroom_is_the_share_of_the_limit_above_the_peak() -> None:
    assert headroom(700, 1000) == pytest.approx(0.3)


def test_sizing_leaves_the_headroom_and_rounds_up() -> None:
    small, large = sizing([(10, 120.0, 0.02), (1000, 670.0, 0.6)])
    assert (small.memory_request, small.memory_limit) == ("128Mi", "256Mi")
    assert (small.cpu_request, small.cpu_limit) == ("50m", "1")
    # 670 / 0.7 = 957 MiB: the limit rounds up to 1Gi, 34.6% above the peak.
    assert (large.memory_request, large.memory_limit) == ("704Mi", "1Gi")
    assert (large.cpu_request, large.cpu_limit) == ("600m", "1500m")
    assert headroom(670, 1024) >= 0.3
    table = sizing_table([small, large]).splitlines()
    assert table[2] == "| 10 | 120 MiB | 0.02 cores | cpu 50m, memory 128Mi | cpu 1, memory 256Mi |"
    assert len(table) == 4
