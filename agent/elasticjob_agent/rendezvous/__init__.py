"""Dynamic rendezvous on etcd v3: torch's semantics, watches instead of polls, O(1) conflicts.

Public API: the errors, ``RendezvousConfig``, ``EtcdRendezvousHandler``, ``EtcdStore`` and
``EtcdV3RendezvousBackend`` (see docs/rendezvous.md). The errors (``elasticjob_agent.errors``)
are imported eagerly; the rest on first use, because torch imports our ``torchrun_plugin`` while
its own rendezvous package is still initialising.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from elasticjob_agent.errors import (
    RendezvousClosedError,
    RendezvousConnectionError,
    RendezvousError,
    RendezvousStateError,
    RendezvousTimeoutError,
)

if TYPE_CHECKING:
    from elasticjob_agent.rendezvous.backend import EtcdV3RendezvousBackend
    from elasticjob_agent.rendezvous.config import RendezvousConfig
    from elasticjob_agent.rendezvous.handler import EtcdRendezvousHandler
    from elasticjob_agent.rendezvous.store import EtcdStore

_LAZY = {
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
