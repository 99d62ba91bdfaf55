"""What one planning step decides: the actions, the Events and the resulting ``Plan``; the
``Draft`` every step of ``plan`` fills in.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .. import seeding
from ..status import JobStatus


@dataclass(frozen=True)
class CreateObject:
    manifest: Mapping[str, Any]


@dataclass(frozen=True)
class DeletePod:
    name: str
    force: bool = False
    """Grace period 0: the pod's node is lost, so no kubelet will ever confirm a graceful stop."""


@dataclass(frozen=True)
class MarkJoined:
    pod: str
    round: int


@dataclass(frozen=True)
class MarkStoodBy:
    """Its agent stood by as a hot spare: its loss is never a restart (``spares.py``)."""

    pod: str


@dataclass(frozen=True)
class WriteSeed:
    """Write the restart seed into a recreated etcd, then record ``seededGeneration``."""

    endpoint: str
    keys: seeding.SeedKeys
    seed: Mapping[str, int]
    generation: int


@dataclass(frozen=True)
class DeleteJob:
    """``ttlSecondsAfterFinished`` elapsed."""


@dataclass(frozen=True)
class CreatePolicies:
    """Create the job's NetworkPolicies (``netpol.py``), before anything else of the step."""

    manifests: tuple[Mapping[str, Any], ...]


@dataclass(frozen=True)
class CreateEtcdTlsSecret:
    """Create the managed etcd's certificates Secret. The executor generates the certificates:
    their keys are random, so making them is no part of a pure plan."""


@dataclass(frozen=True)
class TaintNode:
    """Taint ``node`` as bad (``quarantine.TAINT_KEY``): the admin opted in
    (``QuarantineSettings.taint``)."""

    node: str


@dataclass(frozen=True)
class Event:
    type: str
    """``Normal`` or ``Warning``."""
    reason: str
    message: str


Action = (
    CreatePolicies
    | CreateEtcdTlsSecret
    | CreateObject
    | DeletePod
    | MarkJoined
    | MarkStoodBy
    | WriteSeed
    | DeleteJob
    | TaintNode
)


@dataclass(frozen=True)
class Plan:
    status: JobStatus
    actions: tuple[Action, ...] = ()
    events: tuple[Event, ...] = ()
    commit_first: bool = False
    """Write ``status`` before running ``actions`` (it names objects they create)."""
    new_stall: str | None = None
    """Reason of a stall that started in this step (for the stalls counter metric)."""
    refused_evidence: tuple[str, ...] = ()
    """Why each piece of root-cause evidence refused in this step was (``root_cause.vet``; for
    the bad-evidence counter metric)."""


@dataclass
class Draft:
    """Mutable scratchpad of one planning step; only ``plan`` sees it."""

    status: JobStatus
    actions: list[Action] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    commit_first: bool = False
    new_stall: str | None = None
    refused_evidence: list[str] = field(default_factory=list)

    def event(self, type_: str, reason: str, message: str) -> None:
        self.events.append(Event(type_, reason, message))

    def freeze(self) -> Plan:
        return Plan(
            self.status,
            tuple(self.actions),
            tuple(self.events),
            self.commit_first,
            self.new_stall,
            tuple(self.refused_evidence),
        )
