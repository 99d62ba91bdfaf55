"""How the operator's log lines look: ``text`` for people, or ``json`` for log stores.

JSON: one object a line with ``time`` (UTC, ISO 8601), ``level``, ``logger``, ``message``, and
where known the job's ``namespace`` and ``job`` (from kopf's object logger, which the job daemon
logs through, or from ``extra={"namespace": ..., "job": ...}``), and ``exception`` when one is
attached. Nothing else is added, so a line's keys are stable for queries.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import IO

from elasticjob_agent.protocol.log_lines import base_entry

LOG_FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_JOB_KIND = "ElasticJob"


class JsonFormatter(logging.Formatter):
    """One JSON object per record (see the module's docstring for its keys)."""

    def format(self, record: logging.LogRecord) -> str:
        entry = base_entry(record)
        entry.update(_job_of(record))
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str, ensure_ascii=False)


def _job_of(record: logging.LogRecord) -> dict[str, str]:
    """The job a record is about: ``extra`` keys first, then kopf's object reference."""
    found: dict[str, str] = {}
    ref = getattr(record, "k8s_ref", None)
    if isinstance(ref, Mapping):
        if ref.get("namespace"):
            found["namespace"] = str(ref["namespace"])
        if ref.get("kind") == _JOB_KIND and ref.get("name"):
            found["job"] = str(ref["name"])
    for key in ("namespace", "job"):
        value = getattr(record, key, None)
        if isinstance(value, str) and value:
            found[key] = value
    return found


def configure(level: str, log_format: str, stream: IO[str] | None = None) -> None:
    """Send every logger's records to ``stream`` (stderr) at ``level``, as ``log_format``
    (one of ``LOG_FORMATS``; anything else raises ``ValueError``)."""
    if log_format not in LOG_FORMATS:
        raise ValueError(f"log format must be one of {', '.join(LOG_FORMATS)}, got {log_format!r}")
    handler = logging.StreamHandler(stream)
    handler.setFormatter(
        JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT)
    )
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(getattr(logging, level.upper()))
