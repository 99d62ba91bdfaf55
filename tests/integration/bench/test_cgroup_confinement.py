"""The scale bench's confinement is a real cgroup: a program over its memory limit is killed
by the kernel and counted, a busy one is throttled by its CPU quota, and the working set is
read back."""

from __future__ import annotations

import os
import subprocess
import sys

from cgroup_confinement import Confinement

# Creating cgroups needs root, as the bench itself does (CI runs as root): no skip.

HOG = "b = []\nwhile True:\n    b.append(bytearray(16 * 2**20))\n"
BUSY = (
    "import time\nx = 0\nend = time.monotonic() + 1.5\n"
    "while time.monotonic() < end:\n    x += 1\nprint(len(open('/proc/self/status').read()))\n"
)


def test_a_program_over_the_memory_limit_is_oom_killed_and_counted() -> None:
    box = Confinement(f"ej-test-oom-{os.getpid()}", 64 * 2**20, 1.0)
    try:
        done = subprocess.run(box.command([sys.executable, "-c", HOG]), timeout=60, check=False)
        assert done.returncode == -9, done
        assert box.oom_kills() == 1
    finally:
        box.remove()


def test_a_busy_program_is_throttled_by_its_quota_and_its_working_set_is_read() -> None:
    box = Confinement(f"ej-test-cpu-{os.getpid()}", 256 * 2**20, 0.1)
    try:
        done = subprocess.run(
            box.command([sys.executable, "-c", BUSY]), timeout=60, check=True, capture_output=True
        )
        assert int(done.stdout) > 0
        periods, throttled = box.throttling()
        assert periods > 0 and throttled > 0, (periods, throttled)
        assert box.working_set() >= 0
        assert box.oom_kills() == 0
    finally:
        box.remove()
