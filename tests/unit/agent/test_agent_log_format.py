"""``--log-format``: the flag and its variable, and the JSON lines of the agent's own records."""

from __future__ import annotations

import io
import json
import logging
import sys
from collections.abc import Iterator

import pytest
from elasticjob_agent.args import UsageError, parse_args
from elasticjob_agent.logs import EventContext, EventLog, JsonFormatter, configure

_ARGV = ["--standalone", "train.py"]


@pytest.fixture
def root_logger() -> Iterator[None]:
    """``configure`` replaces the root logger's handlers: put pytest's back afterwards."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def test_the_default_is_text() -> None:
    assert parse_args(_ARGV, {}).log_format == "text"


@pytest.mark.parametrize("flag", ["--log-format", "--log_format"])
def test_the_flag_takes_both_spellings(flag: str) -> None:
    assert parse_args([flag, "json", *_ARGV], {}).log_format == "json"


def test_the_variable_sets_the_default_and_the_flag_wins() -> None:
    environ = {"ELASTICJOB_LOG_FORMAT": "json"}
    assert parse_args(_ARGV, environ).log_format == "json"
    assert parse_args(["--log-format", "text", *_ARGV], environ).log_format == "text"


@pytest.mark.parametrize(
    ("argv", "environ"),
    [(["--log-format", "yaml", *_ARGV], {}), (_ARGV, {"ELASTICJOB_LOG_FORMAT": "yaml"})],
)
def test_a_bad_format_names_the_allowed_ones(argv: list[str], environ: dict[str, str]) -> None:
    with pytest.raises(UsageError, match=r"--log-format 'yaml' must be one of text, json"):
        parse_args(argv, environ)


def _record(msg: str, exc_info: logging._SysExcInfoType | None = None) -> logging.LogRecord:
    return logging.LogRecord(
        "elasticjob_agent.cli", logging.WARNING, __file__, 1, msg, (), exc_info
    )


def test_a_plain_record_has_the_four_keys() -> None:
    line = JsonFormatter().format(_record("hello"))
    entry = json.loads(line)
    assert set(entry) == {"time", "level", "logger", "message"}
    assert entry["level"] == "warning" and entry["logger"] == "elasticjob_agent.cli"
    assert entry["message"] == "hello"
    assert entry["time"].endswith("Z") and "T" in entry["time"]


@pytest.mark.usefixtures("root_logger")
def test_an_event_line_carries_its_context() -> None:
    stream = io.StringIO()
    configure(log_format="json", stream=stream)
    ctx = EventContext("job-1", "node-a")
    events = EventLog(logging.getLogger("elasticjob_agent.test"), ctx)
    events.info("agent_started")
    events.ctx = ctx.with_round(3, 1, 4)
    events.warning("round_joined", x=1)
    before, after = (json.loads(line) for line in stream.getvalue().splitlines())
    assert before["run_id"] == "job-1" and before["node"] == "node-a"
    assert "round" not in before and "rank" not in before  # unknown yet: left out
    assert (after["round"], after["rank"], after["level"]) == (3, 1, "warning")
    assert after["message"].startswith("event=round_joined run_id=job-1 round=3")


def test_an_exception_goes_into_exc_and_a_record_stays_one_line() -> None:
    message = 'a "quoted"\nmulti-line message'
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        line = JsonFormatter().format(_record(message, sys.exc_info()))
    assert "\n" not in line
    entry = json.loads(line)
    assert entry["message"] == message
    assert "RuntimeError: boom" in entry["exc"] and "Traceback" in entry["exc"]


@pytest.mark.usefixtures("root_logger")
def test_text_is_unchanged_and_an_unknown_format_is_refused() -> None:
    stream = io.StringIO()
    configure(stream=stream)
    logging.getLogger("x").info("plain")
    assert stream.getvalue().rstrip().endswith("INFO elasticjob-agent plain")
    with pytest.raises(ValueError, match="text, json"):
        configure(log_format="xml")
