"""The chart's copies of the CRD and the dashboard must equal their single sources."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support.paths import CHART, REPO

COPIES = {
    "crd": (REPO / "crds" / "elasticjob.yaml", CHART / "crds" / "elasticjob.yaml"),
    "dashboard": (
        REPO / "dashboards" / "elasticjob.json",
        CHART / "dashboards" / "elasticjob.json",
    ),
}


@pytest.mark.parametrize("source,copy", COPIES.values(), ids=COPIES.keys())
def test_chart_copy_equals_source(source: Path, copy: Path) -> None:
    assert source.is_file(), f"{source} is missing"
    assert copy.is_file(), f"{copy} is missing: run scripts/sync-chart.sh"
    assert copy.read_bytes() == source.read_bytes(), (
        f"{copy.relative_to(REPO)} differs from {source.relative_to(REPO)}: "
        "run scripts/sync-chart.sh"
    )


def test_sync_script_check_mode_agrees() -> None:
    proc = subprocess.run(
        [str(REPO / "scripts" / "sync-chart.sh"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr


def test_chart_crds_folder_holds_only_the_synced_crd() -> None:
    # Anything else in crds/ would be installed by helm yet have no source to be checked against.
    assert sorted(p.name for p in (CHART / "crds").iterdir()) == ["elasticjob.yaml"]
