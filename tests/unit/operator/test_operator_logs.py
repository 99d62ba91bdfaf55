"""``--log-format json``: one JSON object a line, with the job where known."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import kopf
import pytest
from elasticjob_operator import logs
from elasticjob_operator.settings import OperatorSettings, SettingsError
from kopf._core.actions.loggers import LocalObjectLogger


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    stream = io.StringIO()
    logs.configure("info", "json", stream)
    try:
        yield stream
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])


def _lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def _body(kind: str, name: str) -> kopf.Body:
    return kopf.Body(
        {
            "apiVersion": "v1",
            "kind": kind,
            "metadata": {"namespace": "team", "name": name, "uid": "u1"},
        }
    )


def test_a_plain_record(captured: io.StringIO) -> None:
    logging.getLogger("elasticjob_operator.x").warning("hello %s", "there")
    (line,) = _lines(captured)
    assert set(line) == {"time", "level", "logger", "message"}
    assert line["level"] == "warning" and line["message"] == "hello there"
    assert line["logger"] == "elasticjob_operator.x" and line["time"].endswith("Z")


def test_kopfs_object_logger_of_a_job_names_it(captured: io.StringIO) -> None:
    logger = LocalObjectLogger(body=_body("ElasticJob", "demo"), settings=kopf.OperatorSettings())
    logger.info("reconcile loop started")
    (line,) = _lines(captured)
    assert (line["namespace"], line["job"]) == ("team", "demo")
    assert line["message"].endswith("reconcile loop started")


def test_another_objects_logger_names_only_the_namespace(captured: io.StringIO) -> None:
    logger = LocalObjectLogger(
        body=_body("Pod", "demo-worker-0-0"), settings=kopf.OperatorSettings()
    )
    logger.info("indexed")
    (line,) = _lines(captured)
    assert line["namespace"] == "team" and "job" not in line


def test_extra_names_the_job(captured: io.StringIO) -> None:
    logging.getLogger("x").info("probe", extra={"namespace": "team", "job": "demo"})
    (line,) = _lines(captured)
    assert (line["namespace"], line["job"]) == ("team", "demo")


def test_an_exception_stays_on_its_line(captured: io.StringIO) -> None:
    try:
        raise RuntimeError("boom\nsecond line")
    except RuntimeError:
        logging.getLogger("x").exception("failed")
    (line,) = _lines(captured)
    assert "RuntimeError: boom" in line["exception"]


def test_text_format() -> None:
    stream = io.StringIO()
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    try:
        logs.configure("info", "text", stream)
        logging.getLogger("x").info("hello")
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
    assert stream.getvalue().rstrip().endswith("INFO x: hello")


def test_an_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError, match="text, json"):
        logs.configure("info", "xml")


@pytest.mark.parametrize(("raw", "expected"), [("", "text"), ("JSON", "json"), ("text", "text")])
def test_the_setting(raw: str, expected: str) -> None:
    assert OperatorSettings.from_env({"ELASTICJOB_LOG_FORMAT": raw}).log_format == expected


def test_a_bad_setting_names_the_variable() -> None:
    with pytest.raises(SettingsError, match="ELASTICJOB_LOG_FORMAT"):
        OperatorSettings.from_env({"ELASTICJOB_LOG_FORMAT": "yaml"})
