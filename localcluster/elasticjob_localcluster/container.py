"""One container of a pod on a virtual node: its runtime record, and the message its end leaves
behind as the kubelet keeps it."""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .podstatus import ContainerView, RunState, Termination

#: What the kubelet keeps of a container's termination message, and its default path.
TERMINATION_MESSAGE_BYTES = 4096
DEFAULT_TERMINATION_MESSAGE_PATH = "/dev/termination-log"
#: ``FallbackToLogsOnError``: the end of the log, as the kubelet takes it (2 KiB, 80 lines).
FALLBACK_LOG_BYTES = 2048
FALLBACK_LOG_LINES = 80


@dataclass
class Container:
    """The runtime record of one container (mutated only by its ``podworker.PodWorker``)."""

    spec: dict[str, Any]
    init: bool = False
    state: RunState = RunState.CREATING
    restart_count: int = 0
    ready: bool = False
    started_at: str = ""
    last: Termination | None = None
    message: str = ""
    proc: asyncio.subprocess.Process | None = None
    env: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return str(self.spec["name"])

    def view(self, container_id: str) -> ContainerView:
        return ContainerView(
            name=self.name,
            image=str(self.spec.get("image", "")),
            state=self.state,
            restart_count=self.restart_count,
            ready=self.ready,
            container_id=container_id,
            started_at=self.started_at,
            last=self.last,
            message=self.message,
        )


def termination_message(termination_log: Path, log_path: Path, code: int, policy: str) -> str:
    """The terminated state's message: what the container wrote to its termination message
    file (at most 4 KiB), else with ``FallbackToLogsOnError`` and a failure, its log's end."""
    try:
        with termination_log.open("rb") as file:
            message = file.read(TERMINATION_MESSAGE_BYTES).decode(errors="replace")
    except OSError:
        message = ""
    if message or code == 0 or policy != "FallbackToLogsOnError":
        return message
    try:
        with log_path.open("rb") as file:
            size = file.seek(0, os.SEEK_END)
            file.seek(max(0, size - FALLBACK_LOG_BYTES))
            tail = file.read().decode(errors="replace")
    except OSError:
        return ""
    return "\n".join(tail.splitlines()[-FALLBACK_LOG_LINES:])
