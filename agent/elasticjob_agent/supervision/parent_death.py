"""Children that die with the agent: ``PR_SET_PDEATHSIG`` (Linux), set between fork and exec."""

from __future__ import annotations

import ctypes
import ctypes.util
import signal

_PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def die_with_parent() -> None:
    """``preexec_fn`` for ``subprocess.Popen``: SIGKILL the child when its parent thread ends.

    Spawn from a long-lived thread (the main thread): the signal fires when the spawning thread
    exits, not only the process.
    """
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
