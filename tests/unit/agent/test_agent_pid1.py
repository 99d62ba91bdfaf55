"""The agent's PID-1 init (elasticjob_agent.pid1), as a container runs it: a process that is PID 1
of its own PID namespace (``unshare --pid``; this machine runs as root), without an image.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from elasticjob_agent.pid1 import exit_status

REPO = Path(__file__).resolve().parents[3]

# PID 1 of a fresh namespace: init_if_pid1() forks; the child ("the agent") makes an orphan that
# exits at once, reports its pid, then waits for SIGTERM and exits 143 as the agent does.
PROGRAM = """\
import os, signal, subprocess, sys, time
sys.path.insert(0, sys.argv[1])
from elasticjob_agent.pid1 import init_if_pid1

init_if_pid1()
assert os.getpid() != 1
out = sys.argv[2]
signal.signal(signal.SIGTERM, lambda *_: (open(out + "/term", "w").close(), os._exit(143)))
subprocess.run(["sh", "-c", "sleep 0.1 & echo $! > " + out + "/orphan"], check=True)
with open(out + "/ready", "w") as f:
    f.write(str(os.getpid()))
while True:
    time.sleep(0.1)
"""


def test_exit_status_is_the_code_or_128_plus_the_signal() -> None:
    assert exit_status(0) == 0
    assert exit_status(3 << 8) == 3
    assert exit_status(signal.SIGTERM) == 128 + signal.SIGTERM
    assert exit_status(signal.SIGKILL) == 137


def _wait_for(path: Path, proc: subprocess.Popen[str], deadline_s: float = 30) -> None:
    deadline = time.monotonic() + deadline_s
    while not path.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"{path.name} never appeared: {proc.communicate()}")
        time.sleep(0.05)


def test_as_pid1_it_reaps_orphans_forwards_sigterm_and_exits_with_the_agents_code(
    tmp_path: Path,
) -> None:
    if os.geteuid() != 0:
        pytest.fail("needs root for `unshare --pid` (the development machines and CI are root)")
    proc = subprocess.Popen(
        [
            "unshare",
            "--pid",
            "--fork",
            "--mount-proc",
            "--kill-child",
            sys.executable,
            "-c",
            PROGRAM,
            str(REPO / "agent"),
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    _wait_for(tmp_path / "ready", proc)
    orphan = (tmp_path / "orphan").read_text().strip()
    agent = (tmp_path / "ready").read_text().strip()
    # Read PID 1's children from inside the namespace (the host's /proc knows other numbers).
    probe = f"cat /proc/1/task/1/children; grep State /proc/{orphan}/status || echo gone"
    deadline = time.monotonic() + 30
    while True:
        seen = subprocess.run(
            [
                "nsenter",
                "--target",
                str(_namespace_init(proc.pid)),
                "--pid",
                "--mount",
                "sh",
                "-c",
                probe,
            ],
            capture_output=True,
            text=True,
            check=False,
        ).stdout
        if "gone" in seen:
            break
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"the orphan {orphan} was never reaped: {seen}")
        time.sleep(0.1)
    assert seen.split()[0] == agent, f"PID 1's only child is the agent: {seen}"

    # SIGTERM to PID 1 (what the runtime sends) reaches the agent; PID 1 exits with its code.
    os.kill(_namespace_init(proc.pid), signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert (tmp_path / "term").exists(), err
    assert proc.returncode == 143, (proc.returncode, out, err)


def _namespace_init(unshare_pid: int) -> int:
    """The host pid of the namespace's PID 1: the only child of `unshare --fork`."""
    children = Path(f"/proc/{unshare_pid}/task/{unshare_pid}/children").read_text().split()
    assert len(children) == 1, children
    return int(children[0])
