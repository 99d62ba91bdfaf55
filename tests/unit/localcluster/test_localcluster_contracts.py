"""Every module of the local cluster and of its image builder is placed in a layers contract of
.importlinter: import-linter leaves a module no contract names unconstrained, so a new module
must be given its floor. (The rules themselves live in .importlinter only.)"""

from __future__ import annotations

import configparser
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
CONTRACTS = {
    "localcluster-layers": REPO / "localcluster" / "elasticjob_localcluster",
    "localcluster-realnodes-layers": REPO
    / "localcluster"
    / "elasticjob_localcluster"
    / "realnodes",
    "imagebuild-layers": REPO / "localcluster" / "images" / "imagebuild",
}


def _modules(package: Path) -> set[str]:
    """The package's modules and subpackages, less its ``__init__``."""
    found = {p.stem for p in package.glob("*.py")} - {"__init__"}
    return found | {p.name for p in package.iterdir() if (p / "__init__.py").is_file()}


@pytest.mark.parametrize("contract", sorted(CONTRACTS))
def test_every_module_has_a_floor(contract: str) -> None:
    parser = configparser.ConfigParser()
    parser.read(REPO / ".importlinter")
    named = set(re.findall(r"[A-Za-z_]\w*", parser[f"importlinter:contract:{contract}"]["layers"]))
    missing = sorted(_modules(CONTRACTS[contract]) - named)
    assert not missing, f"place {missing} in the {contract} contract of .importlinter"
