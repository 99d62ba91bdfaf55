"""The init process of one emulated container (run as ``python -m elasticjob_localcluster.shim``).

The node emulator starts it as ``ip netns exec <netns> unshare --uts python -m ... <spec.json>``:
``ip netns exec`` gives it the pod's network namespace, a private mount namespace and the pod's
``/etc/hosts``; ``unshare --uts`` a private hostname. The shim then sets the hostname, bind-mounts
the pod's volumes, and runs the container's command as its child. Like a container runtime it
forwards SIGTERM/SIGINT to the command, and when the command exits it kills whatever the command
left running (it is a child subreaper, so orphans re-parent to it) and exits with the command's
status: its exit code, or 128 + the signal that killed it.

Spec (JSON): ``hostname``, ``argv``, ``env``, ``cwd``, ``mounts`` (``source``, ``target``,
``read_only``), ``pid_file`` (where the command's pid goes).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_MS_RDONLY = 1
_MS_REMOUNT = 32
_MS_BIND = 4096
_MS_REC = 16384

_libc = ctypes.CDLL("libc.so.6", use_errno=True)


def _mount(source: str, target: str, read_only: bool) -> None:
    if _libc.mount(source.encode(), target.encode(), None, _MS_BIND | _MS_REC, None) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"bind mount {source} -> {target}: {os.strerror(err)}")
    if read_only:
        flags = _MS_BIND | _MS_REMOUNT | _MS_RDONLY
        if _libc.mount(None, target.encode(), None, flags, None) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"read-only remount of {target}: {os.strerror(err)}")


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    found: list[int] = []
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _kill_leftovers() -> None:
    for _ in range(50):
        pids = _descendants(os.getpid())
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        try:
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        except ChildProcessError:
            return
        time.sleep(0.02)


def _setup(spec: dict[str, Any]) -> None:
    hostname = str(spec["hostname"])
    socket.sethostname(hostname)
    created: list[str] = []
    for mount in spec["mounts"]:
        source, target = str(mount["source"]), str(mount["target"])
        if not Path(target).exists():
            # Mount points missing on the host are made there (the cluster removes them at stop).
            missing = [p for p in [Path(target), *Path(target).parents] if not p.exists()]
            created.extend(str(p) for p in missing)
            if Path(source).is_dir():
                Path(target).mkdir(parents=True, exist_ok=True)
            else:
                Path(target).parent.mkdir(parents=True, exist_ok=True)
                Path(target).touch()
        _mount(source, target, bool(mount.get("read_only", False)))
    if created and spec.get("created_file"):
        with open(spec["created_file"], "a") as record:
            record.write("".join(f"{path}\n" for path in created))


def _hidden_by(cwd: str, mounts: list[dict[str, object]]) -> str:
    """Why ``cwd`` may be missing in the container: a volume mounted over a directory above it
    (the chart mounts an emptyDir on /tmp, so a checkout under /tmp vanishes in its pod)."""
    for mount in mounts:
        target = str(mount["target"]).rstrip("/") or "/"
        if target != "/" and (cwd == target or cwd.startswith(target + "/")):
            return (
                f" (the pod's volume mounted at {target} hides it: emulated pods run from the "
                f"repository's checkout, so keep the checkout outside {target})"
            )
    return ""


def main() -> int:
    """Run the container described by the spec file ``sys.argv[1]``; returns its status."""
    spec = json.loads(Path(sys.argv[1]).read_text())
    # Die with the node emulator, even when it is SIGKILLed: no container outlives its node.
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != int(spec.get("parent_pid", os.getppid())):
        return 137
    try:
        _setup(spec)
    except OSError as err:
        print(f"elasticjob-localcluster: container setup failed: {err}", file=sys.stderr)
        return 128
    _libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    cwd = str(spec["cwd"])
    argv = [str(a) for a in spec["argv"]]
    env = {str(k): str(v) for k, v in spec["env"].items()}
    # Block the forwarded signals until the child exists, so none is lost in between.
    forwarded = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1}
    signal.pthread_sigmask(signal.SIG_BLOCK, forwarded)
    pid = os.fork()
    if pid == 0:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, forwarded)
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        try:
            os.chdir(cwd)
            os.execvpe(argv[0], argv, env)
        except OSError as err:
            print(
                f"elasticjob-localcluster: cannot run {argv[0]!r} in {cwd}: {err}"
                + _hidden_by(cwd, spec["mounts"]),
                file=sys.stderr,
            )
            os._exit(127)
    Path(spec["pid_file"]).write_text(str(pid))

    def forward(signum: int, _frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)

    for signum in forwarded:
        signal.signal(signum, forward)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, forwarded)
    while True:
        try:
            waited, status = os.waitpid(-1, 0)
        except ChildProcessError:
            status = 0
            break
        if waited == pid:
            break
    _kill_leftovers()
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


if __name__ == "__main__":
    sys.exit(main())
