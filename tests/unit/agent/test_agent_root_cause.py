"""Root cause of a worker failure: error-file parsing (hostile input too), records, reports."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
from elasticjob_agent.protocol.failure import (
    MAX_FAILURE_BYTES,
    MAX_MESSAGE,
    FailureRecordError,
    FinalCounts,
    WorkerFailure,
    counts_from_termination_message,
    from_termination_message,
)
from elasticjob_agent.protocol.health import (
    AgentState,
    EtcdStatus,
    HealthReport,
    HealthReportError,
)
from elasticjob_agent.supervision.failure_report import read_failure, write_termination_message
from elasticjob_agent.supervision.root_cause import (
    MAX_ERROR_FILE_BYTES,
    MAX_TERMINATION_MESSAGE,
    describe,
    first_failure,
    last_frame,
    output_tail,
    parse_error_file,
    signal_name,
    termination_message,
)

_CALLSTACK = (
    "Traceback (most recent call last):\n"
    '  File "/usr/lib/python3/site-packages/torch/errors/__init__.py", line 355, in wrapper\n'
    "    return f(*args, **kwargs)\n"
    '  File "/app/train.py", line 42, in step\n'
    '    raise ValueError("loss is nan")\n'
    "ValueError: loss is nan\n"
)


def _record(message: object, callstack: object = _CALLSTACK, stamp: object = "1795324767") -> bytes:
    extra = {"py_callstack": callstack, "timestamp": stamp}
    return json.dumps({"message": {"message": message, "extraInfo": extra}}).encode()


def test_torch_record_format_gives_type_message_frame_and_time() -> None:
    info = parse_error_file(_record("ValueError: loss is nan"))
    assert info is not None
    assert info.exception_type == "ValueError"
    assert info.message == "loss is nan"
    assert info.frame == "/app/train.py:42 in step"
    assert info.timestamp == 1795324767.0


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"not json",
        b"[1, 2]",
        b'{"message": 42}',
        b'{"message": {"message": ["a"]}}',
        b'{"message": {"message": "   "}}',
        b"\xff\xfe\x00garbage",
        b"[" * 100_000 + b"]" * 100_000,
        b'{"message": "' + b"x" * (MAX_ERROR_FILE_BYTES + 10) + b'"}',
    ],
)
def test_unreadable_error_files_give_nothing_and_never_raise(raw: bytes) -> None:
    assert parse_error_file(raw) is None


def test_wrong_types_inside_a_record_are_dropped_not_trusted() -> None:
    info = parse_error_file(_record("RuntimeError: boom", callstack=123, stamp={"x": 1}))
    assert info is not None
    assert (info.exception_type, info.message, info.frame, info.timestamp) == (
        "RuntimeError",
        "boom",
        None,
        None,
    )
    for stamp in ("nan", "inf", "-5", True, "1e400", "soon"):
        parsed = parse_error_file(_record("E: x", stamp=stamp))
        assert parsed is not None and parsed.timestamp is None, stamp


def test_huge_strings_are_capped() -> None:
    info = parse_error_file(_record("ValueError: " + "y" * 100_000, callstack="z" * 100_000))
    assert info is not None
    assert info.message is not None and len(info.message) == MAX_MESSAGE
    assert info.message.endswith("...")
    assert info.frame is None


def test_a_message_without_a_type_is_kept_as_message() -> None:
    info = parse_error_file(json.dumps({"message": "the disk is full, giving up"}).encode())
    assert info is not None
    assert (info.exception_type, info.message) == (None, "the disk is full, giving up")


def test_last_frame_is_the_innermost() -> None:
    assert last_frame(_CALLSTACK) == "/app/train.py:42 in step"
    assert last_frame("no traceback here") is None


def test_signal_names() -> None:
    assert signal_name(-signal.SIGKILL) == "SIGKILL"
    assert signal_name(-signal.SIGSEGV) == "SIGSEGV"
    assert signal_name(128 + signal.SIGTERM) == "SIGTERM"
    assert signal_name(1) is None
    assert signal_name(-200) == "signal 200"


def test_output_tail_keeps_whole_last_lines_within_the_limit() -> None:
    raw = b"".join(f"line {i}\n".encode() for i in range(10_000))
    tail = output_tail(raw, limit=100)
    assert tail is not None and len(tail) <= 100
    assert tail.endswith("line 9999") and tail.startswith("line ")
    assert output_tail(b"  \n") is None
    assert output_tail(b"\xff\xfe bad utf8") is not None


def test_describe_a_signal_and_an_exception() -> None:
    killed = describe(
        local_rank=1,
        status=-signal.SIGKILL,
        seen_at=10.0,
        rank=3,
        node="n",
        pod="job-worker-1-0",
        error_file=None,
        stderr_tail=b"Traceback...\nsome last words\n",
    )
    assert (killed.signal, killed.exit_code, killed.rank) == ("SIGKILL", None, 3)
    assert killed.output_tail is not None and killed.output_tail.endswith("some last words")
    assert killed.summary() == "rank 3 on job-worker-1-0 killed by SIGKILL"
    raised = describe(
        local_rank=0,
        status=1,
        seen_at=10.0,
        rank=0,
        node="n",
        pod=None,
        error_file=_record("ValueError: loss is nan"),
        stderr_tail=b"ignored when the error file says why",
    )
    assert (raised.exit_code, raised.signal, raised.output_tail) == (1, None, None)
    assert raised.time == 1795324767.0
    assert raised.summary() == (
        "rank 0 on n exited with code 1: ValueError: loss is nan (at /app/train.py:42 in step)"
    )


def test_record_round_trips_and_stays_under_its_bound() -> None:
    failure = describe(
        local_rank=7,
        status=1,
        seen_at=1.5,
        rank=2**40,
        node="n" * 10_000,
        pod="p" * 10_000,
        error_file=_record(
            'Boom: "' + "\\" * 50_000, callstack='  File "' + "f" * 999 + '", line 1, in g'
        ),
        stderr_tail=None,
    )
    text = json.dumps(failure.to_json())
    assert len(text.encode()) <= MAX_FAILURE_BYTES * 2  # escapes double the backslashes
    assert WorkerFailure.from_json(json.loads(text)) == failure
    message = termination_message(failure)
    assert len(message) <= MAX_TERMINATION_MESSAGE
    assert message.startswith(b"rank 1099511627776 on ppp")


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"time": 1.0}, "localRank"),
        ({"localRank": True, "time": 1.0}, "localRank"),
        ({"localRank": 0, "time": "now"}, "time"),
        ({"localRank": 0, "time": -1}, "time"),
        ({"localRank": 0, "time": 1.0, "message": "m" * (MAX_MESSAGE + 1)}, "message"),
        ({"localRank": 0, "time": 1.0, "signal": 9}, "signal"),
        ({"localRank": 0, "time": 1.0, "exitCode": 2**60}, "exitCode"),
        ({"localRank": 0, "time": 1.0, "rank": -1}, "rank"),
        ({"localRank": 0, "time": 1.0, "oomKilled": "yes"}, "oomKilled"),
    ],
)
def test_record_parser_is_strict(data: dict[str, object], field: str) -> None:
    with pytest.raises(FailureRecordError, match=field):
        WorkerFailure.from_json(data)


def test_an_oom_kill_is_said_and_round_trips() -> None:
    killed = WorkerFailure(
        local_rank=1, time=2.0, rank=3, pod="p", signal="SIGKILL", oom_killed=True
    )
    assert killed.summary() == (
        "rank 3 on p killed by SIGKILL (the kernel's OOM killer: the container reached its "
        "memory limit)"
    )
    assert killed.to_json()["oomKilled"] is True
    assert WorkerFailure.from_json(json.loads(json.dumps(killed.to_json()))) == killed
    # An ordinary kill carries no key (records of earlier agents parse alike).
    plain = WorkerFailure(local_rank=1, time=2.0, signal="SIGKILL")
    assert "oomKilled" not in plain.to_json()
    assert not WorkerFailure.from_json(plain.to_json()).oom_killed


def _report(failure: WorkerFailure | None) -> HealthReport:
    return HealthReport(
        "run", "node", AgentState.RUNNING, EtcdStatus(True, 1.0, None), last_failure=failure
    )


def test_health_report_carries_the_failure_and_refuses_a_bad_one() -> None:
    failure = WorkerFailure(local_rank=0, time=2.0, rank=1, exception_type="KeyError", message="x")
    assert HealthReport.loads(_report(failure).dumps()).last_failure == failure
    assert HealthReport.loads(_report(None).dumps()).last_failure is None
    bad = _report(None).to_json()
    bad["lastFailure"] = {"localRank": 0, "time": 1.0, "message": ["not", "a", "string"]}
    with pytest.raises(HealthReportError, match=r"lastFailure\.message"):
        HealthReport.loads(json.dumps(bad))


def test_read_failure_and_termination_message_on_files(tmp_path: Path) -> None:
    error_file = tmp_path / "attempt_0" / "0" / "error.json"
    error_file.parent.mkdir(parents=True)
    (error_file.parent / "stderr.log").write_bytes(b"x" * 1_000_000 + b"\nlast line\n")
    failure = read_failure(
        error_file, local_rank=0, status=-signal.SIGSEGV, seen_at=3.0, rank=0, node="n", pod=None
    )
    assert failure.signal == "SIGSEGV" and failure.output_tail == "last line"
    target = tmp_path / "termination-log"
    assert write_termination_message(failure, str(target))
    assert target.read_bytes().startswith(b"rank 0 on n killed by SIGSEGV\n")
    assert not write_termination_message(failure, str(tmp_path / "missing-dir" / "log"))


def test_the_cause_comes_before_the_ranks_that_lost_their_peer() -> None:
    def failure(local_rank: int, when: float, message: str | None) -> WorkerFailure:
        exc = None if message is None else message.split(": ", 1)[0]
        text = None if message is None else message.split(": ", 1)[1]
        return WorkerFailure(local_rank, when, exception_type=exc, message=text)

    peer_lost = failure(0, 1.0, "RuntimeError: [pair.cc:534] Connection closed by peer [::1]:1")
    cause = failure(1, 2.0, "ValueError: loss is nan")
    killed = failure(2, 3.0, None)
    assert first_failure([peer_lost, cause, killed]) == cause
    assert first_failure([peer_lost, killed]) == killed
    assert first_failure([failure(3, 5.0, None), failure(2, 5.0, None)]).local_rank == 2


def test_a_survivor_without_an_error_file_is_known_by_its_last_line() -> None:
    """No ``@record``: the survivor's reset is only in its output tail. It is still a symptom,
    so the rank that died first (killed, saying nothing) is the cause."""
    reset = WorkerFailure(
        0,
        1.0,
        exit_code=1,
        output_tail="Traceback (most recent call last):\n"
        "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Read error "
        "[10.100.1.3]:47024: Connection reset by peer",
    )
    killed = WorkerFailure(1, 2.0, signal="SIGKILL")
    assert reset.is_consequence() and not killed.is_consequence()
    assert first_failure([reset, killed]) == killed


def test_the_error_file_time_orders_records_when_known() -> None:
    def record(error_file: bytes | None, file_time: float | None) -> WorkerFailure:
        return describe(
            local_rank=0,
            status=1,
            seen_at=9.0,
            rank=0,
            node=None,
            pod=None,
            error_file=error_file,
            stderr_tail=None,
            error_file_time=file_time,
        )

    assert record(_record("E: x"), 4.25).time == 4.25
    assert record(_record("E: x"), None).time == 1795324767.0
    assert record(None, None).time == 9.0


def test_termination_message_reads_back_strictly() -> None:
    failure = WorkerFailure(
        local_rank=1, time=5.0, rank=3, signal="SIGKILL", message="timer 'x' expired", round=7
    )
    assert from_termination_message(termination_message(failure).decode()) == failure
    for bad in (
        "",
        "just a summary\n",
        'summary\n{"lastFailure": {"localRank": 0, "time": NaN}}\n',
        'summary\n{"lastFailure": [1]}\n',
        'summary\n{"lastFailure": {"localRank": 0, "time": 1, "rank": "x"}}\n',
        "summary\n" + '{"lastFailure": ' + "[" * 5000 + "\n",
    ):
        assert from_termination_message(bad) is None, bad


def test_termination_message_carries_the_final_counts_after_the_record() -> None:
    failure = WorkerFailure(local_rank=0, time=2.0, rank=0, pod="p-0", exit_code=3, round=1)
    counts = FinalCounts("run-1", {"failure": 2, "membership": 0})
    text = termination_message(failure, counts).decode()
    assert text.splitlines()[0] == "rank 0 on p-0 exited with code 3"
    assert from_termination_message(text) == failure
    assert counts_from_termination_message(text) == counts
    assert counts_from_termination_message(termination_message(failure).decode()) is None
    # No failure of this node's own (a peer's spent the budget): the counts alone.
    alone = termination_message(None, counts).decode()
    assert from_termination_message(alone) is None
    assert counts_from_termination_message(alone) == counts
    # A record too long to fit is dropped before the counts are.
    huge = WorkerFailure(
        local_rank=0, time=2.0, exception_type="E", message="m" * MAX_MESSAGE, frame="f" * 512,
        output_tail="\\" * 1536,
    )  # fmt: skip
    text = termination_message(huge, counts).decode()
    assert len(text.encode()) <= MAX_TERMINATION_MESSAGE
    assert from_termination_message(text) is None
    assert counts_from_termination_message(text) == counts


@pytest.mark.parametrize(
    "line",
    [
        '{"restarts": {"runId": "", "byReason": {}}}',
        '{"restarts": {"runId": "r", "byReason": {"failure": -1}}}',
        '{"restarts": {"runId": "r", "byReason": {"failure": true}}}',
        '{"restarts": {"runId": "r", "byReason": {"failure": 1e3}}}',
        '{"restarts": {"runId": "r", "byReason": [1]}}',
        '{"restarts": {"runId": "r", "byReason": {"failure": NaN}}}',
        '{"restarts": "r"}',
        '{"restarts": {"runId": "r", "byReason": {"x": 1}',
    ],
)
def test_final_counts_from_a_pod_are_refused_when_malformed(line: str) -> None:
    assert counts_from_termination_message(f"summary\n{line}\n") is None
