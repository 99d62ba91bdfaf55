"""The Dockerfiles' install steps, replayed in fresh venvs (no Docker engine exists here).

The operator image: the build stage's own COPY/RUN lines against a temporary root, then both the
entry point and the package imports in the resulting venv, and no torch in it. The training
image: the example's pip step with a wheel built from this checkout, on top of a "base image"
that already holds torch, which pip must leave alone.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.dockerfile import Replay, Stage, base_environment, parse
from tests.support.paths import REPO

# The host interpreter plays the base image's python (same minor version as python:3.11-slim).
BASE_PYTHON = "/usr/bin/python3.11"


def _pip_cache() -> str:
    # The images build with PIP_NO_CACHE_DIR; here a cache outside the repo keeps reruns quick.
    cache = Path(os.environ.get("ELASTICJOB_CACHE", Path.home() / ".cache" / "elasticjob"))
    return str(cache / "pip")


def _run(cmd: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False, env=env)


def test_operator_image_install_steps(tmp_path: Path) -> None:
    if not Path(BASE_PYTHON).is_file():
        pytest.fail(f"{BASE_PYTHON} is missing: the replay needs a Python 3.11 like the image's")
    _, stages = parse((REPO / "Dockerfile").read_text())
    build = stages[0]
    env = base_environment(BASE_PYTHON, tmp_path)
    replay = Replay(
        context=REPO,
        root=tmp_path / "root",
        path_prefixes=("/opt/elasticjob", "/src"),
        env=env,
    )
    replay.run(build)
    assert replay.env.get("PIP_NO_CACHE_DIR") == "1", "ENV lines are replayed as written"

    venv = replay.host_path("/opt/elasticjob")
    help_out = _run([str(venv / "bin" / "elasticjob-operator"), "--help"])
    assert help_out.returncode == 0, help_out.stderr
    imports = _run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import elasticjob_operator, elasticjob_agent.protocol.health, kopf, "
            "kubernetes_asyncio, aetcd, prometheus_client; import importlib.util as u; "
            "print(u.find_spec('torch') is None, u.find_spec('pytest') is None)",
        ]
    )
    assert imports.returncode == 0, imports.stderr
    assert imports.stdout.split() == ["True", "True"], "the operator image must hold no torch/tests"
    # The package came from the copied sources, not from this checkout's editable install.
    where = _run(
        [str(venv / "bin" / "python"), "-c", "import elasticjob_operator as m; print(m.__file__)"]
    )
    assert str(venv) in where.stdout, where.stdout


def _base_site_with_torch(tmp_path: Path) -> Path:
    """A stand-in for a PyTorch base image's site-packages: this venv's, minus elasticjob and the
    agent's own dependencies (which the example's pip step must install)."""
    site = Path(
        _run(
            [
                sys.executable,
                "-c",
                "import torch, os; print(os.path.dirname(os.path.dirname(torch.__file__)))",
            ]
        ).stdout.strip()
    )
    farm = tmp_path / "base-site"
    farm.mkdir()
    skip = ("elasticjob", "__editable__", "_elasticjob", "aetcd", "prometheus_client")
    for entry in site.iterdir():
        if entry.name.lower().startswith(skip) or entry.name.startswith("__editable__"):
            continue
        (farm / entry.name).symlink_to(entry)
    return farm


def test_training_image_install_step(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    built = _run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(wheels),
            str(REPO),
        ]
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = wheels.glob("elasticjob-*.whl")

    venv = tmp_path / "image"
    created = _run([BASE_PYTHON, "-m", "venv", str(venv)])
    assert created.returncode == 0, created.stderr
    # The base image's torch: visible to pip (so it is not reinstalled) through a .pth file.
    farm = _base_site_with_torch(tmp_path)
    (venv / "lib" / "python3.11" / "site-packages" / "base-image.pth").write_text(f"{farm}\n")

    _, stages = parse((REPO / "examples" / "training-image" / "Dockerfile").read_text())
    (stage,) = stages
    env = base_environment(str(venv / "bin" / "python"), tmp_path)
    env["PATH"] = f"{venv / 'bin'}:{env['PATH']}"
    env["PIP_CACHE_DIR"] = _pip_cache()
    replay = Replay(
        context=REPO / "examples",
        root=tmp_path / "root",
        path_prefixes=("/wheels",),
        env=env,
        build_args={"ELASTICJOB_SPEC": str(wheel)},
    )
    # Only the dependency step: COPY/WORKDIR/USER of the user's code need no replay.
    install = [
        i for i in stage.instructions if i.keyword in {"ARG", "ENV"} or "pip install" in i.argument
    ]
    replay.run(Stage(base=stage.base, name=None, instructions=install))

    check = _run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import elasticjob_agent, aetcd, prometheus_client, torch; "
            "print(elasticjob_agent.__file__); print(torch.__file__)",
        ]
    )
    assert check.returncode == 0, check.stderr
    agent_file, torch_file = check.stdout.split()
    assert agent_file.startswith(str(venv)), "the agent must come from the wheel"
    assert torch_file.startswith(str(farm)), "pip must keep the base image's torch"
    agent_help = _run([str(venv / "bin" / "elasticjob-agent"), "--help"], env=env)
    assert agent_help.returncode == 0, agent_help.stderr
    assert "--nnodes" in agent_help.stdout
