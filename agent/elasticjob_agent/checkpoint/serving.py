"""The agent's side of checkpoints: start the node's checkpoint service when the environment
asks for it, and tell the workers where it is."""

from __future__ import annotations

import logging
import socket
from contextlib import ExitStack
from pathlib import Path

from elasticjob_agent.checkpoint.config import SOCKET_ENV, CheckpointSettings
from elasticjob_agent.checkpoint.directory import HolderDirectory
from elasticjob_agent.checkpoint.node import CheckpointNode
from elasticjob_agent.checkpoint.service import CheckpointService
from elasticjob_agent.etcd.session import EtcdSession
from elasticjob_agent.protocol.keys import JobKeys

logger = logging.getLogger(__name__)


def start_checkpoints(
    settings: CheckpointSettings,
    stack: ExitStack,
    *,
    session: EtcdSession | None,
    keys: JobKeys,
    node: str,
    local_addr: str | None,
    work_dir: Path,
) -> dict[str, str]:
    """Start the node's checkpoint service (closed by ``stack``); return the variables the
    workers get. Without etcd (``c10d``) there is no directory of peers: memory and disk."""
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
    return {SOCKET_ENV: service.path}
