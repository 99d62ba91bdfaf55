"""The operator as the chart installs it, read from the chart's default values (pure).

``operator_scale_bench.py --as-installed`` runs the operator under these resources (a cgroup
with the chart's limits), with the chart's arguments and environment, and with its liveness
probe played by the bench, so that the scale figures are the installed operator's. This module
reads those defaults, counts what a kubelet would have restarted, and turns the measured peaks
into a sizing table.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from elasticjob_operator.core.checkpointing import parse_quantity

MIB = 2**20


class ChartValuesError(ValueError):
    """The chart's values lack what an installed operator is given (names the key)."""


def quantity(value: Any, key: str) -> Decimal:
    """A Kubernetes quantity (``512Mi``, ``100m``, ``1``) as a number; ``ChartValuesError``
    naming ``key`` otherwise."""
    number = parse_quantity(value)
    if number is None:
        raise ChartValuesError(f"{key}: {value!r} is not a Kubernetes quantity")
    return number


@dataclass(frozen=True)
class Probe:
    """A kubelet probe's timing (``livenessProbe`` of the chart's values)."""

    initial_delay: float
    period: float
    timeout: float
    failure_threshold: int


@dataclass(frozen=True)
class InstalledShape:
    """What the chart's defaults give the operator's container."""

    memory_request: int
    memory_limit: int
    """Bytes."""
    cpu_request: float
    cpu_limit: float
    """Cores."""
    liveness: Probe
    all_namespaces: bool
    """No ``watchNamespaces``: the operator watches every namespace (``--all-namespaces``)."""
    env: Mapping[str, str]
    """The chart's settings that change the operator's work (log level and format)."""


def _at(values: Mapping[str, Any], path: str) -> Any:
    node: Any = values
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            raise ChartValuesError(f"the chart's values have no {path}")
        node = node[part]
    return node


def shape_of(values: Mapping[str, Any]) -> InstalledShape:
    """The installed operator's container, from the chart's ``values.yaml`` (parsed)."""
    probe = _at(values, "livenessProbe")
    try:
        liveness = Probe(
            initial_delay=float(probe.get("initialDelaySeconds", 0)),
            period=float(probe.get("periodSeconds", 10)),
            timeout=float(probe.get("timeoutSeconds", 1)),
            failure_threshold=int(probe.get("failureThreshold", 3)),
        )
    except (TypeError, ValueError, AttributeError) as exc:
        raise ChartValuesError(f"livenessProbe: {exc}") from None
    return InstalledShape(
        memory_request=math.ceil(
            quantity(_at(values, "resources.requests.memory"), "resources.requests.memory")
        ),
        memory_limit=math.ceil(
            quantity(_at(values, "resources.limits.memory"), "resources.limits.memory")
        ),
        cpu_request=float(
            quantity(_at(values, "resources.requests.cpu"), "resources.requests.cpu")
        ),
        cpu_limit=float(quantity(_at(values, "resources.limits.cpu"), "resources.limits.cpu")),
        liveness=liveness,
        all_namespaces=not values.get("watchNamespaces"),
        env={
            "ELASTICJOB_LOG_LEVEL": str(_at(values, "operator.logLevel")),
            "ELASTICJOB_LOG_FORMAT": str(_at(values, "operator.logFormat")),
        },
    )


class LivenessCount:
    """The kubelet's verdicts on a liveness probe: after ``failure_threshold`` failures in a
    row the container is restarted (counted) and the count of failures starts again."""

    def __init__(self, probe: Probe) -> None:
        self.probe = probe
        self.in_a_row = 0
        self.most_in_a_row = 0
        self.failures = 0
        self.restarts = 0

    def answer(self, ok: bool) -> None:
        if ok:
            self.in_a_row = 0
            return
        self.failures += 1
        self.in_a_row += 1
        self.most_in_a_row = max(self.most_in_a_row, self.in_a_row)
        if self.in_a_row >= self.probe.failure_threshold:
            self.restarts += 1
            self.in_a_row = 0


def headroom(peak: float, limit: float) -> float:
    """The share of the limit left above the peak (0.3: the peak is 70% of the limit)."""
    return 1.0 - peak / limit if limit > 0 else math.nan


HEADROOM = 0.3
"""The share of the memory limit the sizing table leaves above the measured peak."""


@dataclass(frozen=True)
class Sizing:
    """One row of the sizing table: the resources for ``jobs`` jobs."""

    jobs: int
    peak_mib: float
    cpu_cores: float
    memory_request: str
    memory_limit: str
    cpu_request: str
    cpu_limit: str


def _mebibytes(value: float, step: int) -> str:
    """``value`` MiB rounded up to a multiple of ``step`` MiB, as a quantity (``Gi`` when whole)."""
    rounded = max(step, math.ceil(value / step) * step)
    return f"{rounded // 1024}Gi" if rounded % 1024 == 0 else f"{rounded}Mi"


def _millicores(cores: float, step: int) -> str:
    rounded = max(step, math.ceil(cores * 1000 / step) * step)
    return f"{rounded // 1000}" if rounded % 1000 == 0 else f"{rounded}m"


def sizing(measured: Sequence[tuple[int, float, float]]) -> list[Sizing]:
    """Resources per job count from ``(jobs, peak working set MiB, mean CPU cores)``: memory
    requested at the peak, limited so that ``HEADROOM`` of the limit stays above it; CPU
    requested at the mean and limited at twice it (bursts: a creation wave, a failover), never
    below one core."""
    rows = []
    for jobs, peak, cores in measured:
        rows.append(
            Sizing(
                jobs=jobs,
                peak_mib=peak,
                cpu_cores=cores,
                memory_request=_mebibytes(peak, 64),
                memory_limit=_mebibytes(peak / (1 - HEADROOM), 128),
                cpu_request=_millicores(cores, 50),
                cpu_limit=_millicores(max(1.0, 2 * cores), 500),
            )
        )
    return rows


def sizing_table(rows: Sequence[Sizing]) -> str:
    """The sizing table in Markdown, as docs/operator.md quotes it."""
    lines = [
        "| jobs (x 4 pods) | measured peak working set | measured CPU | requests | limits |",
        "| --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r.jobs} | {r.peak_mib:.0f} MiB | {r.cpu_cores:.2f} cores | cpu {r.cpu_request}, "
            f"memory {r.memory_request} | cpu {r.cpu_limit}, memory {r.memory_limit} |"
        )
    return "\n".join(lines)
