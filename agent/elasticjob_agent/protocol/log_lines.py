"""The keys every JSON log line of the agent and the operator starts with (pure)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any


def base_entry(record: logging.LogRecord) -> dict[str, Any]:
    """``time`` (ISO 8601 UTC, milliseconds), ``level``, ``logger`` and ``message``."""
    return {
        "time": datetime.fromtimestamp(record.created, UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z"),
        "level": record.levelname.lower(),
        "logger": record.name,
        "message": record.getMessage(),
    }
