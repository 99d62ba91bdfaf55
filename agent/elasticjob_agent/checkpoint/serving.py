"""The agent's side of checkpoints: start the node's checkpoint service when the environment
asks for it, and tell the workers where it is."""

from __future__ import annotations

import logging
import socket
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

from elasticjob_agent.checkpoint.config import SOCKET_ENV, CheckpointSettings
from elasticjob_agent.checkpoint.directory import HolderDirectory
from elasticjob_agent.checkpoint.node import CheckpointNode
from elasticjob_agent.checkpoint.service import CheckpointService
from elasticjob_agent.etcd.session import EtcdSession
from elasticjob_agent.protocol.keys import JobKeys

logger = logging.getLogger(__name__)


def scope(keys: JobKeys, node: str) -> str:
    """The agent's own directory under the memory directory: the job's keys and the node."""
    raw = f"{keys.prefix.strip('/')}-{keys.run_id}-{node}"
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in raw)[-200:]


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
    return {SOCKET_ENV: service.path}
