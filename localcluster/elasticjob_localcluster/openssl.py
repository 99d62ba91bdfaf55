"""The one way the local cluster runs the ``openssl`` command line tool (certificates and keys of
the cluster, Kueue's webhook and Kubeflow's training operator)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path


def openssl(*args: str, cwd: Path, error: type[Exception]) -> None:
    """Run ``openssl *args`` in ``cwd``; ``error`` (the caller's own type) when openssl is
    missing or fails, with its first two arguments and its stderr."""
    if shutil.which("openssl") is None:
        raise error("openssl not found: install it (apt-get install openssl)")
    done = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise error(f"openssl {' '.join(args[:2])} failed: {done.stderr.strip()}")
