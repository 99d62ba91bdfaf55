"""The automatic hang timeout (protocol.hang_timeout), on an injected clock; and the timer
server that feeds it every step report."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from elasticjob_agent.protocol.hang_timeout import (
    AutoSettings,
    HangTimeoutError,
    StepIntervals,
    percentile,
)
from elasticjob_agent.timers.server import TimerServer
from elasticjob_agent.timers.steps import first_step, is_hung
from elasticjob_agent.timers.table import TimerMessage


def steps(learner: StepIntervals, times: list[float], first: int = 1) -> StepIntervals:
    for i, at in enumerate(times):
        learner = learner.observe(first + i, at)
    return learner


def test_the_first_steps_are_exempt_then_the_ceiling_until_an_interval_is_known() -> None:
    s = AutoSettings(exempt=3, floor=10, ceiling=600)
    learner = StepIntervals(s)
    assert learner.timeout() is None  # nothing yet
    learner = steps(learner, [0.0, 100.0, 400.0])  # compilation-sized gaps: not measured
    assert learner.intervals == ()
    assert learner.timeout() == 600  # judged from here on, with the ceiling
    learner = learner.observe(4, 402.0)
    assert learner.intervals == (2.0,)
    assert learner.timeout() == 10  # 5 x 2 s = 10 s: the floor


def test_timeout_is_factor_times_the_percentile_within_floor_and_ceiling() -> None:
    s = AutoSettings(factor=4, percentile=90, window=10, floor=10, ceiling=100, exempt=0)
    learner = steps(StepIntervals(s), [float(t) for t in range(0, 50, 5)])  # 5 s steps
    assert learner.timeout() == 20  # 4 x 5
    slow = steps(StepIntervals(s), [float(t) for t in range(0, 500, 50)])  # 50 s steps
    assert slow.timeout() == 100  # 4 x 50 = 200, capped
    fast = steps(StepIntervals(s), [t / 10 for t in range(10)])  # 0.1 s steps
    assert fast.timeout() == 10  # floor


def test_only_the_window_counts_and_a_rare_slow_step_is_the_percentile_tail() -> None:
    s = AutoSettings(factor=2, percentile=90, window=5, floor=1, ceiling=1000, exempt=0)
    learner = steps(StepIntervals(s), [0, 100, 101, 102, 103, 104, 105])  # one 100 s gap early
    assert learner.intervals == (1, 1, 1, 1, 1)  # the old gap left the window
    assert learner.timeout() == 2


def test_only_a_new_highest_step_is_an_advance() -> None:
    """With several local workers each reports every step: the repeats are not intervals."""
    s = AutoSettings(exempt=0, floor=1, ceiling=1000, factor=1, percentile=100)
    learner = StepIntervals(s)
    for step, at in [(1, 0.0), (1, 0.01), (2, 3.0), (2, 3.02), (1, 3.5), (3, 6.0)]:
        learner = learner.observe(step, at)
    assert learner.intervals == (3.0, 3.0)
    assert learner.timeout() == 3.0


def test_a_new_round_is_exempt_again_but_keeps_what_it_learned() -> None:
    s = AutoSettings(exempt=2, floor=1, ceiling=1000, factor=3, percentile=100)
    learner = steps(StepIntervals(s), [0, 1, 3, 5])  # intervals measured from step 3: 2, 2
    assert learner.timeout() == 6
    again = learner.new_round()
    assert again.timeout() is None  # warm-up of the restarted group
    again = steps(again, [50.0, 90.0], first=1)  # steps restart from a checkpoint: 1, 2
    assert again.intervals == (2, 2) and again.timeout() == 6


def test_percentile_nearest_rank() -> None:
    values = tuple(float(v) for v in range(1, 101))
    assert percentile(values, 95) == 95
    assert percentile(values, 100) == 100
    assert percentile((7.0,), 50) == 7


def test_is_hung_with_the_learned_timeout_on_an_injected_clock() -> None:
    s = AutoSettings(exempt=0, floor=10, ceiling=1000)
    learner = steps(StepIntervals(s), [0, 1, 2, 3])
    progress = first_step(4, 1000.0, 3.0)
    assert not is_hung(progress, learner.timeout(), 12.9)
    assert is_hung(progress, learner.timeout(), 13.0)


@pytest.mark.parametrize(
    ("conf", "says"),
    [
        ("factor=0.5", "factor must be in 1..100"),
        ("percentile=10", "percentile"),
        ("window=0", "windowSteps"),
        ("window=1.5", "window must be an integer"),
        ("floor=100,ceiling=50", "ceilingSeconds must be >= floorSeconds"),
        ("floor=nan", "finite"),
        ("speed=3", "not key=value"),
        ("factor", "not key=value"),
        ("factor=x", "not a number"),
    ],
)
def test_bad_settings_name_the_field(conf: str, says: str) -> None:
    with pytest.raises(HangTimeoutError, match=says):
        AutoSettings.from_conf(conf)


def test_settings_round_trip_through_the_conf_and_from_the_spec() -> None:
    s = AutoSettings(factor=3, percentile=99, window=50, floor=20, ceiling=900, exempt=2)
    assert AutoSettings.from_conf(s.to_conf()) == s
    assert AutoSettings.from_conf("") == AutoSettings()
    spec = {"mode": "Auto", "factor": 3, "percentile": 99, "windowSteps": 50}
    spec |= {"floorSeconds": 20, "ceilingSeconds": 900, "exemptSteps": 2}
    assert AutoSettings.from_spec(spec) == s
    with pytest.raises(HangTimeoutError, match=r"spec\.progress\.factor"):
        AutoSettings.from_spec({"factor": 1000})


def test_the_timer_server_learns_from_every_step_report() -> None:
    now = [0.0]
    with tempfile.TemporaryDirectory() as tmp:
        server = TimerServer(
            str(Path(tmp) / "t.sock"),
            clock=lambda: 1000.0 + now[0],
            monotonic=lambda: now[0],
            auto_timeout=AutoSettings(exempt=1, floor=1, ceiling=500, factor=2, percentile=100),
        )
        try:
            server.reset(frozenset({42}))
            assert server.learned_timeout() is None
            for step in range(1, 6):
                now[0] = step * 4.0
                server.submit(TimerMessage(op="step", pid=42, step=step))
            assert server.learned_timeout() == 8.0  # 2 x 4 s
            server.reset(frozenset({43}))
            assert server.learned_timeout() is None  # the new group's first step is exempt
        finally:
            server.close()
