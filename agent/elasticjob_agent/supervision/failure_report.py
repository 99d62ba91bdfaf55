"""The I/O around ``root_cause``: read what a failed worker left, write the termination message."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from elasticjob_agent.protocol.failure import MAX_TAIL, FinalCounts, WorkerFailure
from elasticjob_agent.supervision.root_cause import (
    MAX_ERROR_FILE_BYTES,
    describe,
    termination_message,
)

logger = logging.getLogger(__name__)

TERMINATION_LOG = "/dev/termination-log"
"""Kubernetes' default ``terminationMessagePath``; ``ELASTICJOB_TERMINATION_LOG`` overrides it."""


def read_failure(
    error_file: Path,
    *,
    local_rank: int,
    status: int,
    seen_at: float,
    rank: int | None,
    node: str | None,
    pod: str | None,
    captured_tail: bytes | None = None,
) -> WorkerFailure:
    """The failure record of one worker: its error file, else its status and stderr tail
    (``stderr.log`` next to the error file, present with ``-r``/``-t``; else
    ``captured_tail``, what the agent kept of the worker's stderr pipe)."""
    logged = _read_tail(error_file.parent / "stderr.log", 4 * MAX_TAIL)
    return describe(
        local_rank=local_rank,
        status=status,
        seen_at=seen_at,
        rank=rank,
        node=node,
        pod=pod,
        error_file=_read_head(error_file, MAX_ERROR_FILE_BYTES + 1),
        stderr_tail=logged if logged else captured_tail,
        error_file_time=_mtime(error_file),
    )


def write_termination_message(
    failure: WorkerFailure | None,
    path: str | None = None,
    counts: FinalCounts | None = None,
    decision: Mapping[str, Any] | None = None,
    headline: str | None = None,
) -> bool:
    """Write the failure (and, on the agent's final exit, the final ``counts``) to the
    container's termination message file, if it is writable (outside Kubernetes it usually is
    not: nothing is written, nothing fails)."""
    target = path or os.environ.get("ELASTICJOB_TERMINATION_LOG") or TERMINATION_LOG
    try:
        with open(target, "wb") as out:
            out.write(termination_message(failure, counts, decision, headline))
    except OSError as exc:
        logger.debug("no termination message at %s: %s", target, exc)
        return False
    return True


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None


def _read_head(path: Path, limit: int) -> bytes | None:
    try:
        with open(path, "rb") as file:
            return file.read(limit)
    except OSError:
        return None


def _read_tail(path: Path, limit: int) -> bytes | None:
    try:
        with open(path, "rb") as file:
            size = file.seek(0, os.SEEK_END)
            file.seek(max(0, size - limit))
            return file.read(limit)
    except OSError:
        return None
