"""Dynamic rendezvous on etcd v3: torch's semantics, watches instead of polls, O(1) conflicts.

Public API: the errors, ``RendezvousConfig``, ``EtcdRendezvousHandler``, ``EtcdStore`` and
``EtcdV3RendezvousBackend`` (see docs/rendezvous.md), each imported on first use: torch imports
our ``torchrun_plugin`` (and so this package) while its own rendezvous package is still
initialising, which ``elasticjob_agent.errors`` may be the one importing.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from elasticjob_agent.errors import (
        RendezvousClosedError,
        RendezvousConnectionError,
        RendezvousError,
        RendezvousStateError,
        RendezvousTimeoutError,
    )
    from elasticjob_agent.rendezvous.backend import EtcdV3RendezvousBackend
    from elasticjob_agent.rendezvous.config import RendezvousConfig
    from elasticjob_agent.rendezvous.handler import EtcdRendezvousHandler
    from elasticjob_agent.rendezvous.store import EtcdStore

_LAZY = {
    "RendezvousClosedError": "elasticjob_agent.errors",
    "RendezvousConnectionError": "elasticjob_agent.errors",
    "RendezvousError": "elasticjob_agent.errors",
    "RendezvousStateError": "elasticjob_agent.errors",
    "RendezvousTimeoutError": "elasticjob_agent.errors",
    "EtcdRendezvousHandler": "elasticjob_agent.rendezvous.handler",
    "EtcdStore": "elasticjob_agent.rendezvous.store",
    "EtcdV3RendezvousBackend": "elasticjob_agent.rendezvous.backend",
    "RendezvousConfig": "elasticjob_agent.rendezvous.config",
}

__all__ = [
    "EtcdRendezvousHandler",
    "EtcdStore",
    "EtcdV3RendezvousBackend",
    "RendezvousClosedError",
    "RendezvousConfig",
    "RendezvousConnectionError",
    "RendezvousError",
    "RendezvousStateError",
    "RendezvousTimeoutError",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
