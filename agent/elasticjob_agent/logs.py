"""One log line per lifecycle event, always with run id, round, node, rank and world size."""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass, replace

_FORMAT = "%(asctime)s %(levelname)s elasticjob-agent %(message)s"


def configure(level: int = logging.INFO) -> None:
    """Agent logs go to stderr, like torchrun's."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)


@dataclass(frozen=True)
class EventContext:
    run_id: str
    node: str
    round: int | None = None
    rank: int | None = None
    world_size: int | None = None

    def with_round(
        self, round_: int | None, rank: int | None, world_size: int | None
    ) -> EventContext:
        return replace(self, round=round_, rank=rank, world_size=world_size)


def format_event(ctx: EventContext, event: str, fields: dict[str, object]) -> str:
    """``event=<name> run_id=.. round=.. node=.. rank=.. world_size=.. k=v ...`` (pure)."""
    parts = [
        f"event={event}",
        f"run_id={ctx.run_id}",
        f"round={'-' if ctx.round is None else ctx.round}",
        f"node={ctx.node}",
        f"rank={'-' if ctx.rank is None else ctx.rank}",
        f"world_size={'-' if ctx.world_size is None else ctx.world_size}",
    ]
    parts.extend(f"{key}={value}" for key, value in fields.items())
    return " ".join(parts)


class EventLog:
    def __init__(self, logger: logging.Logger, ctx: EventContext) -> None:
        self._logger = logger
        self.ctx = ctx

    def info(self, event: str, **fields: object) -> None:
        self._logger.info("%s", format_event(self.ctx, event, fields))

    def warning(self, event: str, **fields: object) -> None:
        self._logger.warning("%s", format_event(self.ctx, event, fields))

    def error(self, event: str, **fields: object) -> None:
        self._logger.error("%s", format_event(self.ctx, event, fields))
