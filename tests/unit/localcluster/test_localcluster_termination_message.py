"""The emulator's terminated-state message, as the kubelet takes it."""

from __future__ import annotations

from pathlib import Path

from elasticjob_localcluster.container import termination_message


def test_the_termination_message_file_wins_and_is_capped(tmp_path: Path) -> None:
    message, log = tmp_path / "termination-log", tmp_path / "0.log"
    message.write_bytes(b"m" * 5000)
    log.write_text("log line\n")
    assert termination_message(message, log, 1, "FallbackToLogsOnError") == "m" * 4096


def test_without_a_message_the_log_is_used_only_on_failure_with_fallback(tmp_path: Path) -> None:
    message, log = tmp_path / "termination-log", tmp_path / "0.log"
    message.write_bytes(b"")
    log.write_text("".join(f"line {i}\n" for i in range(200)))
    assert termination_message(message, log, 1, "File") == ""
    assert termination_message(message, log, 0, "FallbackToLogsOnError") == ""
    fallback = termination_message(message, log, 1, "FallbackToLogsOnError")
    assert fallback.splitlines()[-1] == "line 199"
    assert len(fallback) <= 2048 and len(fallback.splitlines()) <= 80


def test_a_missing_file_is_no_message(tmp_path: Path) -> None:
    assert termination_message(tmp_path / "none", tmp_path / "none.log", 1, "File") == ""
