"""cgroup v1 (hybrid) trees of the real nodes: create, list, kill at once, remove.

Every process of a real node lives below its cgroup (see :mod:`.layout`), in every hierarchy,
so the freezer hierarchy can stop them all in one write before they are killed: a node dies
at once, as a machine does, rather than process by process.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

CGROUP_FS = Path("/sys/fs/cgroup")


class CgroupError(RuntimeError):
    """A cgroup could not be created or emptied."""


def hierarchies() -> list[Path]:
    """Mount points of the cgroup hierarchies under /sys/fs/cgroup (v1 ones and ``unified``)."""
    found = []
    with open("/proc/self/mountinfo") as mounts:
        for line in mounts:
            fields = line.split()
            sep = fields.index("-")
            fstype, mount_point = fields[sep + 1], Path(fields[4])
            if fstype in ("cgroup", "cgroup2") and mount_point.parent == CGROUP_FS:
                found.append(mount_point)
    if not found:
        raise CgroupError("no cgroup hierarchy is mounted under /sys/fs/cgroup")
    return sorted(found)


def _copy_cpuset(path: Path) -> None:
    # A new cpuset cgroup starts with no CPUs and no memory nodes: nothing could run in it.
    for name in ("cpuset.cpus", "cpuset.mems"):
        target = path / name
        if target.exists() and not target.read_text().strip():
            target.write_text((path.parent / name).read_text())


def create(cgroup: str) -> None:
    """Create ``cgroup`` (absolute, e.g. ``/ej0-nodes/real-1/system``) and its parents in every
    hierarchy."""
    for root in hierarchies():
        path = root
        for part in Path(cgroup).relative_to("/").parts:
            path = path / part
            path.mkdir(exist_ok=True)
            if root.name == "cpuset":
                _copy_cpuset(path)


def enter_command(cgroup: str) -> list[str]:
    """argv prefix that moves the command into ``cgroup`` in every hierarchy, then execs it."""
    files = " ".join(
        str(root / Path(cgroup).relative_to("/") / "cgroup.procs") for root in hierarchies()
    )
    script = f'for f in {files}; do echo $$ > "$f" || exit 121; done; exec "$@"'
    return ["sh", "-c", script, "sh"]


def pids(cgroup: str) -> set[int]:
    """Every process in ``cgroup`` or below it, in any hierarchy."""
    found: set[int] = set()
    for root in hierarchies():
        top = root / Path(cgroup).relative_to("/")
        if not top.is_dir():
            continue
        for procs in top.rglob("cgroup.procs"):
            with contextlib.suppress(OSError, ValueError):
                found.update(int(p) for p in procs.read_text().split())
    return found


def kill_all(cgroup: str, timeout: float = 20) -> None:
    """SIGKILL every process below ``cgroup`` at once (frozen first, so none runs on after
    another died) and wait until they are gone."""
    freezer = CGROUP_FS / "freezer" / Path(cgroup).relative_to("/")
    frozen = freezer.is_dir()
    if frozen:
        with contextlib.suppress(OSError):
            (freezer / "freezer.state").write_text("FROZEN")
    deadline = time.monotonic() + timeout
    while True:
        alive = pids(cgroup)
        for pid in alive:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if frozen:
            with contextlib.suppress(OSError):
                (freezer / "freezer.state").write_text("THAWED")
        if not alive:
            return
        if time.monotonic() > deadline:
            raise CgroupError(f"processes {sorted(alive)} in {cgroup} survived SIGKILL")
        time.sleep(0.1)


def remove(cgroup: str, timeout: float = 20) -> None:
    """Kill what runs below ``cgroup`` and remove the tree from every hierarchy."""
    kill_all(cgroup, timeout)
    deadline = time.monotonic() + timeout
    for root in hierarchies():
        top = root / Path(cgroup).relative_to("/")
        if not top.is_dir():
            continue
        dirs = sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts))
        for path in [*reversed(dirs), top]:
            while True:
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError as err:
                    # A killed process leaves its cgroup only once it has been reaped.
                    if time.monotonic() > deadline:
                        raise CgroupError(f"cannot remove cgroup {path}: {err}") from err
                    time.sleep(0.1)
