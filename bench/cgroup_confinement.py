"""A process confined like a container: a cgroup of its own with a memory and a CPU limit.

The kubelet gives a container a memory cgroup whose limit is ``resources.limits.memory`` (the
kernel's OOM killer ends it past that) and a CPU quota of ``resources.limits.cpu`` per period
(CFS throttling past that). ``Confinement`` sets up the same for a host process, on cgroup v1
(the ``memory`` and ``cpu`` hierarchies) or v2 (the unified one), and reads back what a
container's owner would see: the working set (usage minus inactive file pages, as the kubelet
counts it), the kernel's OOM kills, and the periods the CPU quota throttled. Needs root.
"""

from __future__ import annotations

import math
import shlex
import threading
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
PERIOD_US = 100_000


def _stat(text: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if value.strip().lstrip("-").isdigit():
            out[key] = int(value.strip())
    return out


class Confinement:
    """A cgroup (v1: one per hierarchy) named ``name`` with the given limits; ``command``
    starts a program inside it."""

    def __init__(self, name: str, memory_bytes: int, cpu_cores: float) -> None:
        self.v2 = (ROOT / "cgroup.controllers").exists()
        quota = max(1000, round(cpu_cores * PERIOD_US))
        if self.v2:
            self.memory = self.cpu = ROOT / name
            self.memory.mkdir()
            (self.memory / "memory.max").write_text(str(memory_bytes))
            (self.memory / "memory.swap.max").write_text("0")
            (self.memory / "cpu.max").write_text(f"{quota} {PERIOD_US}")
        else:
            self.memory, self.cpu = ROOT / "memory" / name, ROOT / "cpu" / name
            self.memory.mkdir()
            self.cpu.mkdir()
            (self.memory / "memory.limit_in_bytes").write_text(str(memory_bytes))
            (self.cpu / "cpu.cfs_period_us").write_text(str(PERIOD_US))
            (self.cpu / "cpu.cfs_quota_us").write_text(str(quota))
        self.memory_bytes = memory_bytes
        self.cpu_cores = cpu_cores
        self._peak = 0
        self._overall = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._sampler: threading.Thread | None = None

    def command(self, argv: list[str]) -> list[str]:
        """``argv`` started inside the cgroup: a shell moves itself in, then execs it (no
        ``preexec_fn``, which is unsafe in a program with threads)."""
        moves = " && ".join(
            f"echo $$ > {shlex.quote(str(d / 'cgroup.procs'))}"
            for d in sorted({self.memory, self.cpu})
        )
        return ["/bin/sh", "-c", f'{moves} && exec "$@"', "confined", *argv]

    def working_set(self) -> int:
        """Bytes charged to the cgroup minus inactive file pages (the kubelet's working set:
        what the OOM killer cannot reclaim)."""
        if self.v2:
            usage = int((self.memory / "memory.current").read_text())
            inactive = _stat((self.memory / "memory.stat").read_text()).get("inactive_file", 0)
        else:
            usage = int((self.memory / "memory.usage_in_bytes").read_text())
            stat = _stat((self.memory / "memory.stat").read_text())
            inactive = stat.get("total_inactive_file", 0)
        return max(0, usage - inactive)

    def oom_kills(self) -> int:
        name = "memory.events" if self.v2 else "memory.oom_control"
        return _stat((self.memory / name).read_text()).get("oom_kill", 0)

    def throttling(self) -> tuple[int, int]:
        """(CFS periods, periods in which the quota throttled the cgroup), so far."""
        stat = _stat((self.cpu / "cpu.stat").read_text())
        return stat.get("nr_periods", 0), stat.get("nr_throttled", 0)

    # -- the peak working set, sampled --------------------------------------------------------

    def start_sampling(self, every: float = 1.0) -> None:
        def run() -> None:
            while not self._stop.wait(every):
                try:
                    now = self.working_set()
                except OSError:
                    continue
                with self._lock:
                    self._peak = max(self._peak, now)
                    self._overall = max(self._overall, now)

        self._sampler = threading.Thread(target=run, name="cgroup-sampler", daemon=True)
        self._sampler.start()

    def take_peak(self) -> float:
        """The peak working set (MiB) since the last call, and start a new one."""
        with self._lock:
            peak, self._peak = self._peak, 0
        try:
            peak = max(peak, self.working_set())
        except OSError:
            return math.nan
        return peak / 2**20

    def overall_peak(self) -> float:
        """The peak working set (MiB) since sampling started, between windows included (the
        mass creation of jobs)."""
        with self._lock:
            return self._overall / 2**20

    def remove(self) -> None:
        """Stop sampling and remove the cgroup (its processes must have exited)."""
        self._stop.set()
        if self._sampler is not None:
            self._sampler.join(timeout=5)
        for directory in {self.memory, self.cpu}:
            try:
                directory.rmdir()
            except OSError as exc:
                print(f"cgroup {directory} not removed: {exc}")
