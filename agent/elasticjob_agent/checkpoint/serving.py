"""The agent's side of checkpoints: start the node's checkpoint service when the environment
asks for it, tell the workers where it is, and let the health report read what it kept."""

from __future__ import annotations

import logging
import socket
from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path

from elasticjob_agent.checkpoint.config import SOCKET_ENV, CheckpointSettings
from elasticjob_agent.checkpoint.directory import HolderDirectory
from elasticjob_agent.checkpoint.node import CheckpointNode
from elasticjob_agent.checkpoint.service import CheckpointService
from elasticjob_agent.etcd.session import EtcdSession
from elasticjob_agent.protocol.checkpoint import CheckpointFacts
from elasticjob_agent.protocol.keys import JobKeys

logger = logging.getLogger(__name__)


def scope(keys: JobKeys, node: str) -> str:
    """The agent's own directory under the memory directory: the job's keys and the node."""
    raw = f"{keys.prefix.strip('/')}-{keys.run_id}-{node}"
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in raw)[-200:]


class NodeView:
    """A read-only view of a ``CheckpointNode`` for the health report (``AgentStatus``)."""

    def __init__(self, node: CheckpointNode) -> None:
        self._node = node

    def facts(self) -> CheckpointFacts:
        """What the node holds and kept now (cheap: no I/O, no etcd)."""
        held = self._node.memory.held()
        return (
            max((s.step for s in held), default=None),
            self._node.last_restore,
            self._node.restore_failure,
        )


@dataclass(frozen=True)
class ServedCheckpoints:
    env: Mapping[str, str]
    """The variables the workers get."""
    view: NodeView
    """What the node kept, for the health report."""


def start_checkpoints(
    settings: CheckpointSettings,
    stack: ExitStack,
    *,
    session: EtcdSession | None,
    keys: JobKeys,
    node: str,
    local_addr: str | None,
    work_dir: Path,
) -> ServedCheckpoints:
    """Start the node's checkpoint service (closed by ``stack``); return the variables the
    workers get and a view of the node. Without etcd (``c10d``) there is no directory of
    peers: memory and disk."""
    # One directory per job and node: agents that share a host's memory (hostIPC pods, the
    # local cluster's emulated nodes) never see each other's shards.
    settings = replace(settings, directory=str(Path(settings.directory) / scope(keys, node)))
    directory = HolderDirectory(session, keys, node) if session is not None else None
    if directory is None and settings.tls is not None:
        logger.warning("checkpoint: no etcd to find peers (c10d rendezvous): memory and disk only")
    checkpoint_node = CheckpointNode(
        settings,
        node,
        directory=directory,
        endpoint=settings.addr or local_addr or socket.getfqdn(),
        bind_host=settings.addr or "0.0.0.0",
    )
    stack.callback(checkpoint_node.close)
    service = CheckpointService(checkpoint_node, str(work_dir / "checkpoint.sock"))
    stack.callback(service.close)
    logger.info(
        "checkpoint service: memory %s (limit %d bytes, %d steps), peers at %s, persist %s",
        settings.directory,
        settings.memory_limit,
        settings.keep,
        checkpoint_node.endpoint or "(none)",
        settings.persist_dir or "(none)",
    )
    return ServedCheckpoints({SOCKET_ENV: service.path}, NodeView(checkpoint_node))
