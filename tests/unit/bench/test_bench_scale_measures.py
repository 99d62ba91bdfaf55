"""The arithmetic of bench/operator_scale_bench.py (``bench/scale_measures.py``)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))

import scale_measures as sm

APISERVER = """\
# HELP apiserver_request_total Counter of apiserver requests
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="namespace",subresource="",verb="GET",version="v1"} 7
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="namespace",subresource="status",verb="PATCH",version="v1"} 3
apiserver_request_total{code="200",component="apiserver",dry_run="",group="elasticjob.dev",resource="elasticjobs",scope="namespace",subresource="status",verb="PATCH",version="v1alpha1"} 5
apiserver_request_total{code="200",component="",dry_run="",group="",resource="",scope="",subresource="/metrics",verb="GET",version=""} 99
apiserver_request_total_other 1
"""  # noqa: E501


def test_requests_by_verb_counts_resource_requests_only() -> None:
    assert sm.requests_by_verb(APISERVER) == {"GET": 7.0, "PATCH": 8.0}


def test_requests_of_one_subresource() -> None:
    assert sm.requests_of(APISERVER, "elasticjobs", "status", "PATCH") == 5.0
    assert sm.requests_of(APISERVER, "pods", "", "PATCH") == 0.0


HISTOGRAM = """\
h_bucket{le="0.1"} 50
h_bucket{le="0.5"} 90
h_bucket{le="1.0"} 100
h_bucket{le="+Inf"} 100
h_count 100
"""


@pytest.mark.parametrize(
    ("q", "expected"),
    [(0.5, 0.1), (0.25, 0.05), (0.7, 0.3), (0.95, 0.75), (1.0, 1.0)],
)
def test_histogram_quantile_interpolates_within_the_bucket(q: float, expected: float) -> None:
    assert sm.histogram_quantile(q, sm.histogram(HISTOGRAM, "h")) == pytest.approx(expected)


def test_histogram_quantile_beyond_the_last_bound_returns_that_bound() -> None:
    buckets = {0.1: 1.0, 1.0: 2.0, math.inf: 10.0}
    assert sm.histogram_quantile(0.95, buckets) == 1.0


def test_histogram_quantile_without_observations_is_nan() -> None:
    assert math.isnan(sm.histogram_quantile(0.5, {0.1: 0.0, math.inf: 0.0}))
    with pytest.raises(ValueError, match="outside"):
        sm.histogram_quantile(1.5, {})


def test_bucket_delta_is_the_window() -> None:
    before = {0.1: 10.0, math.inf: 20.0}
    after = {0.1: 15.0, math.inf: 40.0}
    assert sm.bucket_delta(after, before) == {0.1: 5.0, math.inf: 20.0}


def test_percentile_and_spread_and_sizes() -> None:
    assert sm.percentile([3.0, 1.0, 2.0], 0.5) == 2.0
    assert sm.percentile([0.0, 10.0], 0.95) == pytest.approx(9.5)
    assert math.isnan(sm.percentile([], 0.5))
    assert sm.spread(3, 0.0, 10.0) == [0.0, 5.0, 10.0]
    assert sm.spread(1, 0.0, 10.0) == [5.0]
    assert sm.spread(0, 0.0, 10.0) == []
    assert sm.sizes(1000) == [10, 100, 1000]
    assert sm.sizes(100) == [10, 100]
    assert sm.sizes(5) == [5]
    with pytest.raises(ValueError, match="at least 1"):
        sm.sizes(0)
