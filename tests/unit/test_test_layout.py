"""The test tree itself: every test module's file name is unique.

The suites have no ``__init__.py`` (pytest's rootdir imports), so two test files with one name
in different folders stop the whole session at collection when they run together, as
``make test`` runs them.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_test_module_names_are_unique() -> None:
    names = Counter(p.name for p in TESTS.rglob("test_*.py"))
    clashes = sorted(name for name, count in names.items() if count > 1)
    assert not clashes, f"rename one of each: {clashes}"
