"""``SupervisedHandler``: the rendezvous handler as the supervisor drives it (pure, no torch).

torch's ``RendezvousHandler`` calls the supervisor makes, plus the features of our etcd-v3
handler that it reads every round. A handler without a feature keeps its default, which means
"not supported": torch's c10d handler (``C10dHandler``) has a round but does not say which, has
no spares and no lease of its own to lose.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any


class SupervisedHandler(ABC):
    """What the supervisor calls on a rendezvous handler. Every handler it can get subclasses
    this (``EtcdRendezvousHandler``, ``C10dHandler``); errors are ours (``RendezvousError``)."""

    # --- torch's RendezvousHandler ---------------------------------------------------------

    @abstractmethod
    def next_rendezvous(self) -> Any:
        """Block until a round completes with this node in it: a ``RendezvousInfo``."""

    @abstractmethod
    def num_nodes_waiting(self) -> int:
        """Nodes that want in; running agents re-rendezvous when > 0."""

    @abstractmethod
    def set_closed(self) -> None:
        """Close the rendezvous for every node (final)."""

    @abstractmethod
    def get_run_id(self) -> str: ...

    @abstractmethod
    def shutdown(self) -> bool:
        """Leave the rendezvous and release the connection; True if it left cleanly."""

    # --- optional features (defaults: not supported) ---------------------------------------

    @property
    def round(self) -> int | None:
        """The last round this node completed; ``None`` before the first or when the handler
        does not number its rounds (the supervisor then counts its own attempts)."""
        return None

    def standby_since(self) -> float | None:
        """While ``next_rendezvous()`` blocks: since when this node stands by as a spare."""
        return None

    def members_alive(self) -> bool:
        """False once a member of the last completed round is gone."""
        return True

    def holds_membership(self) -> bool:
        """False when this node's own membership lapsed (its lease) while it ran."""
        return True

    def round_state_lost(self) -> bool:
        """True when the store lost the last completed round (etcd recreated empty)."""
        return False

    def leave(self) -> None:
        """Leave at once (SIGTERM), so the others re-form without waiting for a timeout."""
        return None  # nothing to leave early: the others notice when the node is gone
