"""Warm workers run a script exactly as ``python -u script args`` would."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from elasticjob_agent.supervision.warm_pool import WarmPool, can_restore_priority

SCRIPT = """
import os, sys
print("name", __name__)
print("argv", sys.argv)
print("path0", sys.path[0])
print("file", __file__)
print("rank", os.environ["RANK"], "extra" in os.environ)
tids = os.listdir("/proc/self/task")
print("nice", sorted({os.getpriority(os.PRIO_PROCESS, int(t)) for t in tids}))
sys.exit(int(sys.argv[1]))
"""


def test_spare_becomes_the_worker(tmp_path: Path) -> None:
    script = tmp_path / "job" / "work.py"
    script.parent.mkdir()
    script.write_text(SCRIPT)
    out = tmp_path / "out.txt"
    env = dict(os.environ, ELASTICJOB_PRELOAD="json")
    pool = WarmPool(sys.executable, env, size=1)
    try:
        worker_env = dict(env, RANK="5")
        with open(out, "wb") as sink:
            # The spare inherits our stdout: point fd 1 at a file while it is started.
            saved = os.dup(1)
            os.dup2(sink.fileno(), 1)
            try:
                pool.fill()
            finally:
                os.dup2(saved, 1)
                os.close(saved)
        procs = pool.take([str(script), "7"], [worker_env], module=False)
        assert procs is not None and len(procs) == 1
        assert procs[0].wait(60) == 7
        text = out.read_text()
        assert "name __main__" in text
        assert f"argv ['{script}', '7']" in text
        assert f"path0 {script.parent}" in text
        assert f"file {script}" in text
        assert "rank 5 False" in text  # the worker's environment replaces the spare's
        # Spares wait at nice 19; the worker (every thread) runs at our priority again.
        assert f"nice [{os.getpriority(os.PRIO_PROCESS, 0)}]" in text
        assert pool.take([str(script), "0"], [worker_env], module=False) is None  # used up
    finally:
        pool.close()


def test_spares_are_niced_only_when_the_priority_can_come_back() -> None:
    assert can_restore_priority(euid=0, nice_limit=0, current_nice=0)
    assert can_restore_priority(euid=1000, nice_limit=20, current_nice=0)
    assert not can_restore_priority(euid=1000, nice_limit=0, current_nice=0)
    assert can_restore_priority(euid=1000, nice_limit=10, current_nice=10)


def test_spares_say_when_their_imports_are_done(tmp_path: Path) -> None:
    """``ready()`` counts a spare once its preloads are imported, and no longer once it is
    taken or dead: what a hot spare's ``warmWorkers`` reports."""
    gate = tmp_path / "gate"
    preload = tmp_path / "slow_preload.py"
    # A preload that blocks until the test opens the gate: "importing torch" in slow motion.
    # It says when it began (one file per spare), so "not ready yet" is checked while it runs.
    began = tmp_path / "began"
    began.mkdir()
    preload.write_text(
        f"import os, time\nopen(os.path.join({str(began)!r}, str(os.getpid())), 'w').close()\n"
        f"while not os.path.exists({str(gate)!r}):\n    time.sleep(0.05)\n"
    )
    env = dict(os.environ, ELASTICJOB_PRELOAD="slow_preload")
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env.get("PYTHONPATH", "")])
    pool = WarmPool(sys.executable, env, size=2)
    try:
        pool.fill()
        assert pool.size == 2
        deadline = time.monotonic() + 60
        while len(list(began.iterdir())) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(list(began.iterdir())) == 2, "the spares never began their preloads"
        assert pool.ready() == 0  # still importing
        gate.touch()
        deadline = time.monotonic() + 60
        while pool.ready() < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert pool.ready() == 2
        (taken,) = pool.take([str(tmp_path / "absent.py")], [dict(env)], module=False) or []
        taken.wait(60)
        assert pool.ready() == 1
        pool.fill()  # one new spare: importing, not ready yet (the gate is open: it will be)
        deadline = time.monotonic() + 60
        while pool.ready() < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert pool.ready() == 2
    finally:
        pool.close()
    assert pool.ready() == 0
