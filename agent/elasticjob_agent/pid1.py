"""The agent as a container's PID 1: a tiny init in front of it reaps orphans and forwards signals.

The kernel gives PID 1 duties no other process has: every orphan in the container (a worker's
own child whose parent died first, a daemonised helper) is re-parented to it and stays a zombie
until PID 1 waits for it, and a signal PID 1 has no handler for is dropped. The agent waits only
for its own workers (a ``waitpid(-1)`` in it would steal their exit statuses from ``Popen``), so
when it finds itself PID 1 it forks once, before it starts anything: the parent stays PID 1 as a
minimal init (what ``tini`` does) that forwards termination signals to the agent and reaps every
child, and the child runs the agent as usual. The init exits with the agent's status (128 + the
signal number when a signal ended it), which is what the container reports.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from types import FrameType

# The signals a container runtime or a user sends to stop or poke the main process.
FORWARDED = (
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
)


def exit_status(wait_status: int) -> int:
    """A shell-style exit code from a ``waitpid`` status: the code, or 128 + signal number."""
    code = os.waitstatus_to_exitcode(wait_status)
    return code if code >= 0 else 128 - code


def init_if_pid1() -> None:
    """Return at once unless this process is PID 1; then fork, and return only in the child.

    The parent never returns: it forwards ``FORWARDED`` signals to the child, reaps all
    children, and exits with the child's exit status when the child ends.
    """
    if os.getpid() != 1:
        return
    child = os.fork()
    if child == 0:
        return
    sys.exit(_serve(child))


def _serve(child: int) -> int:
    def forward(signum: int, _frame: FrameType | None) -> None:
        with contextlib.suppress(ProcessLookupError):  # it just ended: waitpid will see it
            os.kill(child, signum)

    for sig in FORWARDED:
        signal.signal(sig, forward)
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            return 0  # unreachable while the child lives; defensive end of the loop
        if pid == child:
            return exit_status(status)
