"""The ``torchrun.handlers`` entry point ``etcd-v3``.

torchrun loads this entry point while torch's rendezvous registry is being imported, calls the
object with no arguments and registers the returned creator; so this module imports nothing
heavy, and the creator imports the handler only when a rendezvous is actually made.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def create_handler(params: Any) -> Any:
    """``RendezvousParameters -> EtcdRendezvousHandler`` (``ValueError`` on a bad config)."""
    # Imported late: torch imports this module while its own rendezvous package initialises.
    from elasticjob_agent.rendezvous.config import RendezvousConfig  # noqa: PLC0415
    from elasticjob_agent.rendezvous.handler import EtcdRendezvousHandler  # noqa: PLC0415

    return EtcdRendezvousHandler(RendezvousConfig.from_parameters(params))


def handler_creator() -> Callable[[Any], Any]:
    """What torchrun calls: returns the creator of our handler."""
    return create_handler
