"""A warm worker: an interpreter that imports torch ahead of time, then becomes a worker.

Started by the agent's warm pool as ``python -u -m elasticjob_agent.supervision.zygote`` with
the agent's environment. It imports the modules in ``ELASTICJOB_PRELOAD`` (default
``torch,torch.distributed,torch.nn.parallel``), then blocks until the agent writes one JSON line
on stdin: ``{"argv": [script, *args], "env": {...}, "module": false}``. It then takes that
environment and runs the script as ``python -u script args`` would (``__name__ ==
"__main__"``, ``sys.argv``, ``sys.path[0]`` the script's directory), or the module as
``python -m`` would. Importing torch is most of a worker's start-up, so a restart with warm
workers skips it. End of input (the pool closed) exits 0.
"""

from __future__ import annotations

import importlib
import json
import os
import runpy
import sys

PRELOAD_ENV = "ELASTICJOB_PRELOAD"
_DEFAULT_PRELOAD = "torch,torch.distributed,torch.nn.parallel"


def _preload() -> None:
    for name in os.environ.get(PRELOAD_ENV, _DEFAULT_PRELOAD).split(","):
        if name.strip():
            try:
                importlib.import_module(name.strip())
            except Exception as exc:  # the script will fail on its own import, with context
                print(f"elasticjob zygote: cannot preload {name}: {exc}", file=sys.stderr)


def _restore_priority(nice: int) -> None:
    """Spares wait at low priority; a worker runs at the agent's. Linux keeps a nice value per
    thread, and importing torch started threads, so raise every one of them."""
    try:
        tids = [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        tids = [0]
    for tid in tids:
        try:
            os.setpriority(os.PRIO_PROCESS, tid, nice)
        except OSError as exc:
            print(f"elasticjob zygote: cannot restore priority: {exc}", file=sys.stderr)
            return


def _check_script(path: str) -> None:
    """Fail as ``python script.py`` does when the script cannot be opened (the same message
    and exit status 2), not with runpy's traceback."""
    try:
        with open(path, "rb"):
            pass
    except OSError as exc:
        sys.stderr.write(
            f"{sys.orig_argv[0]}: can't open file {os.path.abspath(path)!r}: "
            f"[Errno {exc.errno}] {exc.strerror}\n"
        )
        sys.exit(2)


def main() -> None:
    _preload()
    line = sys.stdin.readline()
    if not line:
        return
    spec = json.loads(line)
    if spec.get("nice") is not None:
        _restore_priority(int(spec["nice"]))
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.environ.clear()
    os.environ.update(spec["env"])
    argv = [str(a) for a in spec["argv"]]
    sys.argv = list(argv)
    if spec.get("module"):
        runpy.run_module(argv[0], run_name="__main__", alter_sys=True)
    else:
        _check_script(argv[0])
        sys.path[0] = os.path.dirname(os.path.realpath(argv[0]))
        runpy.run_path(argv[0], run_name="__main__")


if __name__ == "__main__":
    main()
