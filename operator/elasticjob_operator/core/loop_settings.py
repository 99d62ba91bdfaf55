"""How a job's loop paces itself: step intervals, probe patience, stall thresholds, policies."""

from __future__ import annotations

from dataclasses import dataclass, field

from . import cadence
from .netpol import PolicySettings
from .quarantine import QuarantineSettings
from .stall import StallSettings


@dataclass(frozen=True)
class LoopSettings:
    """How often a job is reconciled and how patient the probes are."""

    interval: float = 2.0
    """Seconds between steps of an active job (stall detection resolution)."""
    idle_interval: float = 10.0
    """Seconds between steps of a finished or suspended job."""
    probe_timeout: float = 1.0
    """Timeout of one health or etcd probe (counted from when it holds a ``ProbeGate`` slot)."""
    probe_wait: float = 0.25
    """How long a step waits for its probes' answers. A round of probes still out after that
    (an agent or etcd that does not answer holds it up to ``probe_timeout``, a busy operator's
    queue longer) ends in the background and its answers go into the next step; the step plans
    on with what it knew, so one silent pod never holds up a job's reconcile (its Events, its
    replacements) by the probe timeout. A late round wakes the job only when etcd did not
    answer (the outage clock starts at once); any other late answer waits for the job's next
    step, since waking for each would double the steps of an operator that is already late."""
    cadence: cadence.CadenceSettings = field(default_factory=cadence.CadenceSettings)
    """Probe periods of a steady job (``cadence.py``)."""
    stall: StallSettings = field(default_factory=StallSettings)
    etcd_image: str = ""
    """The managed etcd's image of jobs that set no ``spec.etcd.image`` (the chart's
    ``etcd.image``); empty: ``spec.EtcdSpec.image``."""
    policies: PolicySettings | None = None
    """Create the job's NetworkPolicies letting these peers in; ``None``: create none."""
    quarantine: QuarantineSettings = field(default_factory=QuarantineSettings)
    """When a node is avoided for the job's failures on it (``quarantine.py``)."""
