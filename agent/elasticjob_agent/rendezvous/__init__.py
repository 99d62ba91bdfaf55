"""Dynamic rendezvous on etcd v3: torch's semantics, watches instead of polls, O(1) conflicts.

See docs/rendezvous.md. The errors come first: ``elasticjob_agent.etcd`` imports them.
"""

from elasticjob_agent.rendezvous.errors import (
    RendezvousClosedError,
    RendezvousConnectionError,
    RendezvousError,
    RendezvousStateError,
    RendezvousTimeoutError,
)

__all__ = [
    "RendezvousClosedError",
    "RendezvousConnectionError",
    "RendezvousError",
    "RendezvousStateError",
    "RendezvousTimeoutError",
]
