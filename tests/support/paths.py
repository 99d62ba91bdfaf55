"""Where the repository and its chart are, for helpers and tests that read files of the tree."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "elasticjob-operator"
