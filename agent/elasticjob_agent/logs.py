"""One log line per lifecycle event, always with run id, round, node, rank and world size.

``--log-format json`` writes each of the agent's own records (never the workers' output) as one
JSON object a line: ``time`` (UTC, ISO 8601), ``level``, ``logger``, ``message``, and, on an
``EventLog`` line, ``run_id``, ``round``, ``node`` and ``rank`` when known; ``exc`` when an
exception is attached. ``text`` (the default) is the format the agent has always written.
"""

from __future__ import annotations

import json
import logging
import sys
from dataclasses import dataclass, replace
from typing import IO

from elasticjob_agent.protocol.defaults import LOG_FORMAT, LOG_FORMATS
from elasticjob_agent.protocol.log_lines import base_entry

_FORMAT = "%(asctime)s %(levelname)s elasticjob-agent %(message)s"
CONTEXT_FIELDS = ("run_id", "round", "node", "rank")
"""The record attributes (``extra``) a JSON line carries when a record has them."""


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line (see the module's docstring for its keys)."""

    def format(self, record: logging.LogRecord) -> str:
        entry = base_entry(record)
        for key in CONTEXT_FIELDS:
            value = getattr(record, key, None)
            if value is not None:
                entry[key] = value
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        # json.dumps escapes newlines and quotes, so a record is always exactly one line.
        return json.dumps(entry, default=str, ensure_ascii=False)


def configure(
    level: int = logging.INFO, log_format: str = LOG_FORMAT, stream: IO[str] | None = None
) -> None:
    """Agent logs go to ``stream`` (stderr), like torchrun's, as ``log_format`` (one of
    ``LOG_FORMATS``; anything else raises ``ValueError``)."""
    if log_format not in LOG_FORMATS:
        raise ValueError(f"log format must be one of {', '.join(LOG_FORMATS)}, got {log_format!r}")
    handler = logging.StreamHandler(sys.stderr if stream is None else stream)
    handler.setFormatter(JsonFormatter() if log_format == "json" else logging.Formatter(_FORMAT))
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


def context_extra(ctx: EventContext) -> dict[str, object]:
    """``ctx`` as a record's ``extra``: what a JSON line shows as its context fields (pure)."""
    return {"run_id": ctx.run_id, "round": ctx.round, "node": ctx.node, "rank": ctx.rank}


class EventLog:
    def __init__(self, logger: logging.Logger, ctx: EventContext) -> None:
        self._logger = logger
        self.ctx = ctx

    def info(self, event: str, **fields: object) -> None:
        self._logger.info(
            "%s", format_event(self.ctx, event, fields), extra=context_extra(self.ctx)
        )

    def warning(self, event: str, **fields: object) -> None:
        self._logger.warning(
            "%s", format_event(self.ctx, event, fields), extra=context_extra(self.ctx)
        )

    def error(self, event: str, **fields: object) -> None:
        self._logger.error(
            "%s", format_event(self.ctx, event, fields), extra=context_extra(self.ctx)
        )
