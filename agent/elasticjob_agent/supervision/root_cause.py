"""Why a worker failed, from what it left behind: pure, bounded, never raises on bad input.

Sources, best first: the error file torch's ``@record`` writes (``TORCHELASTIC_ERROR_FILE``:
``{"message": {"message": "Type: text", "extraInfo": {"py_callstack": ..., "timestamp": ...}}}``),
else the exit status (a negative status is the signal that ended the process) and the tail of
the worker's stderr log. The worker is untrusted here only in the sense that its output is
arbitrary: huge, malformed or of the wrong types, it yields what can be read and no more.
"""

from __future__ import annotations

import json
import re
import signal
from dataclasses import dataclass

from elasticjob_agent.protocol.failure import (
    MAX_FRAME,
    MAX_MESSAGE,
    MAX_NAME,
    MAX_TAIL,
    MAX_TAIL_LINES,
    MAX_TERMINATION_MESSAGE,
    MAX_TYPE,
    WorkerFailure,
    cap,
    termination_message,
)

__all__ = ["MAX_TERMINATION_MESSAGE", "termination_message"]  # their home: protocol.failure

MAX_ERROR_FILE_BYTES = 256 * 1024
"""Longest error file read (a real one is a traceback: a few KiB)."""

_FRAME = re.compile(
    r'^\s*File "(?P<file>[^"]{1,1000})", line (?P<line>\d{1,9}), in (?P<fn>\S{1,200})'
)
_TYPE = re.compile(r"^[A-Za-z_][\w.]{0,200}$")


@dataclass(frozen=True)
class ErrorFileInfo:
    exception_type: str | None
    message: str | None
    frame: str | None
    timestamp: float | None


def parse_error_file(raw: bytes) -> ErrorFileInfo | None:
    """The exception in a torch ``@record`` error file, or ``None`` if it holds none we can read.

    Reads at most ``MAX_ERROR_FILE_BYTES``; every string in the result is capped.
    """
    if not raw or len(raw) > MAX_ERROR_FILE_BYTES:
        return None
    try:
        data = json.loads(raw.decode("utf-8", errors="replace"))
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    outer = data.get("message")
    extra: object = None
    if isinstance(outer, dict):
        text = outer.get("message")
        extra = outer.get("extraInfo")
    else:
        text = outer
    if not isinstance(text, str) or not text.strip():
        return None
    exc_type, message = _split_message(text.strip())
    callstack = extra.get("py_callstack") if isinstance(extra, dict) else None
    stamp = extra.get("timestamp") if isinstance(extra, dict) else None
    return ErrorFileInfo(
        exception_type=cap(exc_type, MAX_TYPE),
        message=cap(message, MAX_MESSAGE),
        frame=last_frame(callstack) if isinstance(callstack, str) else None,
        timestamp=_timestamp(stamp),
    )


def last_frame(traceback_text: str) -> str | None:
    """``file:line in function`` of the innermost frame of a Python traceback, capped."""
    found: str | None = None
    for line in traceback_text[-MAX_ERROR_FILE_BYTES:].splitlines():
        match = _FRAME.match(line)
        if match:
            found = f"{match['file']}:{match['line']} in {match['fn']}"
    return cap(found, MAX_FRAME)


def signal_name(status: int) -> str | None:
    """The signal's name for a negative ``Popen.returncode`` (or a shell-style 128+N status)."""
    number = -status if status < 0 else status - 128 if 128 < status < 128 + 65 else None
    if number is None:
        return None
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def output_tail(raw: bytes, limit: int = MAX_TAIL, lines: int = MAX_TAIL_LINES) -> str | None:
    """The last ``lines`` lines of a worker's output, at most ``limit`` characters, whole
    lines first."""
    text = raw[-4 * limit :].decode("utf-8", errors="replace").strip()
    if not text:
        return None
    text = "\n".join(text.splitlines()[-lines:])
    if len(text) > limit:
        text = text[-limit:]
        newline = text.find("\n")
        if 0 <= newline < len(text) - 1:
            text = text[newline + 1 :]
    return text


def describe(
    *,
    local_rank: int,
    status: int,
    seen_at: float,
    rank: int | None,
    node: str | None,
    pod: str | None,
    error_file: bytes | None,
    stderr_tail: bytes | None,
    error_file_time: float | None = None,
) -> WorkerFailure:
    """The failure record of one worker that ended with ``status`` (``Popen.returncode``).

    ``time`` is when the error was recorded: ``error_file_time`` (the file's modification time,
    precise), else the error file's own timestamp (whole seconds), else ``seen_at``."""
    info = parse_error_file(error_file) if error_file else None
    sig = signal_name(status) if status < 0 else None
    return WorkerFailure(
        local_rank=local_rank,
        time=_recorded_at(info, error_file_time, seen_at),
        rank=rank,
        node=cap(node, MAX_NAME),
        pod=cap(pod, MAX_NAME),
        exit_code=None if sig else status,
        signal=sig,
        exception_type=info.exception_type if info else None,
        message=info.message if info else None,
        frame=info.frame if info else None,
        output_tail=None if info or stderr_tail is None else output_tail(stderr_tail),
    )


def first_failure(failures: list[WorkerFailure]) -> WorkerFailure:
    """The root cause among the failures seen at once: causes before consequences (a collective
    that lost its peer), then the earliest, then the lowest local rank."""
    return min(failures, key=lambda f: (f.is_consequence(), f.time, f.local_rank))


def _recorded_at(info: ErrorFileInfo | None, file_time: float | None, seen_at: float) -> float:
    if info is None:
        return seen_at
    if file_time is not None and 0 <= file_time < 2**40:
        return file_time
    return info.timestamp if info.timestamp is not None else seen_at


def _split_message(text: str) -> tuple[str | None, str | None]:
    """``"ValueError: boom"`` -> ``("ValueError", "boom")``; no recognisable type -> message."""
    head, sep, rest = text.partition(": ")
    if sep and _TYPE.match(head):
        return head, rest.strip() or None
    if _TYPE.match(text):
        return text, None
    return None, text


def _timestamp(value: object) -> float | None:
    if isinstance(value, bool):
        return None
    try:
        number = float(value) if isinstance(value, str | int | float) else None
    except ValueError:
        return None
    if number is None or not 0 <= number < 2**40:
        return None
    return number
