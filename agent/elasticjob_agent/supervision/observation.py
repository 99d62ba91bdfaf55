"""What the supervisor saw at one monitor tick, as values (pure): the input of ``decision``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from elasticjob_agent.timers.steps import StepProgress
from elasticjob_agent.timers.table import Expired


@dataclass(frozen=True)
class Membership:
    """What the rendezvous said at a membership check. Each answer costs an etcd read, so the
    monitor asks for the later ones only when the earlier ones leave the question open:
    ``round_state_lost`` only when a member is gone, ``holds_membership`` only when a member is
    gone and the round is still there (unread answers keep their defaults)."""

    waiting: int = 0
    """Nodes that want in (``num_nodes_waiting()``)."""
    members_alive: bool = True
    """Every member of the round still holds its key."""
    round_state_lost: bool = False
    """etcd no longer holds the completed round (it was recreated or restored empty)."""
    holds_membership: bool = True
    """This node's own key is still there (False: its lease lapsed while it ran)."""


@dataclass(frozen=True)
class ExitBarrier:
    """Whether a node of the round entered the exit barrier (its workers all exited 0)."""

    finished_rank: int | None
    """That node's group rank, or ``None`` (none did, or the barrier could not be read)."""


@dataclass(frozen=True)
class Tick:
    """One monitor tick's observations. A stopping agent observes nothing else (``stop``)."""

    stop_requested: bool = False
    """SIGTERM/SIGINT arrived."""
    expired: tuple[Expired, ...] = ()
    """Expiration timers past their deadline (``signal <= 0``: report only)."""
    steps: StepProgress | None = None
    """The group's step progress (``None``: no step yet this round)."""
    hang_timeout: float | None = None
    """The progress timeout in force (``None``: hang detection off)."""
    now: float = 0.0
    """Monotonic time of the observation (the hang rule's clock)."""
    exit_codes: Mapping[int, int | None] = field(default_factory=dict)
    """Local rank -> exit code, ``None`` while running."""
    membership: Membership | None = None
    """``None``: no membership check this tick (not due, the group is finishing, etcd is
    unreachable, or the check failed: etcd is only needed to re-form)."""
    barrier: ExitBarrier | None = None
    """``None``: not read (it is read only once the membership changed)."""

    @property
    def timer_kills(self) -> tuple[Expired, ...]:
        """The expired timers that ask for a signal: the agent kills those workers."""
        return tuple(t for t in self.expired if t.signal > 0)

    @property
    def failures(self) -> dict[int, int | None]:
        """Local rank -> non-zero exit code of the workers that failed."""
        return {lr: c for lr, c in self.exit_codes.items() if c not in (None, 0)}
