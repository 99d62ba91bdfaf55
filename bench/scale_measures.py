"""Pure arithmetic of ``operator_scale_bench.py``: Prometheus text, histogram quantiles,
percentiles, and the differences of two snapshots."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """Every sample of metric ``name`` in Prometheus text: (labels, value)."""
    found = []
    for line in text.splitlines():
        if not line.startswith(name):
            continue
        match = _SAMPLE.match(line)
        if match is None or match.group(1) != name:
            continue
        labels = dict(_LABEL.findall(match.group(2) or ""))
        found.append((labels, float(match.group(3))))
    return found


def requests_by_verb(text: str) -> dict[str, float]:
    """``apiserver_request_total`` summed by verb, resource requests only (not ``/metrics``)."""
    counts: dict[str, float] = {}
    for labels, value in samples(text, "apiserver_request_total"):
        if labels.get("resource"):
            verb = labels.get("verb", "?")
            counts[verb] = counts.get(verb, 0.0) + value
    return counts


def requests_of(text: str, resource: str, subresource: str, verb: str) -> float:
    """``apiserver_request_total`` of one resource, subresource and verb."""
    return sum(
        value
        for labels, value in samples(text, "apiserver_request_total")
        if labels.get("resource") == resource
        and labels.get("subresource", "") == subresource
        and labels.get("verb") == verb
    )


def histogram(text: str, name: str) -> dict[float, float]:
    """Cumulative bucket counts of histogram ``name`` by upper bound (``+Inf`` included)."""
    return {
        float(labels["le"]): value
        for labels, value in samples(text, f"{name}_bucket")
        if "le" in labels
    }


def bucket_delta(after: Mapping[float, float], before: Mapping[float, float]) -> dict[float, float]:
    return {le: after[le] - before.get(le, 0.0) for le in after}


def histogram_quantile(q: float, buckets: Mapping[float, float]) -> float:
    """Prometheus' ``histogram_quantile``: linear interpolation within the bucket holding the
    quantile; ``nan`` without observations. Above the highest finite bound it returns that
    bound (the true value is only known to be larger)."""
    if not 0 <= q <= 1:
        raise ValueError(f"quantile {q} outside [0, 1]")
    bounds = sorted(buckets)
    if not bounds or buckets[bounds[-1]] <= 0:
        return math.nan
    total = buckets[bounds[-1]]
    rank = q * total
    lower_bound, lower_count = 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank:
            if math.isinf(bound):
                return lower_bound
            if count == lower_count:
                return bound
            return lower_bound + (bound - lower_bound) * (rank - lower_count) / (
                count - lower_count
            )
        lower_bound, lower_count = bound, count
    return bounds[-1]


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values`` by linear interpolation; ``nan`` when empty."""
    if not values:
        return math.nan
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def minus(a: Mapping[str, float], b: Mapping[str, float]) -> dict[str, float]:
    """``a - b`` key by key (keys of either)."""
    return {k: a.get(k, 0.0) - b.get(k, 0.0) for k in set(a) | set(b)}


def spread(count: int, start: float, end: float) -> list[float]:
    """``count`` instants evenly spread over ``[start, end]`` (the middle one when 1)."""
    if count <= 0:
        return []
    if count == 1:
        return [(start + end) / 2]
    step = (end - start) / (count - 1)
    return [start + i * step for i in range(count)]


def sizes(jobs: int) -> list[int]:
    """The job counts measured on the way to ``jobs``: the powers of ten below it, then it."""
    if jobs < 1:
        raise ValueError(f"--jobs must be at least 1, got {jobs}")
    out = [10**k for k in range(1, 7) if 10**k < jobs]
    return [*out, jobs]


def ratio(a: float, b: float) -> float:
    return a / b if b else math.nan
