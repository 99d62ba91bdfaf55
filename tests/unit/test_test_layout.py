"""The test tree itself: every test module's file name is unique, and shared helpers live in
one support package.

The suites have no ``__init__.py`` (pytest's rootdir imports), so two test files with one name
in different folders stop the whole session at collection when they run together, as
``make test`` runs them. For the same reason a helper module beside the tests is importable by
its bare name only from that folder: helpers live in ``tests/support`` (``tests.support.*``),
and conftest files hold only fixtures.
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
SUPPORT = TESTS / "support"


def test_test_module_names_are_unique() -> None:
    names = Counter(p.name for p in TESTS.rglob("test_*.py"))
    clashes = sorted(name for name, count in names.items() if count > 1)
    assert not clashes, f"rename one of each: {clashes}"


def _imported(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, module) of every import; a relative import as ``.module``."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            found.append((node.lineno, "." * node.level + (node.module or "")))
    return found


def test_tests_import_shared_helpers_from_the_support_package_only() -> None:
    # Modules of the tree outside the support package, by the bare names pytest's rootdir
    # imports give them (scripts that tests run as programs are not imported).
    local = {p.stem for p in TESTS.rglob("*.py") if SUPPORT not in p.parents}
    bad = []
    for path in sorted(TESTS.rglob("*.py")):
        for line, module in _imported(ast.parse(path.read_text(), str(path))):
            top, _, rest = module.partition(".")
            if (
                module.startswith(".")
                or (top == "tests" and not (rest == "support" or rest.startswith("support.")))
                or top in local
            ):
                bad.append(f"{path.relative_to(TESTS)}:{line}: {module}")
    assert not bad, "import helpers from tests.support:\n" + "\n".join(bad)
