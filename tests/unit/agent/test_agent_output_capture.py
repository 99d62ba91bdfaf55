"""The end of a worker's stderr that the agent keeps: bounded by lines and by bytes."""

from __future__ import annotations

import io
import os

from elasticjob_agent.protocol.failure import MAX_TAIL, MAX_TAIL_LINES, WorkerFailure
from elasticjob_agent.supervision.output_capture import OutputTail, capture, pump
from elasticjob_agent.supervision.root_cause import output_tail


def test_the_tail_keeps_the_last_lines_only() -> None:
    tail = OutputTail()
    for i in range(100):
        tail.feed(f"line {i}\n".encode())
    assert tail.value().decode().splitlines() == [f"line {i}" for i in range(80, 100)]
    assert MAX_TAIL_LINES == 20


def test_the_tail_keeps_at_most_its_byte_limit() -> None:
    tail = OutputTail(lines=20, limit=100)
    for _ in range(10):
        tail.feed(b"x" * 40 + b"\n")
    assert len(tail.value()) <= 100
    assert tail.value().endswith(b"x\n")
    huge = OutputTail(limit=100)
    huge.feed(b"y" * 10_000)
    assert huge.value() == b"y" * 100


def test_pump_copies_every_line_to_its_sinks_and_keeps_the_end() -> None:
    src = io.BytesIO(b"a\nb\nc")
    file, console, tail = io.BytesIO(), io.BytesIO(), OutputTail()
    pump(src, tail, file=file, console=console, prefix=b"[0]:")
    assert file.getvalue() == b"a\nb\nc"
    assert console.getvalue() == b"[0]:a\n[0]:b\n[0]:c"
    assert tail.value() == b"a\nb\nc"
    assert src.closed


def test_a_failing_sink_is_dropped_and_the_pump_goes_on() -> None:
    broken = io.BytesIO()
    broken.close()
    tail = OutputTail()
    pump(io.BytesIO(b"1\n2\n"), tail, file=broken)
    assert tail.value() == b"1\n2\n"


def test_capture_drains_a_real_pipe() -> None:
    read, write = os.pipe()
    with os.fdopen(read, "rb") as src:
        captured = capture(src)
        os.write(write, b"python: can't open file 'x.py'\n")
        os.close(write)
        assert captured.drained(timeout=10) == b"python: can't open file 'x.py'\n"


def test_output_tail_is_bounded_by_lines_and_characters() -> None:
    raw = "".join(f"{i}\n" for i in range(50)).encode()
    assert output_tail(raw) == "\n".join(str(i) for i in range(30, 50))
    long = ("z" * 200 + "\n") * 19
    text = output_tail(long.encode())
    assert text is not None and len(text) <= MAX_TAIL


def test_the_summary_names_the_last_line_of_the_tail() -> None:
    failure = WorkerFailure(
        local_rank=0,
        time=1.0,
        rank=0,
        pod="ja-worker-0-0",
        exit_code=2,
        output_tail="python: can't open file '/workspace/train.py': [Errno 2] No such file\n\n",
    )
    assert failure.summary() == (
        "rank 0 on ja-worker-0-0 exited with code 2: "
        "python: can't open file '/workspace/train.py': [Errno 2] No such file"
    )
