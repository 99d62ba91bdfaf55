"""The main example as a user applies it, and what its status says about checkpoints: for the
end-to-end tests that resize a training job while it trains."""

from __future__ import annotations

from typing import Any

import yaml

from tests.support.paths import REPO

EXAMPLES = REPO / "examples"


def main_example(steps: int) -> dict[str, Any]:
    """``examples/elasticjob.yaml`` as written, but for its trainer's ``--steps``."""
    return example("elasticjob.yaml", steps)


def example(name: str, steps: int) -> dict[str, Any]:
    """The ElasticJob of ``examples/<name>`` as written, but for its trainer's ``--steps``."""
    (job,) = [d for d in yaml.safe_load_all((EXAMPLES / name).read_text()) if d]
    (trainer,) = [
        c for c in job["spec"]["template"]["spec"]["containers"] if c["name"] == "trainer"
    ]
    args = [str(a) for a in trainer["args"]]
    if "--steps" not in args:
        raise ValueError(f"{name}: its trainer passes no --steps: {args}")
    args[args.index("--steps") + 1] = str(steps)
    trainer["args"] = args
    return dict(job)


def trainer_flag(job: dict[str, Any], flag: str) -> str:
    """The value the job's trainer passes for ``flag`` (e.g. ``--checkpoint-every``)."""
    (trainer,) = [
        c for c in job["spec"]["template"]["spec"]["containers"] if c["name"] == "trainer"
    ]
    args = [str(a) for a in trainer["args"]]
    return args[args.index(flag) + 1]


def checkpoint_of(job: dict[str, Any]) -> dict[str, Any]:
    """``status.checkpoint`` (``{}`` before any agent reported one)."""
    return dict((job.get("status") or {}).get("checkpoint") or {})


def last_saved(job: dict[str, Any]) -> int:
    """``status.checkpoint.lastSavedStep``, ``-1`` when none."""
    value = checkpoint_of(job).get("lastSavedStep")
    return -1 if value is None else int(value)


def last_restore(job: dict[str, Any]) -> dict[str, Any]:
    """``status.checkpoint.lastRestore`` (``{}`` before the first restore)."""
    return dict(checkpoint_of(job).get("lastRestore") or {})


def world_size(job: dict[str, Any]) -> int:
    return int((job.get("status") or {}).get("worldSize") or 0)
