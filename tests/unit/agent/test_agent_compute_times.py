"""Compute time per step: the worker's API, the pure bookkeeping and the health report's part."""

from __future__ import annotations

import json
import math
import os
import socket
import time
from pathlib import Path

import pytest
from elasticjob_agent.args import parse_args
from elasticjob_agent.health.status import AgentStatus
from elasticjob_agent.progress import report_compute, report_step, step_timer
from elasticjob_agent.protocol.compute import (
    MAX_COMPUTE_SECONDS,
    NO_COMPUTE,
    ComputeFigure,
    valid_seconds,
)
from elasticjob_agent.protocol.health import (
    AgentState,
    EtcdStatus,
    HealthReport,
    HealthReportError,
)
from elasticjob_agent.timers import TIMER_SOCKET_ENV, preflight
from elasticjob_agent.timers.compute import MAX_RANKS, ComputeTimes
from elasticjob_agent.timers.server import TimerServer
from elasticjob_agent.timers.table import TimerMessage


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0.25, 0.25),
        (0, 0.0),
        (MAX_COMPUTE_SECONDS, MAX_COMPUTE_SECONDS),
        (-0.1, None),
        (MAX_COMPUTE_SECONDS + 1, None),
        (math.nan, None),
        (math.inf, None),
        (True, None),
        ("0.5", None),
        (None, None),
    ],
)
def test_what_a_timing_may_be(value: object, expected: float | None) -> None:
    assert valid_seconds(value) == expected


def test_the_node_figure_is_the_median_of_each_ranks_median() -> None:
    times = ComputeTimes(window=3)
    for seconds in (1.0, 1.0, 9.0, 1.0):  # the oldest timing leaves the window; 9.0 is noise
        times.observe(10, seconds)
    for seconds in (2.0, 2.0):
        times.observe(11, seconds)
    for seconds in (3.0,):
        times.observe(12, seconds)
    assert times.figure() == ComputeFigure(seconds=2.0, samples=6, rejected=0)


def test_bad_timings_are_counted_and_never_stored() -> None:
    times = ComputeTimes()
    for bad in (-1.0, math.nan, math.inf, 1e9, None, "x", True):
        assert not times.observe(10, bad)
    assert times.figure() == ComputeFigure(None, 0, 7)
    assert times.observe(10, 0.5)
    times.reset()  # a new group: timings start over, the count of bad ones does not
    assert times.figure() == ComputeFigure(None, 0, 7)


def test_ranks_beyond_the_bound_are_refused() -> None:
    times = ComputeTimes(window=1)
    for pid in range(MAX_RANKS + 5):
        times.observe(pid, 1.0)
    assert len(times.by_rank) == MAX_RANKS
    assert times.figure().rejected == 5


def test_a_window_must_hold_a_timing() -> None:
    with pytest.raises(ValueError, match="window must be >= 1"):
        ComputeTimes(window=0)


@pytest.mark.parametrize(
    ("raw", "seconds"),
    [
        ({"op": "compute", "pid": 1, "seconds": 0.5}, 0.5),
        ({"op": "compute", "pid": 1, "seconds": -3}, None),
        ({"op": "compute", "pid": 1, "seconds": "fast"}, None),
        ({"op": "compute", "pid": 1}, None),
    ],
)
def test_compute_messages_decode_leniently(raw: dict[str, object], seconds: float | None) -> None:
    """A nonsense timing still decodes (as ``None``): the server counts it instead of logging
    a warning per step."""
    message = TimerMessage.decode(json.dumps(raw).encode())
    assert (message.op, message.seconds) == ("compute", seconds)


def _wait_for(server: TimerServer, samples: int, rejected: int) -> ComputeFigure:
    deadline = time.monotonic() + 10.0
    while time.monotonic() < deadline:
        figure = server.compute()
        if figure.samples >= samples and figure.rejected >= rejected:
            return figure
        time.sleep(0.02)
    return server.compute()


def test_timings_reach_the_server_from_group_pids_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = TimerServer(str(tmp_path / "t.sock"))
    try:
        monkeypatch.setenv(TIMER_SOCKET_ENV, server.path)
        server.reset(frozenset({os.getpid() + 1}))
        report_compute(5.0)  # not a member of the group: ignored, and not counted as bad
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:  # the member's, after it
            sock.sendto(b'{"op": "compute", "pid": %d, "seconds": 1.0}' % (os.getpid() + 1),
                        server.path)  # fmt: skip
        assert _wait_for(server, 1, 0) == ComputeFigure(1.0, 1, 0)
        server.reset(frozenset({os.getpid()}))
        assert server.compute() == ComputeFigure(None, 0, 0)
        with step_timer():
            time.sleep(0.05)
        report_compute(-1.0)  # nonsense: counted
        report_compute(float("nan"))  # sent as NaN, which Python's JSON reads: counted
        figure = _wait_for(server, 1, 2)
        assert figure.samples == 1 and figure.rejected == 2
        assert figure.seconds is not None and 0.05 <= figure.seconds < 5.0
        report_step(3)  # a timing is not a step, and a step is not a timing
        with pytest.raises(RuntimeError), step_timer():
            raise RuntimeError("a failed step is no timing")
        report_compute(0.5)
        figure = _wait_for(server, 2, 2)
        assert figure.samples == 2
    finally:
        server.close()


def test_step_timer_outside_the_agent_does_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TIMER_SOCKET_ENV, raising=False)
    with step_timer():
        pass
    report_compute(1.0)


def _status(figure: ComputeFigure) -> AgentStatus:
    return AgentStatus(
        "job", "n", 0, 1.0, etcd=lambda: EtcdStatus(True, 1.0, None), compute=lambda: figure
    )


def test_the_report_carries_compute_time_only_while_running() -> None:
    status = _status(ComputeFigure(0.42, 40, 3))
    report = status.report()
    assert (report.compute_seconds, report.compute_samples, report.compute_rejected) == (
        None,
        0,
        3,
    )
    status.update(state=AgentState.RUNNING)
    report = status.report()
    assert (report.compute_seconds, report.compute_samples, report.compute_rejected) == (
        0.42,
        40,
        3,
    )
    text = report.to_json()
    assert (text["computeSeconds"], text["computeSamples"], text["computeRejected"]) == (
        0.42,
        40,
        3,
    )
    assert HealthReport.loads(report.dumps()) == report
    assert _status(NO_COMPUTE).report().compute_seconds is None


@pytest.mark.parametrize(
    ("field", "value", "error"),
    [
        ("computeSeconds", -1.0, "finite and >= 0"),
        ("computeSeconds", "1", "must be a number"),
        ("computeSamples", -1, "out of range"),
        ("computeRejected", 1.5, "must be an integer"),
    ],
)
def test_bad_compute_fields_make_the_report_invalid(field: str, value: object, error: str) -> None:
    report = _status(ComputeFigure(0.5, 1, 0)).report().to_json()
    with pytest.raises(HealthReportError, match=error):
        HealthReport.from_json({**report, field: value})


# --- the pre-flight check ------------------------------------------------------------------------


class _Ticks:
    """A clock that advances ``step`` seconds at every reading."""

    def __init__(self, step: float) -> None:
        self.now, self.step = 0.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def test_the_preflight_check_is_bounded_and_extrapolates() -> None:
    assert preflight.extrapolate(2.0, 4, 8) == 4.0
    assert preflight.extrapolate(2.0, 0, 8) == 16.0  # none done counts as one: finite
    # A node so slow that the deadline passes inside the first run: the check stops there.
    figure = preflight.measure(chunks=100, runs=3, deadline=1.0, clock=_Ticks(0.25))
    assert math.isfinite(figure) and figure > 1.0
    real = preflight.measure(chunks=2, runs=3)
    assert 0.0 < real < preflight.DEADLINE_SECONDS
    with pytest.raises(ValueError, match="all > 0"):
        preflight.measure(chunks=0)


def test_preflight_is_a_flag_with_a_pet_variable() -> None:
    assert parse_args(["--standalone", "--preflight", "t.py"], {}).preflight
    assert parse_args(["--standalone", "t.py"], {"PET_PREFLIGHT": "1"}).preflight
    assert not parse_args(["--standalone", "t.py"], {}).preflight


def test_the_report_carries_the_preflight_figure() -> None:
    status = _status(NO_COMPUTE)
    status.update(preflight_seconds=0.12)
    report = status.report()
    assert report.to_json()["preflightSeconds"] == 0.12
    assert HealthReport.loads(report.dumps()).preflight_seconds == 0.12
    with pytest.raises(HealthReportError, match="preflightSeconds"):
        HealthReport.from_json({**report.to_json(), "preflightSeconds": -1})
