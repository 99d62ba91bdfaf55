"""Whether the kernel's OOM killer ended a worker: the container cgroup's ``oom_kill`` count.

A worker killed by the OOM killer dies of ``SIGKILL`` like one killed by anyone else; the
cgroup (v2 ``memory.events``, v1 ``memory.oom_control``) counts the kills. The agent reads the
count when a group starts and again when a worker died of ``SIGKILL``: a higher count means the
OOM killer did it (failure-policy reason ``OOMKilled``). Outside a cgroup that exposes it the
count is unknown and nothing is called an OOM kill.
"""

from __future__ import annotations

from pathlib import Path

_SOURCES = (
    Path("/sys/fs/cgroup/memory.events"),
    Path("/sys/fs/cgroup/memory/memory.oom_control"),
)


def parse_oom_kills(text: str) -> int | None:
    """The ``oom_kill N`` line of a cgroup memory file; ``None`` when it has none."""
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill" and value.strip().isdigit():
            return int(value.strip())
    return None


def oom_kills(sources: tuple[Path, ...] = _SOURCES) -> int | None:
    """This container's OOM kills so far; ``None`` when no cgroup file tells."""
    for path in sources:
        try:
            found = parse_oom_kills(path.read_text()[:4096])
        except OSError:
            continue
        if found is not None:
            return found
    return None
